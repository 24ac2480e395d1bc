# binding.sh — sourced by jobs/{slurm,pbs}/launch.sh: how many cores each
# rank gets, so that the launcher binds every rank to its share of the node
# instead of one core (the host backend runs one thread per bound core).
#
# ftrain_cores_per_rank RANKS_PER_NODE
#   sets FTRAIN_RANK_CORES to the cores per rank (not in a subshell: it also
#   exports OMP_NUM_THREADS), from the first of:
#     FTRAIN_CORES_PER_RANK   set by hand
#     SLURM_CPUS_PER_TASK     sbatch --cpus-per-task
#     the node's physical cores (lscpu; hardware threads are not cores),
#       capped by what the scheduler gave this node (SLURM_CPUS_ON_NODE,
#       PBS's NCPUS), divided among the node's ranks
#   and exports OMP_NUM_THREADS to it when unset. A result below 1 (more
#   ranks than cores) is an error, not a silent oversubscription.
#
# On GPU nodes the ranks are numbered and bound in core order, so local rank
# i (which drives GPU i) gets the i-th block of cores: on the usual 8-GPU
# node with GPUs 0-3 on the first socket and 4-7 on the second, each rank's
# cores sit on its GPU's NUMA node. Check with `nvidia-smi topo -m`.
ftrain_physical_cores() {
  local n
  n=$(lscpu -b -p=Core,Socket 2>/dev/null | grep -v '^#' | sort -u | grep -c .) || n=0
  if [ "${n:-0}" -lt 1 ]; then n=$(nproc --all); fi
  echo "$n"
}

ftrain_cores_per_rank() {
  local per_node=$1 cores n
  if [ -n "${FTRAIN_CORES_PER_RANK:-}" ]; then
    n=$FTRAIN_CORES_PER_RANK
  elif [ -n "${SLURM_CPUS_PER_TASK:-}" ]; then
    n=$SLURM_CPUS_PER_TASK
  else
    cores=$(ftrain_physical_cores)
    if [ -n "${SLURM_CPUS_ON_NODE:-}" ] && [ "$SLURM_CPUS_ON_NODE" -lt "$cores" ]; then cores=$SLURM_CPUS_ON_NODE; fi
    if [ -n "${NCPUS:-}" ] && [ "$NCPUS" -lt "$cores" ]; then cores=$NCPUS; fi
    n=$(( cores / per_node ))
  fi
  if ! [[ "$n" =~ ^[0-9]+$ ]] || [ "$n" -lt 1 ]; then
    echo "ftrain job: cannot give each of $per_node rank(s) per node a core (cores per rank: '$n'); set FTRAIN_CORES_PER_RANK or use fewer ranks per node" >&2
    return 1
  fi
  if [ -z "${OMP_NUM_THREADS:-}" ]; then export OMP_NUM_THREADS=$n; fi
  FTRAIN_RANK_CORES=$n
}
