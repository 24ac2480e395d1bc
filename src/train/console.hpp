// What rank 0's console shows besides log lines, decided once at start:
// whether the in-place progress line (`\r\033[K` ... ) is drawn, and how to
// stop the run cleanly from where it was started.
//
// The progress line is for a person watching a terminal. It must never end
// up in a batch log, where every redraw becomes a line of escape codes. The
// catch: Open MPI's mpirun hands each rank a pseudo-terminal of its own and
// copies what the rank writes to mpirun's own stdout, so a rank's
// isatty(stdout) is true even under `mpirun ... > log`. The rank's stdout is
// therefore judged together with its parent's (mpirun, orted, a shell): when
// the two differ, the parent is relaying, and the parent's stdout is the one
// a person would see. share/doc/running-on-clusters.md ("Console output")
// states the rule for users.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace ftrain {

// What a process can find out about where its stdout goes.
struct TerminalFacts {
  bool stdout_is_tty = false;
  // When the parent process's stdout is another file than ours (the parent
  // relays our output, as mpirun does through a pseudo-terminal): whether the
  // parent's stdout is a terminal. nullopt: the parent writes to the same
  // place as we do, or /proc does not tell.
  std::optional<bool> relay_stdout_is_tty;
  std::string relay_name;  // the parent's command name ("mpirun"), for messages
};

TerminalFacts probe_terminal();

struct ProgressDecision {
  bool show = false;
  std::string reason;  // one phrase, printed in the run header
};

// `deck_mode` is the deck's `progress auto|on|off`; FTRAIN_PROGRESS (same
// words) overrides it. In auto mode the line is off under a scheduler
// (SLURM_JOB_ID, PBS_JOBID), off when stdout is not a terminal, and off when
// a relaying parent's stdout is not a terminal. A bad FTRAIN_PROGRESS value
// is a UserError.
using EnvironmentLookup = std::function<const char*(const char*)>;
ProgressDecision decide_progress(const std::string& deck_mode, const EnvironmentLookup& env,
                                 const TerminalFacts& facts);

// One line for the run header: how to stop this run so that it checkpoints
// and exits 0, for the launcher the environment shows (mpirun, srun, none).
std::string stop_instructions(const EnvironmentLookup& env, bool has_checkpoint_dir);

// The environment as an EnvironmentLookup (std::getenv).
const char* process_environment(const char* name);

}  // namespace ftrain
