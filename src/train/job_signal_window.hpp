// How long a job has between the scheduler's warning signal and its end:
// the time ftrain has to finish a step and write a checkpoint. `ftrain
// --check` compares it with its estimate of a step plus a save.
//
// Where it comes from, first match wins:
//   1. --job-script FILE: SLURM's `#SBATCH --signal=[B:|R:]SIG[@SECONDS]`
//      among the directives before the script's first command, where sbatch
//      reads them (SECONDS defaults to 60, as sbatch's does), or for a PBS script that
//      runs jobs/pbs/launch.sh, its FTRAIN_WARNING_S (set in the script, else
//      launch.sh's default of 120);
//   2. the environment: SBATCH_SIGNAL (what sbatch reads for --signal) or
//      FTRAIN_WARNING_S (jobs/pbs/launch.sh).
// SLURM gives a job no variable holding its --signal, so inside a job the
// script is the only source.
#pragma once

#include <optional>
#include <string>

#include "train/console.hpp"

namespace ftrain {

struct SignalWindow {
  double seconds = 0;
  std::string source;  // "jobs/slurm/llama70b.sbatch:30: #SBATCH --signal=B:USR1@120"
};

// From an sbatch --signal value ("B:USR1@120", "USR1", "10@30"); nullopt
// when it is not one.
std::optional<double> sbatch_signal_seconds(const std::string& value);

// Throws UserError when `job_script` cannot be read or names no window.
std::optional<SignalWindow> find_signal_window(const std::string& job_script, const EnvironmentLookup& env);

}  // namespace ftrain
