// Planning a cluster run from a laptop: `ftrain --check --ranks N
// [--ranks-per-node M] [--device-memory 80GB]` plans for N ranks without
// starting them, and this file says whether that plan fits the target's
// device memory and, if not, what to change (numbers from re-planning with
// the change, not rules of thumb).
//
// "Fits" counts what the plan knows: the sharded f32 state and the gathered
// units in flight. Activations depend on the kernels and are measured at run
// time, so the report states what is left for them and, when little is, the
// changes that shrink them (activation checkpointing, a smaller micro batch).
#pragma once

#include <string>

#include "deck/config.hpp"
#include "fsdp/engine.hpp"
#include "plugin/model.hpp"
#include "train/plan.hpp"

namespace ftrain {

// "80GB" (10^9), "80GiB" (2^30), also MB/MiB/TB/TiB; throws UserError naming
// the option for anything else.
double parse_memory_size(const std::string& text, const std::string& option);

// The fit paragraph for `plan` on devices of `device_bytes`, ending in a
// newline. Re-plans `model` with other options/rank counts for suggestions.
std::string plan_fit_report(Model& model, const RunConfig& config, const FsdpOptions& options, const RunPlan& plan,
                            int ranks_per_node, double device_bytes);

}  // namespace ftrain
