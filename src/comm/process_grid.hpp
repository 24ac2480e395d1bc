// The process grid of `parallel tensor T context C`: world = data x context x
// tensor ranks, tensor innermost. A rank's coordinates are
//   rank = (data * C + context) * T + tensor
// so the T ranks of a tensor group are consecutive (one node holds whole
// tensor groups, where their per-layer collectives belong), the C ranks of a
// context group are T apart, and data replicas are the outermost dimension.
// This is Megatron's and torchtitan's order.
//
// The groups a rank belongs to:
//   tensor group   same data and context index: T ranks (the block's
//                  all-reduce / reduce-scatter / all-gather)
//   context group  same data and tensor index: C ranks (the attention ring)
//   fsdp group     same tensor index: data x context ranks; the FSDP
//                  strategy shards (and replicates, hybrid) each tensor
//                  rank's slice of the parameters over it, and its gradient
//                  reduction also sums the context ranks' partial gradients
//   data index     which samples of the global batch a rank reads: the T x C
//                  ranks of one data index read the same samples (the context
//                  ranks each keep their chunks of the sequence)
// Pure arithmetic: no MPI here (the communicators are split from it).
#pragma once

#include <cstdint>
#include <string>

namespace ftrain {

struct GridCoordinates {
  int data = 0;
  int context = 0;
  int tensor = 0;
};

class ProcessGrid {
 public:
  // Throws a user error naming `where` (the deck's parallel line, or "" for
  // none) when tensor * context does not divide world_size, or when
  // ranks_per_node > 0 and a tensor group would cross a node (T must divide
  // ranks_per_node).
  ProcessGrid(int world_size, int tensor, int context, int ranks_per_node = 0, const std::string& where = "");

  int world_size() const { return world_size_; }
  int tensor_size() const { return tensor_; }
  int context_size() const { return context_; }
  int data_size() const { return world_size_ / (tensor_ * context_); }
  // Ranks in one fsdp group (data x context).
  int fsdp_size() const { return world_size_ / tensor_; }
  bool model_parallel() const { return tensor_ > 1 || context_ > 1; }

  GridCoordinates coordinates(int rank) const;
  int rank_of(const GridCoordinates& c) const;

  // Communicator::split colors and keys: ranks with equal color form a group,
  // ordered by key (the group rank is the coordinate named).
  int tensor_group_color(int rank) const;   // key: tensor index
  int context_group_color(int rank) const;  // key: context index
  int fsdp_group_color(int rank) const;     // key: fsdp_rank(rank)
  // A rank's index inside its fsdp group: data * C + context.
  int fsdp_rank(int rank) const;

  // "data 2 x context 1 x tensor 4 (8 ranks)".
  std::string describe() const;

 private:
  int world_size_;
  int tensor_;
  int context_;
};

}  // namespace ftrain
