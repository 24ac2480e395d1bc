// What one rank's sharded-checkpoint file holds, taken from the engine at a
// step boundary, and the function that writes it.
//
// A blocking save refers to the engine's own buffers; an asynchronous one
// (checkpoint_writer.hpp) copies them into a host buffer it keeps between
// saves, so training may change the engine while the copy is written. Both
// write through write_shard_file, so the files are byte for byte the same.
//
// Writing is two phases: the HDF5 part (attributes, strings, dataset
// headers, with every f32 dataset's file space allocated), which holds the
// HDF5 library lock (core/hdf5_lock.hpp) for milliseconds; then the bulk
// data and its CRC-32C checksums with large plain writes and one fsync
// (hdf5_util.hpp: write_deferred_f32), outside the library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/sharded_checkpoint.hpp"

namespace ftrain::ckpt {

namespace h5 {
struct DeferredF32;  // hdf5_util.hpp (kept out of this header: hdf5.h is ckpt-private)
}

struct ShardSnapshot {
  struct Array {
    std::string name;  // dataset name inside the unit group
    const float* data = nullptr;
    std::int64_t n = 0;
  };
  struct Unit {
    std::string name;
    std::int64_t index = 0, numel = 0, padded_numel = 0, shard_offset = 0, shard_numel = 0;
    std::string entries_json;
    std::vector<Array> arrays;  // master, exp_avg, exp_avg_sq, then FP8 state
  };
  std::int64_t step = 0, optimizer_steps = 0, world_size = 0, rank = 0, shard_group_size = 0, shard_rank = 0;
  std::int64_t fp8_amax_history_len = 0;  // 0: the run does not use precision fp8
  std::int64_t num_units = 0;  // the model's units (under LoRA `units` holds only the adapters)
  bool lora = false;            // then the frozen base is referenced, not saved:
  std::uint64_t base_checksum = 0;
  std::string base_init;
  std::string base_dtype;       // the frozen base's storage dtype, which its checksum hashes ("f32", "bf16")
  std::uint64_t seed = 0;
  std::string strategy, deck_text, unit_names_json;
  std::vector<std::pair<std::string, double>> scalars;
  std::vector<Unit> units;
  std::int64_t bytes = 0;  // f32 bytes in all arrays
  // A blocking save of state on a device: the host copies the arrays point
  // into (on the host the arrays point into the engine's own buffers).
  std::vector<Tensor> host_copies;
};

// Host memory for snapshot copies, kept from save to save. Grown without
// zero-filling (the copy writes every element; a zero fill would touch the
// pages twice while training waits). Where the state lives on a GPU, this is
// the buffer to allocate pinned.
class SnapshotBuffer {
 public:
  float* reserve(std::size_t elements) {
    if (elements > size_) {
      data_.reset(new float[elements]);
      size_ = elements;
    }
    return data_.get();
  }

 private:
  std::unique_ptr<float[]> data_;
  std::size_t size_ = 0;
};

// The engine's shard state at this moment. With `copy_into` the arrays are
// copied into it and the snapshot stays valid while the engine trains on;
// without, they point into the engine's buffers. Not collective.
ShardSnapshot take_shard_snapshot(FsdpEngine& engine, Communicator& world, const SaveInfo& info,
                                  SnapshotBuffer* copy_into);

// Sets every array's data (units in order, arrays in order; tensors[i] is
// the i-th array's tensor, any device, f32): the tensor's host memory, a host
// copy of a device tensor (kept in s.host_copies), or, with copy_into, a copy
// in that buffer. s.bytes must count all arrays. (take_shard_snapshot's last
// step; tests/unit/ckpt/test_fp8_state_device.cpp uses it directly.)
void fill_snapshot_arrays(ShardSnapshot& s, const std::vector<const Tensor*>& tensors, SnapshotBuffer* copy_into);

// Phase 1: creates `path` with everything but the f32 data (holds the HDF5
// lock); returns the datasets phase 2 must fill. parent_step -1 = none.
std::vector<h5::DeferredF32> create_shard_file(const std::string& path, const ShardSnapshot& snapshot,
                                               std::int64_t parent_step);

// Both phases: the complete, fsync'ed rank file.
void write_shard_file(const std::string& path, const ShardSnapshot& snapshot, std::int64_t parent_step);

}  // namespace ftrain::ckpt
