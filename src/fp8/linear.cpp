// The shared FP8 linear layer; see linear.hpp.
#include "fp8/linear.hpp"

#include "core/error.hpp"
#include "kernels/ops.hpp"

namespace ftrain::fp8 {

namespace {
Tensor fp8_data(const Tensor& like, DType format) { return Tensor::empty(like.shape(), format, like.device()); }

bool is_fp8_dtype(DType t) { return t == DType::fp8_e4m3 || t == DType::fp8_e5m2; }

// The weight operand: cast here with the layer's weight scale, or, when the
// engine gathered it as FP8 (fsdp/fp8_all_gather.hpp), taken as it is: those
// bytes were cast with this very scale (scales change only between steps)
// and the gather recorded their amax, so nothing is cast or recorded again.
Fp8Tensor weight_operand(ExecutionContext& exec, const Recipe& recipe, LinearState& state, bool record,
                         const Tensor& w) {
  if (is_fp8_dtype(w.dtype())) {
    FT_CHECK(w.dtype() == recipe.forward_dtype())
        << "FP8 linear: gathered weight " << w.describe() << " is not in the forward format "
        << dtype_name(recipe.forward_dtype());
    return state.operand(kWeight, w, /*record=*/false);
  }
  Fp8Tensor wq = state.operand(kWeight, fp8_data(w, recipe.forward_dtype()), record);
  ops::cast_to_fp8(exec, w, wq);
  return wq;
}
}  // namespace

void linear_forward(ExecutionContext& exec, const Recipe& recipe, LinearState& state, bool record, const Tensor& x,
                    const Tensor& w, const Tensor* b, Tensor& y) {
  FT_CHECK(state.defined()) << "fp8::linear_forward: no FP8 state for this layer";
  Fp8Tensor xq = state.operand(kInput, fp8_data(x, recipe.forward_dtype()), record);
  ops::cast_to_fp8(exec, x, xq);
  const Fp8Tensor wq = weight_operand(exec, recipe, state, record, w);
  ops::fp8_linear_forward(exec, xq, wq, b, y);
}

void linear_backward(ExecutionContext& exec, const Recipe& recipe, LinearState& state, const Tensor& x,
                     const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw, Tensor* db) {
  FT_CHECK(state.defined()) << "fp8::linear_backward: no FP8 state for this layer";
  // The forward's quantisation again (same scales); on a GPU these would be
  // the transposed FP8 copies the forward's cast kept.
  Fp8Tensor xq = state.operand(kInput, fp8_data(x, recipe.forward_dtype()), /*record=*/false);
  Fp8Tensor dyq = state.operand(kGradOutput, fp8_data(dy, recipe.backward_dtype()), /*record=*/true);
  ops::cast_to_fp8(exec, x, xq);
  const Fp8Tensor wq = weight_operand(exec, recipe, state, /*record=*/false, w);
  ops::cast_to_fp8(exec, dy, dyq);
  ops::fp8_linear_backward(exec, xq, wq, dyq, dy, dx, dw, db);
}

LinearLayers::LinearLayers(std::vector<std::string> names) : names_(std::move(names)) {}

void LinearLayers::create(const Recipe& recipe, Device device) {
  if (!states_.empty()) return;
  states_.resize(names_.size());
  for (std::size_t i = 0; i < names_.size(); ++i)
    if (!names_[i].empty()) states_[i] = LinearState::create(recipe.amax_history_len, device);
}

LinearState& LinearLayers::state(const StepContext& ctx, int layer) {
  FT_CHECK(ctx.fp8_recipe != nullptr) << "FP8 linear: StepContext::fp8 without a recipe";
  FT_CHECK(layer >= 0 && static_cast<std::size_t>(layer) < names_.size() && !names_[layer].empty())
      << "FP8 linear: index " << layer << " is not a linear layer of this unit (" << names_.size() << " slots)";
  create(*ctx.fp8_recipe, ctx.device);
  LinearState& s = states_[static_cast<std::size_t>(layer)];
  // States created on the host before the first step (checkpoint resume)
  // move to the training device once.
  if (s.amax_history.device() != ctx.device) s = s.to(ctx.device);
  return s;
}

void LinearLayers::forward(const StepContext& ctx, int layer, const Tensor& x, const Tensor& w, const Tensor* b,
                           Tensor& y) {
  FT_CHECK(ctx.fp8 || !is_fp8_dtype(w.dtype())) << "linear layer index " << layer
                                               << ": FP8 weight " << w.describe() << " outside precision fp8";
  if (!ctx.fp8) return ops::linear_forward(ctx.execution(), x, w, b, y);
  linear_forward(ctx.execution(), *ctx.fp8_recipe, state(ctx, layer), /*record=*/ctx.training, x, w, b, y);
}

void LinearLayers::backward(const StepContext& ctx, int layer, const Tensor& x, const Tensor& w, const Tensor& dy,
                            Tensor* dx, Tensor& dw, Tensor* db) {
  FT_CHECK(ctx.fp8 || !is_fp8_dtype(w.dtype())) << "linear layer index " << layer
                                               << ": FP8 weight " << w.describe() << " outside precision fp8";
  if (!ctx.fp8) return ops::linear_backward(ctx.execution(), x, w, dy, dx, dw, db);
  linear_backward(ctx.execution(), *ctx.fp8_recipe, state(ctx, layer), x, w, dy, dx, dw, db);
}

std::vector<Fp8StateRef> LinearLayers::states(const Recipe& recipe) {
  create(recipe, Device::host);
  std::vector<Fp8StateRef> out;
  for (std::size_t i = 0; i < names_.size(); ++i)
    if (!names_[i].empty()) out.push_back({names_[i], &states_[i]});
  return out;
}

}  // namespace ftrain::fp8
