#!/usr/bin/env bash
# launch.sh — the launch section of jobs/slurm/*.sbatch, a script of its own
# so it can be run (and tested: tests/jobs/) without sbatch.
#
#   bash jobs/slurm/launch.sh DECK [ftrain arguments...]
#
# Reads the allocation from SLURM's environment (SLURM_JOB_ID, SLURM_NTASKS,
# SLURM_NTASKS_PER_NODE, SLURM_JOB_NUM_NODES) and these knobs:
#   FTRAIN              the ftrain executable            (default: build/bin/ftrain)
#   FTRAIN_LAUNCHER     srun | mpirun                    (default: srun)
#   FTRAIN_MPIRUN_ARGS  extra mpirun arguments (word-split), e.g. "--mca btl ^openib"
#   FTRAIN_SRUN_ARGS    extra srun arguments (word-split)
#   FTRAIN_JOB_LOG      ftrain's output is appended here (default: ftrain-$SLURM_JOB_ID.log)
#   FTRAIN_REQUEUE_CMD  run after a signal-stop         (default: scontrol requeue $SLURM_JOB_ID)
#   FTRAIN_PREEMPTED_CMD  succeeds while SLURM preempts the job (default: scontrol shows a
#                       PreemptTime); a launcher that fails then is requeued too (preemptible.sh)
#   FTRAIN_CORES_PER_RANK  cores each rank is bound to  (default: SLURM_CPUS_PER_TASK, else the
#                       node's cores / ranks per node; jobs/lib/binding.sh)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/../lib/preemptible.sh"
source "$here/../lib/binding.sh"

[ $# -ge 1 ] || { echo "usage: $0 DECK [ftrain arguments...]" >&2; exit 2; }
: "${SLURM_JOB_ID:?not inside a SLURM job (SLURM_JOB_ID unset)}"
: "${SLURM_NTASKS:?SLURM_NTASKS unset: give sbatch --ntasks or --ntasks-per-node}"
ftrain=${FTRAIN:-build/bin/ftrain}
launcher=${FTRAIN_LAUNCHER:-srun}
log=${FTRAIN_JOB_LOG:-ftrain-$SLURM_JOB_ID.log}
requeue=${FTRAIN_REQUEUE_CMD-scontrol requeue $SLURM_JOB_ID}
# SLURM sets the job's PreemptTime when a preemption starts its GraceTime.
FTRAIN_PREEMPTED_CMD=${FTRAIN_PREEMPTED_CMD-scontrol show job -o $SLURM_JOB_ID 2>/dev/null | grep -q 'PreemptTime=[0-9]'}
# SLURM_NTASKS_PER_NODE can read "8(x2)"; the leading number is what we need.
per_node=${SLURM_NTASKS_PER_NODE:-$SLURM_NTASKS}
per_node=${per_node%%(*}
ftrain_cores_per_rank "$per_node"
cores=$FTRAIN_RANK_CORES

echo "ftrain job $SLURM_JOB_ID: $SLURM_NTASKS ranks on ${SLURM_JOB_NUM_NODES:-1} node(s), $per_node per node, $cores core(s) each, via $launcher" >&2
case "$launcher" in
  srun)
    # --mpi=pmix: Open MPI and MPICH wire up through SLURM's PMIx server.
    # --kill-on-bad-exit: one failed rank ends the step instead of a hang.
    # srun forwards SIGUSR1 to every task. --cpus-per-task: srun does not
    # inherit sbatch's, and without it --cpu-bind=cores pins one core.
    # shellcheck disable=SC2086
    ftrain_run_preemptible "$log" "$requeue" -- \
      srun --mpi=pmix --kill-on-bad-exit=1 --ntasks="$SLURM_NTASKS" --ntasks-per-node="$per_node" \
           --cpus-per-task="$cores" --cpu-bind=cores ${FTRAIN_SRUN_ARGS:-} "$ftrain" "$@"
    ;;
  mpirun)
    # A node lost from the network: ftrain's ranks end within collective_timeout,
    # but mpirun waits for the lost node's daemon until its out-of-band keepalive
    # gives up (300 s + 9 x 20 s by default, longer once a message is queued).
    # About 90 s instead, unless the job sets its own (running-on-clusters.md).
    export OMPI_MCA_oob_tcp_keepalive_time="${OMPI_MCA_oob_tcp_keepalive_time:-60}"
    export OMPI_MCA_oob_tcp_keepalive_intvl="${OMPI_MCA_oob_tcp_keepalive_intvl:-10}"
    export OMPI_MCA_oob_tcp_keepalive_probes="${OMPI_MCA_oob_tcp_keepalive_probes:-3}"
    # Open MPI reads the node list from SLURM itself; ppr places the same
    # number of ranks on every node (ftrain's hybrid_shard groups = nodes),
    # PE binds each to its cores; -x hands the ranks the thread count.
    # shellcheck disable=SC2086
    ftrain_run_preemptible "$log" "$requeue" -- \
      mpirun -np "$SLURM_NTASKS" --map-by "ppr:$per_node:node:PE=$cores" --bind-to core -x OMP_NUM_THREADS \
             ${FTRAIN_MPIRUN_ARGS:-} "$ftrain" "$@"
    ;;
  *)
    echo "FTRAIN_LAUNCHER must be srun or mpirun, not '$launcher'" >&2
    exit 2
    ;;
esac
