// FP8 linear layer, emulated exactly on the host (the GPU backend will put
// cuBLASLt FP8 GEMMs behind the same functions).
//
// Forward:  xq = fp8(x * s_x), wq = fp8(w * s_w) (forward format, saturating)
//           y  = (xq . wq^T) / (s_x s_w) + b            f32 GEMM on the FP8 values
// Backward: dyq = fp8(dy * s_dy) (backward format: E5M2 in hybrid)
//           dx  = (dyq . wq) / (s_dy s_w)
//           dw += (dyq^T . xq) / (s_dy s_x)
//           db += colsum(dy)   (unquantised, as TE's bias gradient)
// The FP8 values are exact in f32 and the GEMMs accumulate in f32, which is
// what Hopper's FP8 tensor cores do (f32 accumulation, scaling applied to
// the f32 result), so the emulation differs from the GPU only by summation
// order. Bias and output stay in the compute dtype (BF16 in practice).
//
// Scales come from the layer's LinearState (recipe.hpp): `record` (training)
// adds this call's amaxes to the history; the backward caller runs
// state.update_scales(recipe) once all of the layer's backward GEMMs of the
// iteration are done (a layer may split one logical GEMM into several calls,
// e.g. ViT's qkv into q, k, v: they share one state and one update).
#pragma once

#include "core/tensor.hpp"
#include "fp8/recipe.hpp"
#include "runtime/execution_context.hpp"

namespace ftrain::fp8 {

// dst (f32, same numel) = the FP8 value of src * scale in `fp8` (an FP8
// dtype), as a float: fp8 decode(encode(src * scale)). Returns max |src|
// (NaN if src holds a NaN).
float quantize(const Tensor& src, float scale, DType fp8, Tensor& dst);

// Both wait for `exec`'s compute stream on entry and return with their
// outputs written (the emulation runs on the host, synchronously).
void linear_forward(ExecutionContext& exec, const Recipe& recipe, LinearState& state, bool record, const Tensor& x,
                    const Tensor& w, const Tensor* b, Tensor& y);
void linear_backward(ExecutionContext& exec, const Recipe& recipe, LinearState& state, bool record, const Tensor& x,
                     const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw, Tensor* db);

}  // namespace ftrain::fp8
