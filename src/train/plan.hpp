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
  std::int64_t numel = 0;          // own parameters (tied aliases not counted)
  std::int64_t shard_numel = 0;    // per rank: the slice sharded over the shard group, padded
  std::int64_t slice_numel = 0;    // one tensor rank's slice of numel (= numel at parallel tensor 1)
  std::int64_t adapter_shard_numel = 0;  // LoRA: the slice's adapters per rank, padded (0 without LoRA)
};

// Bytes one rank sends per optimizer step, by group, as ring collectives
// move them ((n - 1) / n of an all-gathered or reduce-scattered buffer, twice
// that for an all-reduce). Counted in train/plan_traffic.hpp.
struct StepTraffic {
  double fsdp_gather = 0;    // all-gathers of the units' parameters (param_dtype)
  double fsdp_reduce = 0;    // gradient reduce-scatters / all-reduces (reduce_dtype)
  double tensor = 0;         // sequence-parallel all-gathers and reduce-scatters of the activations
  std::int64_t tensor_collectives = 0;  // how many, per step
  double context = 0;        // K/V (and, backward, dK/dV) blocks passed around the ring
  std::int64_t ring_steps = 0;          // ring sends per step
};

struct RunPlan {
  std::int64_t parameters = 0;
  std::int64_t largest_unit = 0;
  std::vector<UnitPlan> units;
  int world_size = 1;
  int shard_group_size = 1;  // ranks one unit's slice is sharded over (inside the fsdp group)
  // parallel tensor T context C (comm/process_grid.hpp): the fsdp group is
  // the data x context ranks of one tensor index (world / T ranks); each
  // tensor rank holds 1/T of the split matrices (train/parallel_layout.hpp)
  // and every replicated parameter (the norms) whole.
  int tensor = 1;
  int context = 1;
  int data_parallel = 1;                  // world / (T x C): ranks that read different samples
  int fsdp_group_size = 1;                // world / T
  std::string grid;                       // ProcessGrid::describe()
  std::int64_t slice_parameters = 0;      // one tensor rank's parameters (= parameters at T 1)
  std::int64_t replicated_parameters = 0; // of those, held whole by every tensor rank
  std::int64_t largest_unit_slice = 0;
  StepTraffic traffic;
  std::int64_t global_batch = 0;          // samples per optimizer step (micro x accumulate x data_parallel)
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
