// The simplest element ops, shared by kernels/host/elementwise.cpp and
// kernels/cuda/elementwise.cu: residual add, scaling, and the double-precision
// square that sum_squares (global-norm clipping) accumulates.
#pragma once

#include "kernels/math/hd.hpp"

namespace ftrain::math {

FTRAIN_HD float add_value(float a, float b) { return a + b; }
FTRAIN_HD float scale_value(float x, float factor) { return x * factor; }
// Exact: the product of two floats fits a double.
FTRAIN_HD double square_in_double(float x) { return static_cast<double>(x) * static_cast<double>(x); }
// Global-norm clipping's gradient factor, in double as the trainer computed
// it on the host before clip_coefficient (torch's clip_grad_norm_: applied
// only above max_norm; max_norm <= 0 is "off"). A NaN norm gives 1: that
// step is skipped by its diverged flag, not scaled.
FTRAIN_HD float clip_scale(double norm, double max_norm) {
  return max_norm > 0 && norm > max_norm ? static_cast<float>(max_norm / (norm + 1e-6)) : 1.0f;
}

}  // namespace ftrain::math
