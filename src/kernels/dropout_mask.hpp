// The dropout mask, written once for every backend (DESIGN.md §3: one
// source for the arithmetic): element `index` of a mask stream is kept iff
// its counter-based uniform is >= p, and a kept element is scaled by
// 1 / (1 - p) (inverted dropout, PyTorch's nn.Dropout). A pure function of
// (seed, stream, index), so any rank can draw any slice of the mask.
#pragma once

#include <cstdint>

#include "core/rng.hpp"

namespace ftrain::kernels {

inline float dropout_factor(std::uint64_t seed, std::uint64_t stream, std::uint64_t index, float p) {
  if (p <= 0.0f) return 1.0f;
  return rng::uniform(seed, stream, index) >= static_cast<double>(p) ? 1.0f / (1.0f - p) : 0.0f;
}

}  // namespace ftrain::kernels
