// One owner per run directory (train/run_dir_lock.hpp, issue 35): a second
// process is refused naming the holder's pid and the deck line; the lock
// dies with its holder (kill -9 included) and the next owner says that the
// earlier run crashed; a clean release leaves nothing to report; run_dir and
// checkpoint dir are locked once when they are the same directory.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "base/error.hpp"
#include "train/run_dir_lock.hpp"

using namespace ftrain;
namespace fs = std::filesystem;

namespace {

class RunDirLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("ftrain_run_dir_lock_" + std::to_string(::getpid()))).string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  OutputLocation run_dir() const { return {"run_dir", dir_, DeckLocation{"run.in", 8}}; }

  // A child process that takes the lock, says so through a pipe, then waits
  // to be killed. Returns its pid.
  pid_t holder() {
    int ready[2];
    EXPECT_EQ(::pipe(ready), 0);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(ready[0]);
      DirectoryLock lock = DirectoryLock::acquire(run_dir(), nullptr);
      const char ok = 'y';
      if (::write(ready[1], &ok, 1) != 1) ::_exit(2);
      for (;;) ::pause();
    }
    ::close(ready[1]);
    char got = 0;
    EXPECT_EQ(::read(ready[0], &got, 1), 1);
    ::close(ready[0]);
    return pid;
  }

  std::string dir_;
};

TEST_F(RunDirLockTest, ASecondOwnerIsRefusedNamingTheHolder) {
  const pid_t pid = holder();
  std::string message;
  try {
    DirectoryLock::acquire(run_dir(), nullptr);
  } catch (const UserError& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("run.in:8: run_dir '" + dir_ + "' is in use by another ftrain run: host "),
            std::string::npos)
      << message;
  EXPECT_NE(message.find(" pid " + std::to_string(pid) + ","), std::string::npos) << message;
  // kill -9: the kernel drops the lock; the next owner reports the crash.
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  std::string notice;
  {
    DirectoryLock lock = DirectoryLock::acquire(run_dir(), &notice);
    EXPECT_NE(notice.find("no longer holds it (host "), std::string::npos) << notice;
    EXPECT_NE(notice.find(" pid " + std::to_string(pid) + ","), std::string::npos) << notice;
    EXPECT_NE(notice.find("crashed or was killed"), std::string::npos) << notice;
  }
  // That owner ended cleanly: nothing to report next time.
  notice.clear();
  DirectoryLock again = DirectoryLock::acquire(run_dir(), &notice);
  EXPECT_EQ(notice, "");
}

TEST_F(RunDirLockTest, RunDirAndCheckpointDirAreLockedOnceWhenTheSame) {
  std::vector<std::string> notices;
  const auto locks = lock_run_directories(
      {run_dir(), {"checkpoint dir", dir_ + "/.", DeckLocation{"run.in", 9}}, {"save_final directory", dir_, {}}},
      &notices);
  EXPECT_EQ(locks.size(), 1u);
  EXPECT_TRUE(notices.empty());
}

}  // namespace
