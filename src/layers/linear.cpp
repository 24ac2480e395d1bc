// The linear layer of every precision; see linear.hpp.
#include "layers/linear.hpp"

#include "base/error.hpp"
#include "fp8/scaled_linear.hpp"
#include "kernels/ops.hpp"

namespace ftrain::layers {

namespace {
bool is_fp8_dtype(DType t) { return t == DType::fp8_e4m3 || t == DType::fp8_e5m2; }
}  // namespace

LinearLayers::LinearLayers(std::vector<std::string> names) : names_(std::move(names)) {}

void LinearLayers::create(const fp8::Recipe& recipe, Device device) {
  if (!states_.empty()) return;
  states_.resize(names_.size());
  for (std::size_t i = 0; i < names_.size(); ++i)
    if (!names_[i].empty()) states_[i] = fp8::LinearState::create(recipe.amax_history_len, device);
}

fp8::LinearState& LinearLayers::state(const StepContext& ctx, int layer) {
  FT_CHECK(ctx.fp8_recipe != nullptr) << "FP8 linear: StepContext::fp8 without a recipe";
  FT_CHECK(layer >= 0 && static_cast<std::size_t>(layer) < names_.size() && !names_[layer].empty())
      << "FP8 linear: index " << layer << " is not a linear layer of this unit (" << names_.size() << " slots)";
  create(*ctx.fp8_recipe, ctx.device);
  fp8::LinearState& s = states_[static_cast<std::size_t>(layer)];
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
  fp8::linear_forward(ctx.execution(), *ctx.fp8_recipe, state(ctx, layer), /*record=*/ctx.training, x, w, b, y);
}

Fp8Tensor LinearLayers::input_cast(const StepContext& ctx, int layer, const Shape& shape) {
  FT_CHECK(ctx.fp8) << "linear layer index " << layer << ": an FP8 input cast outside precision fp8";
  return fp8::input_operand(*ctx.fp8_recipe, state(ctx, layer), /*record=*/ctx.training, shape, ctx.device);
}

void LinearLayers::forward_cast(const StepContext& ctx, int layer, const Fp8Tensor& xq, const Tensor& w,
                                const Tensor* b, Tensor& y) {
  FT_CHECK(ctx.fp8) << "linear layer index " << layer << ": an FP8 input outside precision fp8";
  fp8::linear_forward_cast(ctx.execution(), *ctx.fp8_recipe, state(ctx, layer), /*record=*/ctx.training, xq, w, b, y);
}

void LinearLayers::backward(const StepContext& ctx, int layer, const Tensor& x, const Tensor& w, const Tensor& dy,
                            Tensor* dx, Tensor& dw, Tensor* db) {
  FT_CHECK(ctx.fp8 || !is_fp8_dtype(w.dtype())) << "linear layer index " << layer
                                               << ": FP8 weight " << w.describe() << " outside precision fp8";
  if (!ctx.fp8) return ops::linear_backward(ctx.execution(), x, w, dy, dx, dw, db);
  fp8::linear_backward(ctx.execution(), *ctx.fp8_recipe, state(ctx, layer), x, w, dy, dx, dw, db);
}

std::vector<Fp8StateRef> LinearLayers::states(const fp8::Recipe& recipe) {
  create(recipe, Device::host);
  std::vector<Fp8StateRef> out;
  for (std::size_t i = 0; i < names_.size(); ++i)
    if (!names_[i].empty()) out.push_back({names_[i], &states_[i]});
  return out;
}

}  // namespace ftrain::layers
