#!/usr/bin/env bash
# launch.sh — the launch section of jobs/pbs/*.pbs, a script of its own so it
# can be run (and tested: tests/jobs/) without qsub.
#
#   bash jobs/pbs/launch.sh DECK [ftrain arguments...]
#
# Reads the allocation from PBS's environment (PBS_JOBID, PBS_NODEFILE: one
# line per MPI slot, hosts repeated) and these knobs:
#   FTRAIN              the ftrain executable               (default: build/bin/ftrain)
#   FTRAIN_RANKS        number of ranks                     (default: lines in PBS_NODEFILE)
#   FTRAIN_MPIRUN_ARGS  extra mpirun arguments (word-split)
#   FTRAIN_CORES_PER_RANK  cores each rank is bound to (default: the node's cores, capped by
#                       NCPUS, / ranks per node; jobs/lib/binding.sh)
#   FTRAIN_WALLTIME_S   the job's walltime in seconds; with it, SIGUSR1 is sent
#                       FTRAIN_WARNING_S (default 120) before the end: PBS has
#                       no --signal=USR1@120, so this is its equivalent
#   FTRAIN_JOB_LOG      ftrain's output is appended here    (default: ftrain-$PBS_JOBID.log)
#   FTRAIN_REQUEUE_CMD  run after a signal-stop             (default: qrerun $PBS_JOBID)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/../lib/preemptible.sh"
source "$here/../lib/binding.sh"

[ $# -ge 1 ] || { echo "usage: $0 DECK [ftrain arguments...]" >&2; exit 2; }
: "${PBS_JOBID:?not inside a PBS job (PBS_JOBID unset)}"
: "${PBS_NODEFILE:?PBS_NODEFILE unset}"
ftrain=${FTRAIN:-build/bin/ftrain}
ranks=${FTRAIN_RANKS:-$(grep -c . "$PBS_NODEFILE")}
nodes=$(sort -u "$PBS_NODEFILE" | grep -c .)
log=${FTRAIN_JOB_LOG:-ftrain-$PBS_JOBID.log}
requeue=${FTRAIN_REQUEUE_CMD-qrerun $PBS_JOBID}
per_node=$(( (ranks + nodes - 1) / nodes ))
ftrain_cores_per_rank "$per_node"
cores=$FTRAIN_RANK_CORES

# The walltime warning: a timer that signals this shell, which forwards the
# signal to mpirun as SIGUSR1 (preemptible.sh). PBS's own SIGTERM at
# preemption or qdel (followed by SIGKILL after the server's kill_delay) takes
# the same path.
timer=""
if [ -n "${FTRAIN_WALLTIME_S:-}" ]; then
  warn_at=$(( FTRAIN_WALLTIME_S - ${FTRAIN_WARNING_S:-120} ))
  (( warn_at > 0 )) || warn_at=1
  # Its output goes nowhere: it must not hold the job's stdout open.
  ( sleep "$warn_at" && kill -USR1 $$ ) > /dev/null 2>&1 &
  timer=$!
fi

# A node lost from the network: ftrain's ranks end within collective_timeout,
# but mpirun waits for the lost node's daemon until its out-of-band keepalive
# gives up (300 s + 9 x 20 s by default, longer once a message is queued).
# About 90 s instead, unless the job sets its own (running-on-clusters.md).
export OMPI_MCA_oob_tcp_keepalive_time="${OMPI_MCA_oob_tcp_keepalive_time:-60}"
export OMPI_MCA_oob_tcp_keepalive_intvl="${OMPI_MCA_oob_tcp_keepalive_intvl:-10}"
export OMPI_MCA_oob_tcp_keepalive_probes="${OMPI_MCA_oob_tcp_keepalive_probes:-3}"
echo "ftrain job $PBS_JOBID: $ranks ranks on $nodes node(s), $cores core(s) each, via mpirun" >&2
status=0
# shellcheck disable=SC2086
ftrain_run_preemptible "$log" "$requeue" -- \
  mpirun -np "$ranks" --hostfile "$PBS_NODEFILE" --map-by "ppr:$per_node:node:PE=$cores" --bind-to core \
         -x OMP_NUM_THREADS ${FTRAIN_MPIRUN_ARGS:-} "$ftrain" "$@" || status=$?
# Stop the timer: its sleep first (a killed sleep fails the && above), then
# the subshell; by process id, nothing else.
if [ -n "$timer" ]; then
  pkill -P "$timer" 2>/dev/null || true
  kill "$timer" 2>/dev/null || true
fi
exit "$status"
