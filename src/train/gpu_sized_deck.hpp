// Until a GPU backend has run, every ftrain run computes on the host (CPU),
// whatever the recipe was written for. A 70B recipe still validates and
// plans there; this file decides when to say so, in the run header and in
// `--check`, and how plainly.
//
// A deck "looks written for GPUs" when any of these holds:
//   * the model has at least 1e9 parameters;
//   * the planned memory per rank (sharded state + gathered units) exceeds
//     the node's physical memory divided by the ranks on the node;
//   * precision fp8 (FP8 GEMMs are emulated on the host: for numerics, not
//     speed).
// The warning adds how long one step takes at the stated host peak.
#pragma once

#include <string>
#include <vector>

#include "deck/choices.hpp"
#include "train/plan.hpp"

namespace ftrain {

inline constexpr double kGpuSizedParameters = 1e9;

struct HostFacts {
  double node_memory_bytes = 0;  // physical memory of this node (0 = unknown)
  int ranks_per_node = 1;
  double peak_flops_per_rank = 0;  // stated peak (device_peak.hpp); 0 = unknown
};

// Physical memory of this node, from sysconf.
double node_memory_bytes();

// Why this plan looks written for GPUs; empty when it suits the host.
std::vector<std::string> gpu_recipe_reasons(const RunPlan& plan, deck::Precision precision, const HostFacts& host);

// The warning paragraph (ending in a newline), or "" when there is no reason.
std::string gpu_sized_deck_warning(const RunPlan& plan, deck::Precision precision, const HostFacts& host);

}  // namespace ftrain
