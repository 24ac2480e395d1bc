// A linear's GEMMs in FP8 with Transformer Engine's delayed scaling
// (fp8/recipe.hpp): the casts with the layer's scales, the amax records and
// the scaled GEMMs. The linear layer every precision goes through
// (layers/linear.hpp) calls these under `precision fp8`. Everything here is
// an op on the caller's stream (kernels/op_list.hpp:
// cast_to_fp8, fp8_linear_forward, fp8_linear_backward): no host loop, no
// stream synchronisation, no scale or amax read back to the host.
//
// Forward:  xq = fp8(x * s_x), wq = fp8(w * s_w) (forward format, saturating;
//           the casts max-accumulate max|x|, max|w| into the history's row 0)
//           y  = (xq . wq^T) / (s_x s_w) + b            f32 GEMM on the FP8 values
// Backward: dyq = fp8(dy * s_dy) (backward format: E5M2 in hybrid; its amax
//           recorded), xq and wq re-cast with the forward's scales (nothing
//           recorded: they were in the forward); on a GPU the casts also
//           write the transposed copies cuBLASLt's TN-only FP8 GEMMs read
//           dx  = (dyq . wq) / (s_dy s_w)
//           dw += (dyq^T . xq) / (s_dy s_x)
//           db += colsum(dy)   (unquantised, as TE's bias gradient)
// FP8 all-gather (fsdp/fp8_all_gather.hpp): a weight w that arrives already
// in FP8 (dtype fp8_e4m3) was cast by the engine, shard by shard, with this
// layer's weight scale, and its amax recorded there; forward and backward
// use it as wq directly (no cast, no record). A unit must therefore hand
// its linear weights to layers::LinearLayers untouched (views of them are fine:
// ViT's q, k, v thirds of qkv).
// Scales change only between steps, when the engine reduces the amaxes over
// ranks and runs fp8::update_scales (plugin/model.hpp: Unit::fp8_states).
#pragma once

#include "core/tensor.hpp"
#include "fp8/recipe.hpp"
#include "runtime/execution_context.hpp"

namespace ftrain::fp8 {

// One FP8 linear on `state`, enqueued on exec's compute stream. record:
// accumulate this call's input and weight amaxes (training forwards; an
// evaluation forward records nothing). The backward always records the
// output gradient's amax.
void linear_forward(ExecutionContext& exec, const Recipe& recipe, LinearState& state, bool record, const Tensor& x,
                    const Tensor& w, const Tensor* b, Tensor& y);
void linear_backward(ExecutionContext& exec, const Recipe& recipe, LinearState& state, const Tensor& x,
                     const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw, Tensor* db);
// linear_forward on an input a fused producer already cast (ops::
// rmsnorm_forward_fp8, ops::swiglu_forward_fp8) into xq, a descriptor from
// input_operand (same scale, same amax slot, same codes as linear_forward's
// own cast): the weight and the GEMM as in linear_forward, no second cast.
void linear_forward_cast(ExecutionContext& exec, const Recipe& recipe, LinearState& state, bool record,
                         const Fp8Tensor& xq, const Tensor& w, const Tensor* b, Tensor& y);
// The input descriptor linear_forward casts into: fresh data of `shape` in
// the forward format, the layer's input scale, its amax slot when record.
Fp8Tensor input_operand(const Recipe& recipe, const LinearState& state, bool record, const Shape& shape,
                        Device device);

}  // namespace ftrain::fp8
