// Bytes one rank sends per optimizer step, by the group that carries them,
// for `ftrain --check`: what the grid of `parallel tensor T context C` and
// the fsdp strategy cost in communication, before any bandwidth is assumed.
// Every collective is counted as a ring moves it: an all-gather or a
// reduce-scatter of a buffer of B bytes over n ranks sends (n - 1) / n x B
// from each rank, an all-reduce twice that.
//
// fsdp group (the shard group of each tensor rank's slices; hybrid_shard's
// replicas too): per micro-step each unit's slice is all-gathered in
// param_dtype for forward and again for backward (full_shard, hybrid_shard;
// once for shard_grad_op, never for no_shard), and its gradient reduced in
// reduce_dtype: reduce-scattered over the shard group, then all-reduced
// over the replicas (hybrid_shard) or all-reduced over the group
// (no_shard); no_sync reduces once per step instead of per micro-step.
// Under LoRA only the adapters' gradients are reduced.
//
// tensor group (T ranks, Llama): sequence parallelism moves the residual
// stream [tokens / C, hidden] in the compute dtype: per block an all-gather
// before attention and before the MLP and a reduce-scatter after each,
// forward (4) and backward (4, the conjugates), again in the recompute of a
// checkpointed block (4); the vocabulary-parallel embedding's output
// (reduce-scatter forward, all-gather backward) and the head's input
// (all-gather forward, reduce-scatter backward) add 4 per micro-step. The
// cross entropy's per-token max and sum (all-reduces of tokens floats) are
// not counted.
//
// context ring (C ranks, Llama): per block each rank passes its K/V block
// ([tokens / C, 2 x kv / T]) C - 1 times in forward, K/V and its gradient
// (2 x (C - 1) sends) in backward, and C - 1 again in a checkpointed block's
// recompute.
#pragma once

#include "deck/config.hpp"
#include "fsdp/engine.hpp"
#include "plugin/model.hpp"
#include "train/plan.hpp"

namespace ftrain {

StepTraffic plan_traffic(const Model& model, const RunConfig& config, const FsdpOptions& options, const RunPlan& plan);

// The fsdp group's part (fsdp_gather, fsdp_reduce) from `plan`'s units,
// shard group and fsdp group, for `micro_steps` micro-steps per step.
void add_fsdp_traffic(StepTraffic& traffic, const FsdpOptions& options, const RunPlan& plan, double micro_steps);

// The plan's grid, slice and communication lines (each ending in a newline).
std::string format_parallel_plan(const RunPlan& plan);

}  // namespace ftrain
