// The run plan: what a configuration costs, computed from parameter
// declarations alone so that `ftrain --check` works for a 70B model on a
// laptop (nothing the size of the model is allocated).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "deck/config.hpp"
#include "fsdp/engine.hpp"
#include "plugin/model.hpp"

namespace ftrain {

struct UnitPlan {
  std::string name;
  std::int64_t numel = 0;         // own parameters (tied aliases not counted)
  std::int64_t shard_numel = 0;   // per rank, padded
};

struct RunPlan {
  std::int64_t parameters = 0;
  std::int64_t largest_unit = 0;
  std::vector<UnitPlan> units;
  int world_size = 1;
  int shard_group_size = 1;
  std::int64_t global_batch = 0;          // samples per optimizer step
  std::int64_t tokens_per_step = 0;
  double flops_per_step = 0;              // model FLOPs (forward + backward)
  std::int64_t state_bytes_per_rank = 0;  // f32 master + grad + 2 AdamW moments
  std::int64_t gathered_bytes_peak = 0;   // gathered units in flight (+ their f32 gradient)
  // fsdp ... offload on a device backend (plan_offload below): what of the
  // sharded state stays in device memory and what moves to host memory.
  // Without offload the device holds all of state_bytes_per_rank.
  Offload offload = Offload::none;
  std::int64_t device_state_bytes_per_rank = 0;
  std::int64_t host_state_bytes_per_rank = 0;
  // LoRA: the adapters are the trainable parameters; the base is frozen
  // (its shards only, in frozen_base_dtype: the compute dtype unless the deck
  // says lora base_dtype f32). Without LoRA trainable_parameters == parameters.
  bool lora = false;
  DType frozen_base_dtype = DType::f32;
  std::int64_t trainable_parameters = 0;
  std::int64_t adapted_linears = 0;
};

// Where the sharded state lives under `offload` (fsdp ... offload): none
// keeps it all on the device; optimizer moves the f32 master, its gradient
// and the AdamW moments to host memory and keeps a compute-dtype copy of the
// shard on the device (what the all-gather sends) plus one unit's f32
// reduced-gradient shard awaiting its copy to the host; all moves the
// compute-dtype shard to the host too, staging one unit's on the device
// before its all-gather. Under LoRA only the adapters have optimizer state:
// optimizer moves theirs (16 bytes per adapter shard element) and leaves the
// frozen base shard on the device as it is; all moves the base shard too.
// The adapters' compute copies and gradient shard (a fraction of a percent
// of the base) are not counted. Sets the three offload fields of `plan`
// from its units, frozen_base_dtype and state_bytes_per_rank.
void plan_offload(RunPlan& plan, const FsdpOptions& options);

RunPlan make_plan(Model& model, const RunConfig& config, const FsdpOptions& options, int world_size,
                  int ranks_per_node);
std::string format_plan(const RunPlan& plan);
std::string human_count(double n);   // 6.74B, 125.0M
std::string human_bytes(double b);   // 1.25 GiB

}  // namespace ftrain
