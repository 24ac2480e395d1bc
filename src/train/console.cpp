#include "train/console.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string_view>

#include "base/error.hpp"

namespace ftrain {

namespace {

bool set(const EnvironmentLookup& env, const char* name) {
  const char* value = env(name);
  return value != nullptr && *value != '\0';
}

std::string parent_command_name() {
  std::ifstream comm("/proc/" + std::to_string(getppid()) + "/comm");
  std::string name;
  std::getline(comm, name);
  return name;
}

bool is_terminal_file(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) return false;
  // Only character devices are opened: no side effects on pipes or sockets.
  const int fd = open(path.c_str(), O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  const bool tty = isatty(fd) != 0;
  close(fd);
  return tty;
}

bool is_open_mpi_launcher(std::string_view name) {
  return name == "mpirun" || name == "mpiexec" || name == "orterun" || name == "prterun" || name == "prte";
}

}  // namespace

const char* process_environment(const char* name) { return std::getenv(name); }

TerminalFacts probe_terminal() {
  TerminalFacts facts;
  facts.stdout_is_tty = isatty(STDOUT_FILENO) != 0;
  if (!facts.stdout_is_tty) return facts;
  struct stat mine {}, theirs {};
  const std::string parent_stdout = "/proc/" + std::to_string(getppid()) + "/fd/1";
  if (fstat(STDOUT_FILENO, &mine) != 0 || stat(parent_stdout.c_str(), &theirs) != 0) return facts;  // unknowable
  const bool same = mine.st_dev == theirs.st_dev && mine.st_ino == theirs.st_ino && mine.st_rdev == theirs.st_rdev;
  if (same) return facts;
  facts.relay_stdout_is_tty = is_terminal_file(parent_stdout);
  facts.relay_name = parent_command_name();
  return facts;
}

ProgressDecision decide_progress(const std::string& deck_mode, const EnvironmentLookup& env,
                                 const TerminalFacts& facts) {
  std::string mode = deck_mode;
  std::string source = "deck: progress " + deck_mode;
  if (const char* forced = env("FTRAIN_PROGRESS"); forced != nullptr && *forced != '\0') {
    mode = forced;
    if (mode != "auto" && mode != "on" && mode != "off")
      FT_USER_ERROR() << "environment: FTRAIN_PROGRESS must be auto, on or off, got '" << mode << "'";
    source = "FTRAIN_PROGRESS=" + mode;
  }
  if (mode == "on") return {true, source};
  if (mode == "off") return {false, source};
  if (set(env, "SLURM_JOB_ID")) return {false, "a SLURM job (SLURM_JOB_ID is set)"};
  if (set(env, "PBS_JOBID")) return {false, "a PBS job (PBS_JOBID is set)"};
  if (!facts.stdout_is_tty) return {false, "stdout is not a terminal"};
  if (facts.relay_stdout_is_tty.has_value()) {
    const std::string who = facts.relay_name.empty() ? "the parent process" : facts.relay_name;
    if (!*facts.relay_stdout_is_tty)
      return {false, who + " relays the output and its stdout is not a terminal"};
    return {true, who + "'s stdout is a terminal"};
  }
  return {true, "stdout is a terminal"};
}

std::string stop_instructions(const EnvironmentLookup& env, bool has_checkpoint_dir) {
  std::string how;
  if (set(env, "SLURM_JOB_ID")) {
    const std::string job = env("SLURM_JOB_ID");
    how = "scancel --signal=USR1 " + job + " (srun tasks; the jobs/ scripts: scancel --batch --signal=USR1 " + job +
          ")";
  } else if (set(env, "PBS_JOBID")) {
    how = std::string("qsig -s USR1 ") + env("PBS_JOBID") + " (the jobs/pbs scripts forward it to the ranks)";
  } else if (set(env, "OMPI_COMM_WORLD_SIZE")) {
    const std::string parent = parent_command_name();
    const std::string pid = is_open_mpi_launcher(parent) ? std::to_string(getppid()) : "<mpirun pid>";
    how = "kill -USR1 " + pid +
          " (Open MPI's mpirun forwards SIGUSR1; on Ctrl-C it kills the ranks within seconds, too soon to "
          "checkpoint)";
  } else if (set(env, "PMI_RANK") || set(env, "PMIX_RANK")) {
    how = "SIGUSR1 or SIGTERM to the ranks (or to a launcher that forwards it)";
  } else {
    how = "Ctrl-C, or kill -USR1 " + std::to_string(getpid());
  }
  return "to stop cleanly (finish the step, " + std::string(has_checkpoint_dir ? "checkpoint" : "no checkpoint dir") +
         ", exit 0): " + how;
}

}  // namespace ftrain
