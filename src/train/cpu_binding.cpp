#include "train/cpu_binding.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <sstream>
#include <vector>

namespace ftrain {

std::string compress_cpu_list(const int* cpus, int count) {
  std::ostringstream out;
  for (int i = 0; i < count;) {
    int j = i;
    while (j + 1 < count && cpus[j + 1] == cpus[j] + 1) ++j;
    if (i > 0) out << ',';
    out << cpus[i];
    if (j > i) out << '-' << cpus[j];
    i = j + 1;
  }
  return out.str();
}

CpuBinding current_cpu_binding() {
  CpuBinding b;
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  b.online = online > 0 ? static_cast<int>(online) : 1;
  // A dynamically sized set: nodes with more than CPU_SETSIZE (1024) CPUs exist.
  const int max_cpus = std::max(b.online, 1024) * 2;
  cpu_set_t* set = CPU_ALLOC(max_cpus);
  const size_t bytes = CPU_ALLOC_SIZE(max_cpus);
  std::vector<int> cpus;
  if (set != nullptr && sched_getaffinity(0, bytes, set) == 0) {
    for (int c = 0; c < max_cpus; ++c)
      if (CPU_ISSET_S(c, bytes, set)) cpus.push_back(c);
  }
  if (set != nullptr) CPU_FREE(set);
  if (cpus.empty()) {  // no mask to read: treat the process as unbound
    b.allowed = b.online;
    b.cpu_list = "0-" + std::to_string(b.online - 1);
    return b;
  }
  b.allowed = static_cast<int>(cpus.size());
  b.cpu_list = compress_cpu_list(cpus.data(), b.allowed);
  return b;
}

int cores_for_rank(const CpuBinding& binding, int ranks_on_node) {
  if (binding.bound()) return std::max(1, binding.allowed);
  return std::max(1, binding.online / std::max(1, ranks_on_node));
}

std::string describe_cpu_binding(const CpuBinding& rank0, int fewest_allowed, int most_allowed, bool any_bound) {
  std::ostringstream h;
  if (!any_bound) {
    h << "ranks not bound: each may run on all " << rank0.online << " CPUs of its node";
    return h.str();
  }
  h << "bound to ";
  if (fewest_allowed == most_allowed) h << fewest_allowed;
  else h << fewest_allowed << "-" << most_allowed;
  h << " CPU(s) per rank (rank 0: CPUs " << rank0.cpu_list << ")";
  return h.str();
}

}  // namespace ftrain
