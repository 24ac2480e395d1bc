// Batch: one micro-batch on one rank, as the data sources fill it and the
// model's units read it.
//
// Lives in data/ (not in the plugin SDK's model.hpp) because the data sources
// produce it and must not depend on the plugin interface; model.hpp includes
// it, and the SDK installs this one header of data/ with it.
#pragma once

#include <cstdint>

#include "core/tensor.hpp"

namespace ftrain {

struct Batch {
  Tensor inputs;   // i32 [B, T] tokens (language) or f32 [B, H, W, C] images (vision)
  Tensor targets;  // i32 [B, T] next tokens (kIgnoreIndex = padding) or i32 [B] labels
  std::int64_t position_offset = 0;  // position of column 0 (always 0 in training windows)
  // i32 [B, T] document id of each input token of a packed window
  // (`document_mask on`): attention stays within a document. Undefined when
  // off: attention sees the whole causal window, as it always did.
  Tensor documents;
  // i32 [B, T] RoPE position of each input token, restarting at 0 where each
  // document of a packed window begins (`document_mask on`, `positions
  // restart`). Undefined: token t is at position_offset + t.
  Tensor positions;
  // parallel context C: i32 [B, T/C] index in the whole window of each token
  // this rank holds (layers/context_parallel_attention.hpp cuts the batch):
  // the causal mask's order, which RoPE's restarted positions are not.
  // Undefined without context parallelism.
  Tensor sequence_index;
  // Index of inputs' first sample in the run's sample order (step * global
  // batch + its place in the step): keys LoRA's dropout mask, so the mask of
  // a sample does not depend on the rank or micro-batch that computes it.
  std::int64_t first_sample = 0;
};

}  // namespace ftrain
