// The scalar arithmetic of FP8 delayed scaling under the names the recipe
// uses (fp8/recipe.hpp). The functions themselves live in
// kernels/math/fp8.hpp, shared with the CUDA kernels.
#pragma once

#include "kernels/math/fp8.hpp"

namespace ftrain::fp8_scaling {

inline constexpr float kE4m3Max = math::kFp8E4m3MaxValue;  // largest finite E4M3 value
inline constexpr float kE5m2Max = math::kFp8E5m2MaxValue;  // largest finite E5M2 value

inline float amax_combine(float a, float b) { return math::amax_combine(a, b); }
inline float next_scale(float amax, float previous, float max_value, int margin) {
  return math::fp8_next_scale(amax, previous, max_value, margin);
}

}  // namespace ftrain::fp8_scaling
