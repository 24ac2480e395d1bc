# preemptible.sh — sourced by jobs/{slurm,pbs}/launch.sh: run an MPI launcher
# so that a scheduler's warning signal becomes an ftrain checkpoint-and-exit,
# and requeue the job when (and only when) the run stopped early.
#
# Why a wrapper at all: the batch shell is what the scheduler signals
# (`#SBATCH --signal=B:USR1@120`, PBS's SIGTERM before a kill). ftrain's
# ranks stop cleanly on SIGUSR1 or SIGTERM (share/doc/checkpoints.md), but
# Open MPI's mpirun KILLS the job on SIGTERM and forwards only SIGUSR1/2, so
# whatever arrives here is passed on as SIGUSR1. srun forwards SIGUSR1 to
# its tasks too.
#
# ftrain_run_preemptible LOG REQUEUE_CMD -- LAUNCHER ARGS...
#   runs LAUNCHER ARGS... with its output appended to LOG (and to stdout);
#   returns the launcher's exit status. When ftrain reports that it stopped on
#   a signal (exit 0 and "stop signal received" in its output) it runs
#   REQUEUE_CMD (a string, eval'd; empty = no requeue): the requeued job's
#   `resume auto` continues from the checkpoint just written.
#   When the launcher fails while FTRAIN_PREEMPTED_CMD (eval'd; unset or
#   empty = never) says the scheduler is preempting the job, it runs
#   REQUEUE_CMD too: SLURM's preemption sends SIGTERM to the job steps only,
#   which under mpirun are Open MPI's daemons, and they end the ranks before
#   a checkpoint; a job that then ends FAILED inside the grace time is not
#   requeued by SLURM, and its progress since the last periodic checkpoint
#   would wait for a manual resubmission.

ftrain_run_preemptible() {
  local log=$1 requeue=$2
  shift 2
  [ "$1" = "--" ] && shift
  local start_line=0
  [ -f "$log" ] && start_line=$(wc -l < "$log")
  # tee through a process substitution whose pid we keep (bash >= 5.1 can
  # wait for it), so that only it is waited for below, not every background
  # job of the caller (pbs/launch.sh's walltime timer runs for hours).
  local tee_fd tee_pid
  exec {tee_fd}> >(tee -a "$log")
  tee_pid=$!
  "$@" >&"$tee_fd" 2>&1 &
  local launcher=$!
  # Forward, never act: the checkpoint is ftrain's job (it finishes the step,
  # writes, exits 0). A second signal is forwarded again, harmlessly.
  trap 'echo "ftrain job: signal received, asking ftrain to checkpoint and stop" >&2; kill -USR1 '"$launcher"' 2>/dev/null' USR1 TERM INT
  # wait returns early (status > 128) each time a trapped signal arrives.
  # (|| true: the callers run under set -e.)
  while kill -0 "$launcher" 2>/dev/null; do
    wait "$launcher" || true
  done
  local rc=0
  wait "$launcher" || rc=$?
  # A warning that comes after ftrain ended (the time limit's signal just as
  # the run reaches max_steps, a preemption during the requeue) must not kill
  # this shell: the job would end FAILED by the signal instead of with
  # ftrain's status. The scheduler's SIGKILL still ends it.
  trap 'echo "ftrain job: signal received after ftrain ended; nothing to stop" >&2' USR1 TERM INT
  exec {tee_fd}>&-
  wait "$tee_pid" 2>/dev/null || true  # the log is complete once tee is gone
  if [ "$rc" -ne 0 ] && [ -n "${FTRAIN_PREEMPTED_CMD:-}" ] && eval "$FTRAIN_PREEMPTED_CMD"; then
    if [ -n "$requeue" ]; then
      echo "ftrain job: the launcher exited $rc while the job is being preempted; requeueing (resume auto continues from the last checkpoint): $requeue" >&2
      eval "$requeue" || { echo "ftrain job: requeue command failed" >&2; return 1; }
    fi
  elif [ "$rc" -eq 0 ] && tail -n +"$((start_line + 1))" "$log" | grep -q "stop signal received"; then
    if [ -n "$requeue" ]; then
      echo "ftrain job: stopped early with a checkpoint; requeueing: $requeue" >&2
      eval "$requeue" || { echo "ftrain job: requeue command failed" >&2; return 1; }
    else
      echo "ftrain job: stopped early with a checkpoint; no requeue configured: resubmit to continue" >&2
    fi
  fi
  return "$rc"
}
