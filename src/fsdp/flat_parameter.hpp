// FlatParameter: one FSDP unit's parameters as one flat buffer.
//
// The unit's own parameters are concatenated in declaration order and padded
// to a multiple of the shard group size S. Rank r of the shard group owns the
// contiguous elements [r * shard_numel, (r + 1) * shard_numel) and keeps, for
// those only, the f32 master copy, the f32 gradient and AdamW's two moments.
// The full ("gathered") buffer in the compute dtype exists only while the
// unit is being computed; so does the full f32 gradient buffer.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "core/tensor.hpp"
#include "plugin/model.hpp"

namespace ftrain {

struct FlatEntry {
  std::string name;
  Shape shape;
  std::int64_t offset = 0;  // in the flat buffer
  std::int64_t numel = 0;
  InitKind init = InitKind::normal;
  float init_std = 0.02f;
  float init_bound = 0.0f;
  bool weight_decay = true;
  // Tensor parallelism (ParamSpec::tensor_split_dim): -1 whole; else this
  // entry is tensor rank `tensor_rank`'s slice of the tensor `full_shape`
  // along that dimension.
  int tensor_split_dim = -1;
  Shape full_shape;
  int tensor_rank = 0;
  bool tensor_split() const { return tensor_split_dim >= 0; }
};

// Calls fn(full_first, count, at) for each contiguous run of elements
// [first, first + count) of `e` (a slice's own row-major order) as they lie
// in the full tensor: element at + k of the request is full element
// full_first + k. An entry that is not split is one run.
void for_each_full_run(const FlatEntry& e, std::int64_t first, std::int64_t count,
                       const std::function<void(std::int64_t full_first, std::int64_t count, std::int64_t at)>& fn);
// The entry as the whole tensor (name, full shape; offset unchanged).
FlatEntry full_entry(const FlatEntry& e);
// The inverse: elements [full_first, full_first + count) of a tensor of
// `full_shape` split along `split_dim` into `tensor_size` slices (-1: whole,
// on tensor rank 0) as runs fn(tensor_rank, slice_first, count, at) of the
// slices' own row-major order; element at + k of the request is element
// slice_first + k of that rank's slice.
void for_each_slice_run(
    const Shape& full_shape, int split_dim, int tensor_size, std::int64_t full_first, std::int64_t count,
    const std::function<void(int tensor_rank, std::int64_t slice_first, std::int64_t count, std::int64_t at)>& fn);

// Where a unit finds each declared parameter slot: its own flat buffer or,
// for tied slots, an entry of an earlier unit.
struct SlotSource {
  int unit = 0;
  int entry = 0;
};

class FlatParameter {
 public:
  // tensor_rank: which slice the tensor-split specs are (parallel tensor).
  FlatParameter(int unit_index, std::string unit_name, const std::vector<ParamSpec>& own_specs,
                int shard_group_size, int shard_rank, int tensor_rank = 0);

  int unit_index() const { return unit_index_; }
  const std::string& unit_name() const { return unit_name_; }
  const std::vector<FlatEntry>& entries() const { return entries_; }
  std::int64_t numel() const { return numel_; }
  std::int64_t padded_numel() const { return padded_numel_; }
  std::int64_t shard_numel() const { return shard_numel_; }
  std::int64_t shard_offset() const { return shard_offset_; }

  // Calls fn(entry_index, first element within the entry, element count,
  // offset within the shard) for every piece of an entry inside this rank's shard.
  template <class Fn>
  void for_each_shard_piece(Fn&& fn) const {
    const std::int64_t lo = shard_offset_, hi = shard_offset_ + shard_numel_;
    for (std::size_t e = 0; e < entries_.size(); ++e) {
      const auto& entry = entries_[e];
      const std::int64_t begin = std::max(lo, entry.offset);
      const std::int64_t end = std::min(hi, entry.offset + entry.numel);
      if (begin < end) fn(static_cast<int>(e), begin - entry.offset, end - begin, begin - lo);
    }
  }

  // Sharded state (shard_numel elements each, f32). A frozen flat (the base
  // model under LoRA) has a master only, stored in the engine's
  // frozen_base_dtype() (bf16 under precision bf16): grad, exp_avg and
  // exp_avg_sq stay undefined, and its units receive undefined gradient
  // tensors.
  Tensor master, grad, exp_avg, exp_avg_sq;
  bool trainable() const { return grad.defined(); }
  // grad holds zeros (zero_grad) and nothing was added since: the first
  // reduced f32 shard of the step can replace it instead of being added.
  bool grad_is_zero = false;
  // The multi-tensor AdamW's chunk table for this shard (FsdpEngine builds it
  // on the first optimizer step, on the engine's device): i64[chunks, 3],
  // undefined where the shard holds padding only.
  Tensor adamw_chunks;
  bool adamw_chunks_built = false;

  // Offload (FsdpOptions::offload on a device backend), where the master
  // lives in host memory. What the all-gather sends, in the compute dtype:
  // compute_shard on the device (offload optimizer: kept between steps), or
  // compute_shard_host (offload all: copied to the device before each
  // gather). Remade after every optimizer update; stale after any other write
  // of the master (initialisation, a checkpoint load: FsdpEngine::masters_changed).
  Tensor compute_shard;
  Tensor compute_shard_host;
  bool compute_shard_stale = true;

  // Transient full buffers.
  Tensor gathered;     // compute dtype, padded_numel (FP8 all-gather: the non-FP8 segment, fsdp/fp8_all_gather.hpp)
  Tensor gathered_fp8; // FP8 all-gather only: the unit's FP8 linear weights as gathered FP8 bytes
  Tensor full_grad;    // f32, padded_numel
  Tensor gather_send;  // compute-dtype copy of the master shard, alive until the gather completes
  Request gather_request;
  bool gathered_valid = false;  // gathered holds the current parameters (or they are in flight)

 private:
  int unit_index_;
  std::string unit_name_;
  std::vector<FlatEntry> entries_;
  std::int64_t numel_ = 0;
  std::int64_t padded_numel_ = 0;
  std::int64_t shard_numel_ = 0;
  std::int64_t shard_offset_ = 0;
};

// The master shard's values as a host f32 tensor (the master itself when it
// is host f32; else a copy, widened from a bf16 frozen base): how host code
// (checkpoints, merges, checksums) reads a master whatever its dtype.
Tensor master_host_f32(const FlatParameter& flat);

}  // namespace ftrain
