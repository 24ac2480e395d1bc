#include "core/launcher_watch.hpp"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include <unistd.h>

namespace ftrain {

namespace {

std::atomic<pid_t> g_launcher{0};  // 0: not watching

bool under_a_launcher() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "SLURM_STEP_ID"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && *value != '\0') return true;
  }
  return false;
}

[[noreturn]] void end_now(const char* what) {
  // Called from the watch thread or the commit, never from a signal handler;
  // one write(2), then _exit: no destructor or atexit handler may flush or
  // commit anything for a job that no longer exists.
  std::string line = "ftrain: rank process " + std::to_string(::getpid()) + ": its launcher (parent pid " +
                     std::to_string(g_launcher.load()) + ") is gone; stopping now" +
                     (what != nullptr ? std::string(" instead of ") + what : std::string()) +
                     ", nothing more is written\n";
  [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
  ::_exit(1);
}

}  // namespace

void start_launcher_watch() {
  if (g_launcher.load() != 0 || !under_a_launcher()) return;
  const pid_t parent = ::getppid();
  if (parent <= 1) return;  // already orphaned (or a container's init launched us): nothing to compare with
  g_launcher.store(parent);
  std::thread([] {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (launcher_gone()) end_now(nullptr);
    }
  }).detach();
}

bool launcher_gone() {
  const pid_t launcher = g_launcher.load();
  return launcher != 0 && ::getppid() != launcher;
}

void stop_if_launcher_gone(const char* what) {
  if (launcher_gone()) end_now(what);
}

}  // namespace ftrain
