// Rotary position embedding, Hugging Face rotate-half: one pair (i, i + D/2)
// of a head vector rotated by the angle position * inv_freq[i]. Shared by
// kernels/host/rope.cpp and kernels/cuda/rope.cu. direction +1 is the
// forward rotation, -1 its transpose (the backward).
#pragma once

#include "base/hd.hpp"

namespace ftrain::math {

// The f32 angle as HF computes it (position as f32 times inv_freq).
FTRAIN_HD float rope_angle(std::int64_t position, float inv_freq) { return static_cast<float>(position) * inv_freq; }

struct RotatedPair {
  float first, second;
};
FTRAIN_HD RotatedPair rope_rotate(float first, float second, float cos_angle, float sin_angle, float direction) {
  const float sn = direction * sin_angle;
  return {first * cos_angle - second * sn, second * cos_angle + first * sn};
}

}  // namespace ftrain::math
