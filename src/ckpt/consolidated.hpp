// Consolidated full state dict: one HDF5 file, one dataset per parameter in
// Hugging Face naming and shape (f32, contiguous, so h5py reads
// f["model.layers.0.self_attn.q_proj.weight"][...] as-is), the model config as
// root attributes.
//
// Written collectively with parallel HDF5 (MPI-IO, collective transfers):
// every rank creates every dataset (a collective HDF5 requirement), then each
// rank of replica group 0 writes exactly the elements its shard covers,
// straight from its f32 master shard: no rank ever holds more than its own
// shard, no gather to rank 0. A shard's piece of a parameter is a flat
// (row-major) range; it is selected in the N-D dataset as a union of at most
// 2 * rank - 1 hyperslabs (partial leading row, whole rows, partial trailing
// row, recursively), so the file keeps the HF shape.
//
// Reading (`init hdf5`) is serial HDF5 per rank: each rank reads only the
// hyperslabs of its own shard pieces.
#pragma once

#include <map>
#include <string>

#include "comm/communicator.hpp"
#include "fsdp/engine.hpp"

namespace ftrain::ckpt {

inline constexpr int kConsolidatedFormatVersion = 1;

// Collective over `world` (which must be an MPI communicator).
void save_consolidated(FsdpEngine& engine, Communicator& world, const std::string& path,
                       const std::string& model_name, const std::map<std::string, std::string>& model_config);

// Checks that `path` holds every parameter of the engine's layout with the
// right shape and a floating-point type; throws UserError naming the tensor.
// Not collective (validation before any collective).
void check_consolidated(const std::string& path, const std::vector<FlatEntry>& parameters);

// Fills every rank's master shard from a consolidated file (not collective:
// each rank reads its own slices).
void load_consolidated(FsdpEngine& engine, const std::string& path);

}  // namespace ftrain::ckpt
