// Offline merge: a sharded checkpoint (DIR/step_<N>/, one file per rank) to
// the consolidated HDF5 state dict that save_final writes, without training
// (`ftrain-convert sharded-to-h5`, and `sharded-to-safetensors` through it;
// Accelerate's `merge-weights` for FSDP sharded state dicts).
//
// The checkpoint records its resolved deck; its `model` line names the
// plugin, preset and overrides, from which the model (and so the flat layout
// of each unit and the config attributes) is rebuilt. An FSDP engine over
// `world` loads the shards exactly as a resume does (any writing world size)
// and save_consolidated writes the file collectively, so the merge runs on
// one process or on any number of ranks, each holding 1/N of the state.
#pragma once

#include <cstdint>
#include <string>

#include "comm/communicator.hpp"
#include "base/dtype.hpp"

namespace ftrain {

struct MergeSummary {
  std::string model;           // "llama (tiny)"
  std::int64_t step = 0;
  int written_by = 0;          // ranks that wrote the checkpoint
  std::int64_t parameters = 0;
};

// Collective over `world` (an MPI communicator). UserError naming the file
// for a damaged checkpoint or one whose deck has no model line.
MergeSummary merge_sharded_to_h5(const std::string& step_dir, const std::string& out_h5, DType stored,
                                 Communicator& world);

}  // namespace ftrain
