#include "train/gpu_sized_deck.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace ftrain {

namespace {
std::string duration_text(double seconds) {
  char buf[64];
  if (seconds >= 86400) std::snprintf(buf, sizeof buf, "%.1f days", seconds / 86400);
  else if (seconds >= 3600) std::snprintf(buf, sizeof buf, "%.1f hours", seconds / 3600);
  else if (seconds >= 60) std::snprintf(buf, sizeof buf, "%.1f minutes", seconds / 60);
  else std::snprintf(buf, sizeof buf, "%.2g s", seconds);
  return buf;
}
}  // namespace

double node_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
}

std::vector<std::string> gpu_recipe_reasons(const RunPlan& plan, deck::Precision precision, const HostFacts& host) {
  std::vector<std::string> reasons;
  if (static_cast<double>(plan.parameters) >= kGpuSizedParameters)
    reasons.push_back(human_count(static_cast<double>(plan.parameters)) + " parameters");
  const double planned = static_cast<double>(plan.state_bytes_per_rank + plan.gathered_bytes_peak);
  if (host.node_memory_bytes > 0) {
    const double per_rank = host.node_memory_bytes / std::max(1, host.ranks_per_node);
    if (planned > per_rank) {
      reasons.push_back(human_bytes(planned) + " planned per rank before activations, while this node has " +
                        human_bytes(host.node_memory_bytes) + " for " + std::to_string(host.ranks_per_node) +
                        " rank(s), " + human_bytes(per_rank) + " each");
    }
  }
  if (precision == deck::Precision::fp8) reasons.push_back("precision fp8 (emulated on the host: for numerics, not speed)");
  return reasons;
}

std::string gpu_sized_deck_warning(const RunPlan& plan, deck::Precision precision, const HostFacts& host) {
  const auto reasons = gpu_recipe_reasons(plan, precision, host);
  if (reasons.empty()) return "";
  std::ostringstream w;
  w << "warning: this deck looks written for GPUs, but ftrain trains on the host backend (CPU) in this run "
       "(`device cuda` runs the CUDA backend, not yet confirmed on a GPU: share/doc/status.md):";
  for (const auto& r : reasons) w << "\n  - " << r;
  if (host.peak_flops_per_rank > 0 && plan.world_size > 0) {
    const double step = plan.flops_per_step / (host.peak_flops_per_rank * plan.world_size);
    w << "\n  - one step needs at least " << duration_text(step) << " at the host's stated peak of "
      << host.peak_flops_per_rank / 1e9 << " GFLOP/s per rank";
  }
  w << "\n";
  return w.str();
}

}  // namespace ftrain
