// Parameter initialisation that never needs the whole model on a rank:
// each rank fills only its shard, with values that are a pure function of
// (seed, parameter name, element index), so every world size gets exactly
// the same model. The engine writes what a ParameterSource gives into its
// shards; these are the sources of `init random`.
#pragma once

#include <cstdint>
#include <functional>

#include "fsdp/flat_parameter.hpp"

namespace ftrain {

// The value init_random gives element first..first+count-1 of `entry`:
// a pure function of (seed, parameter name, element index).
void random_init_values(std::uint64_t seed, const FlatEntry& entry, std::int64_t first, std::int64_t count,
                        float* dst);
// Test only (`init random ... test_perturb_by_rank X`): adds
// rank * scale * normal(0, 1) to those values, so every rank's local
// initialisation differs and rank 0's is unchanged; the regression tests use
// it to show that sync_module_states really starts every rank from rank 0's.
void perturb_init_by_rank(std::uint64_t seed, int rank, double scale, const FlatEntry& entry, std::int64_t first,
                          std::int64_t count, float* dst);

// Fills `count` f32 values of parameter `entry` starting at element `first`.
using ParameterSource = std::function<void(const FlatEntry& entry, std::int64_t first, std::int64_t count, float* dst)>;

// The source of a tensor-split entry (parallel tensor): `source` asked for
// the same elements of the full tensor (FlatEntry::full_shape), so every
// source (random init, Hugging Face weights, a checkpoint) fills a tensor
// rank's slice with the values the whole tensor has there.
ParameterSource tensor_slice_source(ParameterSource source);

}  // namespace ftrain
