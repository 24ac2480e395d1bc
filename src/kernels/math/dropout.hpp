// The dropout mask and its application, written once for every backend
// (kernels/host/dropout.cpp, kernels/cuda/dropout.cu, layers/lora.cpp):
// element `index` of a mask stream is kept iff its counter-based uniform
// (core/rng.hpp) is >= p, and a kept element is scaled by 1 / (1 - p)
// (inverted dropout, PyTorch's nn.Dropout). A pure function of (seed,
// stream, index), so any rank can draw any slice of the mask.
//
// Mask index of element e of a [rows, C] slice that starts at global row
// first_row: first_row * C + e (LoRA dropout keyed by global sample, row
// and column: every rank and backend draws the same mask).
#pragma once

#include <cstdint>

#include "core/rng.hpp"
#include "base/hd.hpp"

namespace ftrain::math {

FTRAIN_HD float dropout_factor(std::uint64_t seed, std::uint64_t stream, std::uint64_t index, float p) {
  if (p <= 0.0f) return 1.0f;
  return rng::uniform(seed, stream, index) >= static_cast<double>(p) ? 1.0f / (1.0f - p) : 0.0f;
}

FTRAIN_HD std::uint64_t dropout_mask_index(std::int64_t first_row, std::int64_t width, std::int64_t element) {
  return static_cast<std::uint64_t>(first_row) * static_cast<std::uint64_t>(width) +
         static_cast<std::uint64_t>(element);
}

FTRAIN_HD float dropout_value(float x, std::uint64_t seed, std::uint64_t stream, std::uint64_t index, float p) {
  return x * dropout_factor(seed, stream, index, p);
}

}  // namespace ftrain::math
