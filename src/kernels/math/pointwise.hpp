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

}  // namespace ftrain::math
