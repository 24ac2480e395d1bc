// The FP8 delayed-scaling state of a unit in a sharded checkpoint, named and
// read in one place so that a file does not depend on where the state lived
// (host or GPU): the same datasets, names, dtypes and shapes, and a file
// written by a CUDA run loads on the host and the other way round.
//
// Per FP8 linear layer (fp8/recipe.hpp: LinearState), in the unit's group:
//   "<layer>.fp8.amax_history"  f32, L * 3 elements (row-major [L, 3])
//   "<layer>.fp8.scale"         f32, 3 elements
// (scale_inv is derived, not saved: the reader sets it to 1 / scale, as the
// scale update and every cast do. It must not wait for a cast: under the FP8
// all-gather a rank that owns no piece of a weight never casts it, and the
// first step after a resume would dequantise with a stale scale_inv.) The
// writer stages device tensors on the host (shard_snapshot.cpp:
// fill_snapshot_arrays); the reader reads into host memory and copies into
// the state wherever it lives.
#pragma once

#include <hdf5.h>

#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "plugin/model.hpp"

namespace ftrain::ckpt {

struct Fp8StateArray {
  std::string name;      // dataset name inside the unit's group
  Tensor* tensor;        // the state's own tensor (any device), f32
};

// The datasets of `refs`, in layer order (amax_history, scale per layer).
std::vector<Fp8StateArray> fp8_state_arrays(const std::vector<Fp8StateRef>& refs);

// Reads every dataset of fp8_state_arrays(refs) from `group` into the states,
// through host memory (a device state gets a host -> device copy), and sets
// each state's scale_inv to 1 / scale (math::fp8_scale_inv). `where` names
// the file and group in errors.
void read_fp8_state_arrays(hid_t group, const std::vector<Fp8StateRef>& refs, const std::string& where);

}  // namespace ftrain::ckpt
