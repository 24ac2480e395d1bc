// Planning a cluster run from a laptop: `ftrain --check --ranks N
// [--ranks-per-node M] [--device-memory 80GB]` plans for N ranks without
// starting them, and this file says whether that plan fits the target's
// device memory and, if not, what to change (numbers from re-planning with
// the change, not rules of thumb).
//
// "Fits" counts the sharded f32 state, the gathered units in flight, an
// estimate of the activations (train/plan_activations.hpp, as the deck sets
// activation_checkpointing) and an allowance for what a GPU process holds
// besides: the CUDA context and the libraries' workspaces, and NCCL's
// buffers when ranks communicate (gpu_process_allowance). A plan "fits" when
// all of it is at most the device's memory and is "tight" when less than
// 15% is left (temporaries inside kernels, fragmentation); the rank-count
// advice uses the same two tests, so it never suggests more nodes than the
// verdict needs.
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

// Bytes a GPU rank holds outside the plan: `context` (CUDA context, cuBLASLt
// and cuDNN workspaces) and `nccl` (NCCL's channel buffers; 0 for one rank
// or device_comm mpi).
struct GpuProcessAllowance {
  double context = 0, nccl = 0;
  double total() const { return context + nccl; }
};
GpuProcessAllowance gpu_process_allowance(const FsdpOptions& options, int world_size);

// The fit paragraph for `plan` on devices of `device_bytes`, ending in a
// newline: the verdict for the deck's settings, then each `fsdp ... offload`
// setting's device memory per rank and host memory per rank and per node
// (against `host_bytes_per_node` when > 0, --host-memory) and which of them
// fit. Re-plans `model` with other options/rank counts for suggestions.
std::string plan_fit_report(Model& model, const RunConfig& config, const FsdpOptions& options, const RunPlan& plan,
                            int ranks_per_node, double device_bytes, double host_bytes_per_node = 0);

}  // namespace ftrain
