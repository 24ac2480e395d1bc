// Delayed scaling; see recipe.hpp.
#include "fp8/recipe.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.hpp"

namespace ftrain::fp8 {

const char* format_name(Format f) { return f == Format::hybrid ? "hybrid" : "e4m3"; }
const char* amax_algo_name(AmaxAlgo a) { return a == AmaxAlgo::max ? "max" : "most_recent"; }

bool parse_format(const std::string& text, Format& out) {
  if (text == "hybrid") out = Format::hybrid;
  else if (text == "e4m3") out = Format::e4m3;
  else return false;
  return true;
}

bool parse_amax_algo(const std::string& text, AmaxAlgo& out) {
  if (text == "max") out = AmaxAlgo::max;
  else if (text == "most_recent") out = AmaxAlgo::most_recent;
  else return false;
  return true;
}

float fp8_max(DType fp8) {
  FT_CHECK(fp8 == DType::fp8_e4m3 || fp8 == DType::fp8_e5m2) << "fp8_max of " << dtype_name(fp8);
  return fp8 == DType::fp8_e4m3 ? kFp8E4m3Max : kFp8E5m2Max;
}

float compute_scale(float amax, float previous_scale, float max_value, int margin) {
  if (!(amax > 0.0f) || !std::isfinite(amax)) return previous_scale;
  const double scale = (static_cast<double>(max_value) / amax) / std::ldexp(1.0, margin);
  if (!std::isfinite(static_cast<float>(scale)) || scale <= 0.0) return previous_scale;
  return static_cast<float>(scale);
}

LinearState LinearState::create(std::int64_t history_len) {
  FT_CHECK(history_len >= 1) << "fp8 amax history length " << history_len;
  LinearState s;
  s.amax_history = Tensor::zeros({history_len, kNumOperands}, DType::f32);
  s.scale = from_floats({kNumOperands}, {1.0f, 1.0f, 1.0f});
  return s;
}

void LinearState::record(Operand op, float amax) {
  float* h = amax_history.data_as<float>();
  // NaN propagates (so update_scales sees a non-finite amax and keeps the scale).
  if (std::isnan(amax) || amax > h[op]) h[op] = amax;
}

void LinearState::update_scales(const Recipe& recipe) {
  const std::int64_t len = amax_history.dim(0);
  float* h = amax_history.data_as<float>();
  float* s = scale.data_as<float>();
  for (int op = 0; op < kNumOperands; ++op) {
    float amax = h[op];
    if (recipe.amax_algo == AmaxAlgo::max) {
      for (std::int64_t i = 0; i < len; ++i) {
        const float v = h[i * kNumOperands + op];
        if (std::isnan(v) || v > amax) amax = v;
      }
    }
    const DType dtype = op == kGradOutput ? recipe.backward_dtype() : recipe.forward_dtype();
    s[op] = compute_scale(amax, s[op], fp8_max(dtype), recipe.margin);
  }
  // TE: h = torch.roll(h, -1, 0); h[0] = 0. Row 0 (this iteration) moves to
  // the end, row 1 (the oldest) is overwritten by zeros for the next one, so
  // the history always holds the last L iterations.
  std::vector<float> first(h, h + kNumOperands);
  std::memmove(h, h + kNumOperands, static_cast<std::size_t>((len - 1) * kNumOperands) * sizeof(float));
  std::copy(first.begin(), first.end(), h + (len - 1) * kNumOperands);
  std::fill(h, h + kNumOperands, 0.0f);
}

std::vector<std::pair<std::string, Tensor>> LinearState::named_tensors(const std::string& prefix) const {
  return {{prefix + ".fp8.amax_history", amax_history}, {prefix + ".fp8.scale", scale}};
}

}  // namespace ftrain::fp8
