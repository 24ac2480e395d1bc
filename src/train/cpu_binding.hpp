#pragma once
// Which CPUs this rank may run on, as the launcher bound it (mpirun
// --bind-to core with PE=n, srun --cpu-bind, taskset, a cgroup), so that
// the host backend runs as many threads as it has cores and the run
// header can say what each rank got.

#include <string>

namespace ftrain {

struct CpuBinding {
  int allowed = 1;       // CPUs in this process's affinity mask
  int online = 1;        // CPUs the node has online
  std::string cpu_list;  // the mask as a list: "0-11,24-35"

  bool bound() const { return allowed < online; }
};

// This process's affinity mask (sched_getaffinity) and the node's online CPUs.
CpuBinding current_cpu_binding();

// "0-3,8,10-11" from a sorted list of CPU numbers.
std::string compress_cpu_list(const int* cpus, int count);

// Cores per rank for the host backend's threads: the binding's CPUs when the
// launcher bound the rank to fewer than the node has, else an even share of
// the node's CPUs among the ranks on it.
int cores_for_rank(const CpuBinding& binding, int ranks_on_node);

// The run header's binding part, from every rank's allowed count (fewest and
// most over the ranks) and rank 0's own binding.
std::string describe_cpu_binding(const CpuBinding& rank0, int fewest_allowed, int most_allowed, bool any_bound);

}  // namespace ftrain
