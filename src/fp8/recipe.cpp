// Delayed scaling; see recipe.hpp.
#include "fp8/recipe.hpp"

#include "base/error.hpp"
#include "kernels/ops.hpp"

namespace ftrain::fp8 {

const char* format_name(Format f) { return f == Format::hybrid ? "hybrid" : "e4m3"; }
const char* amax_algo_name(AmaxAlgo a) { return a == AmaxAlgo::max ? "max" : "most_recent"; }

float fp8_max(DType fp8) {
  FT_CHECK(fp8 == DType::fp8_e4m3 || fp8 == DType::fp8_e5m2) << "fp8_max of " << dtype_name(fp8);
  return fp8 == DType::fp8_e4m3 ? fp8_scaling::kE4m3Max : fp8_scaling::kE5m2Max;
}

LinearState LinearState::create(std::int64_t history_len, Device device) {
  FT_CHECK(history_len >= 1) << "fp8 amax history length " << history_len;
  LinearState s;
  s.amax_history = Tensor::zeros({history_len, kNumOperands}, DType::f32, device, "fp8.amax_history");
  // Scales start at 1, as TE's; scale_inv follows them.
  const Tensor ones = from_floats({kNumOperands}, {1.0f, 1.0f, 1.0f});
  s.scale = to_device(ones, device);
  s.scale.set_name("fp8.scale");
  s.scale_inv = to_device(ones, device);
  s.scale_inv.set_name("fp8.scale_inv");
  return s;
}

LinearState LinearState::to(Device device) const {
  if (amax_history.device() == device) return *this;
  return {to_device(amax_history, device), to_device(scale, device), to_device(scale_inv, device)};
}

Fp8Tensor LinearState::operand(Operand op, const Tensor& data, bool record) const {
  FT_CHECK(defined()) << "FP8 operand of a linear layer without state";
  return {data, scale.view({1}, op, "fp8.scale"), scale_inv.view({1}, op, "fp8.scale_inv"),
          record ? amax_history.view({1}, op, "fp8.amax") : Tensor(), Tensor()};
}

std::vector<std::pair<std::string, Tensor>> LinearState::named_tensors(const std::string& prefix) const {
  return {{prefix + ".fp8.amax_history", amax_history}, {prefix + ".fp8.scale", scale}};
}

void update_scales(ExecutionContext& ctx, const Recipe& recipe, LinearState& state) {
  FT_CHECK(state.defined()) << "fp8::update_scales of a linear layer without state";
  ops::fp8_update_scales(ctx, state.amax_history, state.scale, state.scale_inv, recipe.forward_dtype(),
                         recipe.backward_dtype(),
                         recipe.margin, recipe.amax_algo);
}

}  // namespace ftrain::fp8
