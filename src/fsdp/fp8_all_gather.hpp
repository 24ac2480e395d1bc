// FP8 all-gather of a unit's linear weights (precision fp8, full_shard /
// hybrid_shard; share/doc/fsdp.md "FP8 all-gather").
//
// Without it every rank all-gathers the unit's flat parameter in the param
// dtype (bf16) and each FP8 linear then casts its gathered weight with the
// layer's weight scale (layers/linear.hpp). With it the cast moves before the
// collective: each rank casts ITS shard of every FP8 linear weight with the
// same scale and the all-gather moves the FP8 bytes, 1 byte per element
// instead of 2; the GEMMs take the gathered FP8 weight as it is
// (layers::LinearLayers sees an fp8 weight tensor and does not cast it again).
//
// Why the result is bit-identical to the local cast: the cast is
// elementwise, fp8(bf16(master) * scale), with the layer's current scale
// (scales change only between steps, fp8/recipe.hpp); the shard is first
// rounded to the param dtype exactly as the gathered copy would be, so every
// byte is the one the local cast would have made. The weight amax: each rank
// max-accumulates max |shard| into the layer's history row 0 (training
// gathers only, as the local cast records only in training forwards), and
// the engine's one all-reduce max per step (FsdpEngine::update_fp8_scales)
// makes it max over ranks = max |whole weight|, the value every rank
// recorded before. The master layout, the f32 masters and so the
// checkpoints do not change.
//
// Layout. The flat parameter keeps its layout (masters, gradients,
// checkpoints). Only the gathered copy is split in two segments, each in
// flat order: FP8 = the FP8 linear weights (fp8 dtype), rest = every other
// element including the padding (param dtype). Rank r's part of each
// segment is contiguous (the restriction of its contiguous shard), so two
// variable-count all-gathers (Communicator::all_gather_v) write both
// segments in place: no padding per rank, no unpacking copy.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "fp8/recipe.hpp"
#include "fsdp/flat_parameter.hpp"
#include "runtime/execution_context.hpp"

namespace ftrain {

struct FsdpOptions;

// Whether the FP8 all-gather runs, and the words the run header prints:
// "on", or "off (<why>)". Off when the deck says so, without precision fp8,
// with a one-rank shard group (nothing is gathered), with shard_grad_op or
// no_shard (gathered copies are kept across an evaluation, which records no
// amax: the weight amax would be missed in the next step).
struct Fp8AllGatherDecision {
  bool on = false;
  std::string text;
};
Fp8AllGatherDecision decide_fp8_all_gather(const FsdpOptions& options, int shard_group_size);

class Fp8AllGather {
 public:
  // One FP8 linear weight of the unit: its entry in the flat parameter and
  // its layer's delayed-scaling state (owned by the unit's layers::LinearLayers,
  // which keeps it at a fixed address).
  struct Weight {
    int entry = 0;
    fp8::LinearState* state = nullptr;
  };
  // weights: the FP8 linear weights of `flat` (any order; at most one per entry).
  Fp8AllGather(const FlatParameter& flat, std::vector<Weight> weights, int shard_group_size, int shard_rank);

  // Elements of the FP8 segment (the FP8 weights) and of the rest.
  std::int64_t fp8_numel() const { return fp8_numel_; }
  std::int64_t rest_numel() const { return rest_numel_; }
  std::int64_t fp8_numel_of_rank(int r) const { return fp8_counts_[static_cast<std::size_t>(r)]; }

  // Casts this rank's shard `source` (on exec's device: the f32 master, or
  // already in the param dtype, as offload's device copy of the shard is)
  // -> param dtype -> FP8 with each layer's weight scale for the FP8
  // weights; -> param dtype for the rest, with ops on exec's compute stream,
  // then issues the two all-gathers behind an event recorded after the
  // casts. The param-dtype rounding is the same whichever source, so the
  // bytes are too. Sets flat.gathered (rest segment, param dtype) and
  // flat.gathered_fp8 (FP8 segment, fp8_dtype). record: the casts
  // max-accumulate each weight shard's amax into its layer's history
  // (training; evaluation records nothing). The request completes both.
  Request start(ExecutionContext& exec, Communicator& shard_comm, FlatParameter& flat, const Tensor& source,
                DType param_dtype, DType fp8_dtype, bool record) const;

  // Entry `entry` of the gathered unit: a view of flat.gathered_fp8 (an FP8
  // weight) or of flat.gathered (anything else), named and shaped as the entry.
  Tensor gathered_view(const FlatParameter& flat, int entry) const;
  bool is_fp8(int entry) const { return fp8_state_[static_cast<std::size_t>(entry)] != nullptr; }

 private:
  struct Piece {  // one FP8 weight's part of this rank's shard
    int entry;
    std::int64_t shard_offset, count, send_offset;
  };
  struct Run {  // a stretch of this rank's shard that is not FP8
    std::int64_t shard_offset, count, send_offset;
  };
  std::vector<fp8::LinearState*> fp8_state_;  // per entry; null = not an FP8 weight
  std::vector<std::int64_t> segment_offset_;  // per entry, in its segment
  std::vector<std::int64_t> fp8_counts_, rest_counts_;  // per rank of the shard group
  std::vector<Piece> pieces_;
  std::vector<Run> runs_;
  std::int64_t fp8_numel_ = 0, rest_numel_ = 0;
};

}  // namespace ftrain
