// The simplest element ops, shared by kernels/host/elementwise.cpp and
// kernels/cuda/elementwise.cu: residual add, scaling, and the double-precision
// square that sum_squares (global-norm clipping) accumulates.
#pragma once

#include <cstdint>

#include "base/hd.hpp"

namespace ftrain::math {

FTRAIN_HD float add_value(float a, float b) { return a + b; }
FTRAIN_HD float scale_value(float x, float factor) { return x * factor; }
// Exact: the product of two floats fits a double.
FTRAIN_HD double square_in_double(float x) { return static_cast<double>(x) * static_cast<double>(x); }
// The global gradient norm from the f64 sum of squares (clip_coefficient).
FTRAIN_HD double norm_from_sum_squares(double sum_squares) { return sqrt_f64(sum_squares); }
// True for a finite double, without libm: x - x is 0 for a finite x and NaN
// for an infinity or a NaN.
FTRAIN_HD bool finite_f64(double x) { return x - x == 0.0; }
// The sticky diverged flag (clip_coefficient): the first step whose norm is
// not finite, 0 while none was; once set it stays until the host resets it.
FTRAIN_HD std::int64_t diverged_step_after(std::int64_t flagged, double norm, std::int64_t step) {
  return flagged == 0 && !finite_f64(norm) ? step : flagged;
}
// Global-norm clipping's gradient factor, in double as the trainer computed
// it on the host before clip_coefficient (torch's clip_grad_norm_: applied
// only above max_norm; max_norm <= 0 is "off"). A NaN norm gives 1: that
// step is skipped by its diverged flag, not scaled.
FTRAIN_HD float clip_scale(double norm, double max_norm) {
  return max_norm > 0 && norm > max_norm ? static_cast<float>(max_norm / (norm + 1e-6)) : 1.0f;
}

}  // namespace ftrain::math
