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
  // LoRA: the adapters are the trainable parameters; the base is frozen
  // (its shards only, in frozen_base_dtype: the compute dtype unless the deck
  // says lora base_dtype f32). Without LoRA trainable_parameters == parameters.
  bool lora = false;
  DType frozen_base_dtype = DType::f32;
  std::int64_t trainable_parameters = 0;
  std::int64_t adapted_linears = 0;
};

RunPlan make_plan(Model& model, const RunConfig& config, const FsdpOptions& options, int world_size,
                  int ranks_per_node);
std::string format_plan(const RunPlan& plan);
std::string human_count(double n);   // 6.74B, 125.0M
std::string human_bytes(double b);   // 1.25 GiB

}  // namespace ftrain
