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

#include <hdf5.h>

#include <map>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "base/dtype.hpp"
#include "fsdp/engine.hpp"

namespace ftrain::ckpt {

inline constexpr int kConsolidatedFormatVersion = 1;

// A dataset stored as bfloat16 holds the upper 16 bits of each f32 as
// little-endian uint16 (H5T_STD_U16LE) and carries the string attribute
// kBf16AttributeName = kBf16AttributeValue (the root gets it too). h5py:
//   (np.asarray(f[name]).astype(np.uint32) << 16).view(np.float32)
inline constexpr const char* kBf16AttributeName = "ftrain_dtype";
inline constexpr const char* kBf16AttributeValue = "bfloat16";

// True if the open dataset holds bfloat16 bits (uint16 + the attribute);
// false for a floating-point dataset; UserError naming `path` and `name`
// for anything else.
bool consolidated_dataset_is_bf16(hid_t dataset, const std::string& path, const std::string& name);

// Row-major elements [first, first + count) of the open dataset of shape
// `dims`, as f32, whether it is stored as a float type or as bf16 bits.
void read_consolidated_range(hid_t dataset, const std::string& path, const std::string& name,
                             const std::vector<hsize_t>& dims, std::int64_t first, std::int64_t count, float* dst);

// Collective over `world` (which must be an MPI communicator). `stored` is
// f32 (H5T_IEEE_F32LE) or bf16 (bfloat16 bits, see kBf16AttributeName; each
// rank rounds its own pieces to nearest even, one piece at a time).
void save_consolidated(FsdpEngine& engine, Communicator& world, const std::string& path,
                       const std::string& model_name, const std::map<std::string, std::string>& model_config,
                       DType stored = DType::f32);

// Checks that `path` holds every parameter of the engine's layout with the
// right shape and a floating-point type; throws UserError naming the tensor.
// Not collective (validation before any collective).
void check_consolidated(const std::string& path, const std::vector<FlatEntry>& parameters);

// Fills every rank's master shard from a consolidated file (not collective:
// each rank reads its own slices).
void load_consolidated(FsdpEngine& engine, const std::string& path);

}  // namespace ftrain::ckpt
