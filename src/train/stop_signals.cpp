#include "train/stop_signals.hpp"

#include <csignal>

namespace ftrain {

namespace {
volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void ftrain_on_stop_signal(int signo) { g_stop_signal = signo; }
}  // namespace

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = ftrain_on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGUSR1, &action, nullptr);
  action.sa_flags = SA_RESTART | SA_RESETHAND;
  sigaction(SIGINT, &action, nullptr);
}

int agreed_stop_signal(Communicator& world) {
  return static_cast<int>(world.all_reduce_max(static_cast<double>(g_stop_signal)));
}

std::string signal_name(int signo) {
  switch (signo) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    default: return "signal " + std::to_string(signo);
  }
}

}  // namespace ftrain
