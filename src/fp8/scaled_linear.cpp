// A linear's FP8 GEMMs with delayed scaling; see scaled_linear.hpp.
#include "fp8/scaled_linear.hpp"

#include "base/error.hpp"
#include "kernels/ops.hpp"

namespace ftrain::fp8 {

namespace {
Tensor fp8_data(const Tensor& like, DType format) { return Tensor::empty(like.shape(), format, like.device()); }

// The transposed FP8 copy [cols, rows] the cast writes beside the data on a
// GPU, where cuBLASLt's FP8 GEMMs take only the TN layout
// (kernels/cuda/cublaslt_plan.hpp: dgrad reads w's, wgrad x's and dy's). The
// host GEMMs transpose by themselves: nothing is made there.
void request_transposed_copy(Fp8Tensor& t) {
  if (t.data.device() == Device::host) return;
  const std::int64_t cols = t.data.dim(-1);
  t.data_t = Tensor::empty({cols, cols > 0 ? t.data.numel() / cols : 0}, t.data.dtype(), t.data.device());
}

bool is_fp8_dtype(DType t) { return t == DType::fp8_e4m3 || t == DType::fp8_e5m2; }

// The weight operand: cast here with the layer's weight scale, or, when the
// engine gathered it as FP8 (fsdp/fp8_all_gather.hpp), taken as it is: those
// bytes were cast with this very scale (scales change only between steps)
// and the gather recorded their amax, so nothing is cast or recorded again.
// On a device the gathered codes get their transposed copy by fp8_transpose
// (bytes only: they are already on this scale's grid).
Fp8Tensor weight_operand(ExecutionContext& exec, const Recipe& recipe, LinearState& state, bool record,
                         const Tensor& w, bool transposed_copy) {
  if (is_fp8_dtype(w.dtype())) {
    FT_CHECK(w.dtype() == recipe.forward_dtype())
        << "FP8 linear: gathered weight " << w.describe() << " is not in the forward format "
        << dtype_name(recipe.forward_dtype());
    Fp8Tensor wq = state.operand(kWeight, w, /*record=*/false);
    if (transposed_copy) request_transposed_copy(wq);
    if (wq.data_t.defined()) ops::fp8_transpose(exec, wq.data, wq.data_t);
    return wq;
  }
  Fp8Tensor wq = state.operand(kWeight, fp8_data(w, recipe.forward_dtype()), record);
  if (transposed_copy) request_transposed_copy(wq);
  ops::cast_to_fp8(exec, w, wq);
  return wq;
}
}  // namespace

Fp8Tensor input_operand(const Recipe& recipe, const LinearState& state, bool record, const Shape& shape,
                        Device device) {
  FT_CHECK(state.defined()) << "fp8::input_operand: no FP8 state for this layer";
  return state.operand(kInput, Tensor::empty(shape, recipe.forward_dtype(), device), record);
}

void linear_forward(ExecutionContext& exec, const Recipe& recipe, LinearState& state, bool record, const Tensor& x,
                    const Tensor& w, const Tensor* b, Tensor& y) {
  FT_CHECK(state.defined()) << "fp8::linear_forward: no FP8 state for this layer";
  Fp8Tensor xq = input_operand(recipe, state, record, x.shape(), x.device());
  ops::cast_to_fp8(exec, x, xq);
  linear_forward_cast(exec, recipe, state, record, xq, w, b, y);
}

void linear_forward_cast(ExecutionContext& exec, const Recipe& recipe, LinearState& state, bool record,
                         const Fp8Tensor& xq, const Tensor& w, const Tensor* b, Tensor& y) {
  FT_CHECK(state.defined()) << "fp8::linear_forward: no FP8 state for this layer";
  FT_CHECK(xq.data.dtype() == recipe.forward_dtype())
      << "fp8::linear_forward_cast: input " << xq.data.describe() << " is not in the forward format "
      << dtype_name(recipe.forward_dtype());
  const Fp8Tensor wq = weight_operand(exec, recipe, state, record, w, /*transposed_copy=*/false);
  ops::fp8_linear_forward(exec, xq, wq, b, y);
}

void linear_backward(ExecutionContext& exec, const Recipe& recipe, LinearState& state, const Tensor& x,
                     const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw, Tensor* db) {
  FT_CHECK(state.defined()) << "fp8::linear_backward: no FP8 state for this layer";
  // The forward's quantisation again (same scales), with the transposed
  // copies the GPU's dgrad and wgrad read.
  Fp8Tensor xq = state.operand(kInput, fp8_data(x, recipe.forward_dtype()), /*record=*/false);
  Fp8Tensor dyq = state.operand(kGradOutput, fp8_data(dy, recipe.backward_dtype()), /*record=*/true);
  for (Fp8Tensor* t : {&xq, &dyq}) request_transposed_copy(*t);
  ops::cast_to_fp8(exec, x, xq);
  const Fp8Tensor wq = weight_operand(exec, recipe, state, /*record=*/false, w, /*transposed_copy=*/true);
  ops::cast_to_fp8(exec, dy, dyq);
  ops::fp8_linear_backward(exec, xq, wq, dyq, dy, dx, dw, db);
}

}  // namespace ftrain::fp8
