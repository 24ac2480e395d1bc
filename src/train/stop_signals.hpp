// Stopping a run cleanly on a signal: SIGTERM and SIGUSR1 (what SLURM sends
// before the time limit) and SIGINT (Ctrl-C, where the launcher forwards it
// or there is none) are recorded, not fatal; the run loop agrees on them
// across ranks once per step and stops at a step boundary, after saving.
#pragma once

#include <string>

#include "comm/communicator.hpp"

namespace ftrain {

// From here on the three signals are recorded. A second Ctrl-C means "now":
// SIGINT's handler is one-shot, the default (terminate) applies after it.
void install_stop_handlers();

// The signal every rank acts on: the highest one any rank received, 0 for
// none. Collective (one all-reduce), so every rank takes the same branch.
int agreed_stop_signal(Communicator& world);

// "SIGTERM", "SIGINT", "SIGUSR1", else "signal N".
std::string signal_name(int signo);

}  // namespace ftrain
