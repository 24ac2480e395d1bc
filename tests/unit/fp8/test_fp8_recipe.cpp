// The FP8 delayed-scaling recipe: the scale rule, the amax history (length,
// max vs most_recent, the roll), a spike absorbed without inf/NaN, the margin,
// and the FP8 linear GEMMs (fp8/scaled_linear.hpp) against a float64 reference
// built from the same quantised operands (hybrid: E4M3 forward, E5M2 output
// gradient). Amaxes are recorded and scales updated by the ops
// (cast_to_fp8, fp8_update_scales); the ops' own tests are
// tests/unit/kernels/test_fp8.cpp.
// Exhaustive encode/decode of both formats is tests/unit/core/test_dtype.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "base/error.hpp"
#include "core/rng.hpp"
#include "fp8/recipe.hpp"
#include "fp8/scaled_linear.hpp"
#include "kernels/ops.hpp"
#include "support/op_test_util.hpp"

using namespace ftrain;
using namespace ftrain::fp8;

namespace {

Tensor random_tensor(const Shape& shape, std::uint64_t seed, double scale = 1.0) {
  return ftrain::testing::tensor_from(shape, ftrain::testing::random_vector(shape_numel(shape), seed, scale));
}

// The FP8 value of v * scale, through the cast op (as f32 / scale is the
// dequantised value).
float quantized(float v, float scale, DType fp8) {
  LinearState s = LinearState::create(1);
  s.scale.data_as<float>()[kInput] = scale;
  Fp8Tensor q = s.operand(kInput, Tensor::empty({1}, fp8), /*record=*/false);
  ops::cast_to_fp8(host_context(), from_floats({1}, {v}), q);
  return to_float_vector(q.data)[0];
}

// An amax recorded the way the casts record it (max-accumulated into row 0).
void record(LinearState& s, Operand op, float amax) {
  Fp8Tensor q = s.operand(op, Tensor::empty({1}, DType::fp8_e4m3), /*record=*/true);
  ops::cast_to_fp8(host_context(), from_floats({1}, {amax}), q);
}

bool all_finite(const Tensor& t) {
  for (float v : to_float_vector(t))
    if (!std::isfinite(v)) return false;
  return true;
}

}  // namespace

TEST(Fp8Recipe, ScaleRule) {
  EXPECT_FLOAT_EQ(compute_scale(2.0f, 1.0f, 448.0f, 0), 224.0f);
  EXPECT_FLOAT_EQ(compute_scale(2.0f, 1.0f, 448.0f, 1), 112.0f);
  EXPECT_FLOAT_EQ(compute_scale(2.0f, 1.0f, 57344.0f, 3), 3584.0f);
  // No information: keep the previous scale (TE's torch.where guards).
  EXPECT_FLOAT_EQ(compute_scale(0.0f, 7.0f, 448.0f, 0), 7.0f);
  EXPECT_FLOAT_EQ(compute_scale(std::numeric_limits<float>::infinity(), 7.0f, 448.0f, 0), 7.0f);
  EXPECT_FLOAT_EQ(compute_scale(std::nanf(""), 7.0f, 448.0f, 0), 7.0f);
  EXPECT_FLOAT_EQ(compute_scale(1e-45f, 7.0f, 448.0f, 0), 7.0f);  // 448 / denormal overflows f32
  EXPECT_EQ(fp8_max(DType::fp8_e4m3), 448.0f);
  EXPECT_EQ(fp8_max(DType::fp8_e5m2), 57344.0f);
}

TEST(Fp8Recipe, FormatsPerRole) {
  Recipe hybrid;
  EXPECT_EQ(hybrid.forward_dtype(), DType::fp8_e4m3);
  EXPECT_EQ(hybrid.backward_dtype(), DType::fp8_e5m2);
  Recipe e4m3;
  e4m3.format = Format::e4m3;
  EXPECT_EQ(e4m3.backward_dtype(), DType::fp8_e4m3);
  EXPECT_STREQ(format_name(Format::e4m3), "e4m3");
  EXPECT_STREQ(amax_algo_name(AmaxAlgo::most_recent), "most_recent");
}

TEST(Fp8Recipe, HistoryHoldsTheLastLIterations) {
  for (AmaxAlgo algo : {AmaxAlgo::max, AmaxAlgo::most_recent}) {
    Recipe r;
    r.amax_history_len = 3;
    r.amax_algo = algo;
    LinearState s = LinearState::create(3);
    EXPECT_EQ(s.scale_of(kInput), 1.0f);  // TE starts at 1
    const std::vector<float> amaxes = {4, 1, 2, 0.5f, 0.25f, 8};
    for (std::size_t i = 0; i < amaxes.size(); ++i) {
      record(s, kInput, amaxes[i] / 2);  // two recordings in one iteration: their max counts
      record(s, kInput, amaxes[i]);
      update_scales(host_context(), r, s);
      float expected_amax = amaxes[i];
      if (algo == AmaxAlgo::max) {
        for (std::size_t j = i >= 2 ? i - 2 : 0; j <= i; ++j) expected_amax = std::max(expected_amax, amaxes[j]);
      }
      EXPECT_FLOAT_EQ(s.scale_of(kInput), 448.0f / expected_amax) << "iteration " << i << " " << amax_algo_name(algo);
      EXPECT_EQ(s.scale_of(kWeight), 1.0f) << "nothing recorded: unchanged";
      EXPECT_EQ(to_float_vector(s.amax_history)[kInput], 0.0f) << "row 0 cleared for the next iteration";
    }
  }
  LinearState s = LinearState::create(5);
  const auto named = s.named_tensors("blocks.0.attn.qkv");
  ASSERT_EQ(named.size(), 2u);
  EXPECT_EQ(named[0].first, "blocks.0.attn.qkv.fp8.amax_history");
  EXPECT_EQ(named[0].second.shape(), (Shape{5, 3}));
  EXPECT_EQ(named[1].first, "blocks.0.attn.qkv.fp8.scale");
}

TEST(Fp8Recipe, QuantizeIsTheFp8GridSaturating) {
  EXPECT_EQ(quantized(1.1f, 1.0f, DType::fp8_e4m3), 1.125f);  // 3 mantissa bits
  EXPECT_EQ(quantized(1.1f, 1.0f, DType::fp8_e5m2), 1.0f);    // 2 mantissa bits
  EXPECT_EQ(quantized(1.1f, 4.0f, DType::fp8_e4m3), 4.5f);    // the scale is applied first
  EXPECT_EQ(quantized(1e6f, 1.0f, DType::fp8_e4m3), 448.0f);  // saturates, never inf
  EXPECT_EQ(quantized(-1e9f, 1.0f, DType::fp8_e5m2), -57344.0f);
  EXPECT_TRUE(std::isnan(quantized(std::nanf(""), 1.0f, DType::fp8_e4m3)));
  LinearState s = LinearState::create(2);
  Fp8Tensor q = s.operand(kWeight, Tensor::empty({4}, DType::fp8_e4m3), /*record=*/true);
  ops::cast_to_fp8(host_context(), from_floats({4}, {0.5f, -3.0f, 2.0f, 0.0f}), q);
  EXPECT_EQ(to_float_vector(s.amax_history)[kWeight], 3.0f) << "amax recorded into row 0, on the device";
}

TEST(Fp8Recipe, SpikeIsAbsorbedByTheHistoryWithoutInfOrNan) {
  // Iterations of well-behaved activations (amax ~ 4) set a scale of ~ 448/4;
  // then one activation 10^4 x larger arrives. It cannot have been known when
  // the scale was chosen (delayed scaling): it must saturate to a finite
  // value, not become inf/NaN; the next iterations use a scale that covers it
  // for as long as it is in the history; then the scale recovers.
  Recipe r;
  r.amax_history_len = 4;
  r.margin = 0;
  LinearState s = LinearState::create(r.amax_history_len);
  const Shape xs{16, 8}, ws{6, 8};
  const Tensor w = random_tensor(ws, 2, 0.5);
  auto iteration = [&](const Tensor& x) {
    Tensor y = Tensor::empty({16, 6}, DType::f32);
    linear_forward(host_context(), r, s, true, x, w, nullptr, y);
    Tensor dy = random_tensor({16, 6}, 3), dx = Tensor::empty(xs, DType::f32), dw = Tensor::zeros(ws, DType::f32);
    linear_backward(host_context(), r, s, x, w, dy, &dx, dw, nullptr);
    update_scales(host_context(), r, s);
    EXPECT_TRUE(all_finite(y) && all_finite(dx) && all_finite(dw));
    return y;
  };
  const Tensor calm = random_tensor(xs, 4);  // |x| up to ~3-4
  float calm_amax = 0;
  for (float v : to_float_vector(calm)) calm_amax = std::max(calm_amax, std::fabs(v));
  for (int i = 0; i < 5; ++i) iteration(calm);
  const float calm_scale = s.scale_of(kInput);
  EXPECT_FLOAT_EQ(calm_scale, 448.0f / calm_amax);

  Tensor spike = calm.clone();
  spike.data_as<float>()[5] = 1e4f * calm_amax;
  const Tensor y_spike = iteration(spike);  // quantised with the calm scale: saturates, stays finite
  EXPECT_TRUE(all_finite(y_spike));
  EXPECT_FLOAT_EQ(s.scale_of(kInput), 448.0f / (1e4f * calm_amax)) << "the spike lowers the scale";
  for (int i = 0; i < 3; ++i) {
    iteration(calm);
    EXPECT_FLOAT_EQ(s.scale_of(kInput), 448.0f / (1e4f * calm_amax)) << "still in the history, " << i;
  }
  iteration(calm);  // the spike has left the 4-iteration history
  EXPECT_FLOAT_EQ(s.scale_of(kInput), calm_scale);

  // The spiked output: the saturated row differs from the exact product, the
  // others are the calm ones.
  Tensor y_exact = Tensor::empty({16, 6}, DType::f32);
  ops::linear_forward(host_context(), spike, w, nullptr, y_exact);
  const auto ys = to_float_vector(y_spike), ye = to_float_vector(y_exact);
  float spiked_row = 0, exact_row = 0;  // row 0 holds the spike (element 5)
  for (int o = 0; o < 6; ++o) spiked_row = std::max(spiked_row, std::fabs(ys[o]));
  for (int o = 0; o < 6; ++o) exact_row = std::max(exact_row, std::fabs(ye[o]));
  EXPECT_LT(spiked_row, 100.0f) << "saturated at 448 / scale = the calm amax";
  EXPECT_GT(exact_row, 1000.0f);
}

TEST(Fp8Recipe, MarginGivesHeadroom) {
  // A value 1.5x the remembered amax saturates without margin and fits with
  // margin 1 (scale halved).
  for (int margin : {0, 1}) {
    Recipe r;
    r.amax_history_len = 2;
    r.margin = margin;
    LinearState s = LinearState::create(2);
    record(s, kInput, 2.0f);
    update_scales(host_context(), r, s);
    const float q = quantized(3.0f, s.scale_of(kInput), r.forward_dtype()) / s.scale_of(kInput);
    if (margin == 0) {
      EXPECT_FLOAT_EQ(q, 2.0f) << "saturated at fp8_max / scale = the old amax";
    } else {
      EXPECT_NEAR(q, 3.0f, 3.0f / 16) << "not saturated: only E4M3 rounding (3 mantissa bits)";
    }
  }
}

TEST(Fp8Recipe, LinearMatchesFloat64OnTheQuantisedOperands) {
  for (Format format : {Format::hybrid, Format::e4m3}) {
    Recipe r;
    r.format = format;
    r.amax_history_len = 8;
    LinearState s = LinearState::create(8);
    float* scale = s.scale.data_as<float>();
    scale[kInput] = 30.0f, scale[kWeight] = 900.0f, scale[kGradOutput] = 5000.0f;  // not powers of two
    const std::int64_t N = 12, in = 10, out = 7;
    const Tensor x = random_tensor({N, in}, 5), w = random_tensor({out, in}, 6, 0.2), b = random_tensor({out}, 7);
    const Tensor dy = random_tensor({N, out}, 8, 0.01);
    Tensor y = Tensor::empty({N, out}, DType::f32);
    linear_forward(host_context(), r, s, true, x, w, &b, y);
    Tensor dx = Tensor::empty({N, in}, DType::f32), dw = from_floats({out, in}, std::vector<float>(out * in, 1.0f));
    Tensor db = Tensor::zeros({out}, DType::f32);
    linear_backward(host_context(), r, s, x, w, dy, &dx, dw, &db);

    auto q = [](const Tensor& t, float sc, DType dt) {
      std::vector<double> out;
      for (float v : to_float_vector(t)) out.push_back(quantized(v, sc, dt));
      return out;
    };
    const auto xq = q(x, 30.0f, DType::fp8_e4m3), wq = q(w, 900.0f, DType::fp8_e4m3);
    const auto dyq = q(dy, 5000.0f, r.backward_dtype());
    const auto bv = ftrain::testing::to_doubles(b), dyv = ftrain::testing::to_doubles(dy);
    const auto yv = to_float_vector(y), dxv = to_float_vector(dx), dwv = to_float_vector(dw), dbv = to_float_vector(db);
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t o = 0; o < out; ++o) {
        double acc = 0;
        for (std::int64_t i = 0; i < in; ++i) acc += xq[n * in + i] * wq[o * in + i];
        EXPECT_NEAR(yv[n * out + o], acc / (30.0 * 900.0) + bv[o], 1e-5) << n << "," << o;
      }
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t i = 0; i < in; ++i) {
        double acc = 0;
        for (std::int64_t o = 0; o < out; ++o) acc += dyq[n * out + o] * wq[o * in + i];
        EXPECT_NEAR(dxv[n * in + i], acc / (5000.0 * 900.0), 1e-6);
      }
    for (std::int64_t o = 0; o < out; ++o) {
      double bias = 0;
      for (std::int64_t n = 0; n < N; ++n) bias += dyv[n * out + o];
      EXPECT_NEAR(dbv[o], bias, 1e-6) << "bias gradient from the unquantised dy";
      for (std::int64_t i = 0; i < in; ++i) {
        double acc = 0;
        for (std::int64_t n = 0; n < N; ++n) acc += dyq[n * out + o] * xq[n * in + i];
        EXPECT_NEAR(dwv[o * in + i], 1.0 + acc / (5000.0 * 30.0), 1e-5) << "dw accumulates";
      }
    }
    // And the FP8 result is close to the exact f32 linear (E4M3: 2^-4 relative steps).
    Tensor y32 = Tensor::empty({N, out}, DType::f32);
    ops::linear_forward(host_context(), x, w, &b, y32);
    EXPECT_LT(ftrain::testing::relative_error(ftrain::testing::to_doubles(y), ftrain::testing::to_doubles(y32)), 0.05);
    // Eval-style forward records nothing.
    const auto before = to_float_vector(s.amax_history);
    linear_forward(host_context(), r, s, false, x, w, &b, y);
    EXPECT_EQ(to_float_vector(s.amax_history), before);
  }
}

// FP8 all-gather (fsdp/fp8_all_gather.hpp): a weight that arrives already in
// FP8, cast with the layer's weight scale, is used as it is. Forward and
// backward give exactly what the local cast of the same weight gives, and
// nothing is cast or recorded for it (its amax was recorded where it was cast).
TEST(Fp8Recipe, PreCastWeightIsUsedAsGathered) {
  Recipe r;
  r.amax_history_len = 4;
  const std::int64_t N = 6, in = 8, out = 5;
  const Tensor x = random_tensor({N, in}, 15), dy = random_tensor({N, out}, 16, 0.01);
  Tensor w = Tensor::empty({out, in}, DType::bf16);
  ops::cast(host_context(), random_tensor({out, in}, 17, 0.2), w);
  auto run = [&](bool pre_cast, LinearState& s, Tensor& y, Tensor& dx, Tensor& dw) {
    Tensor weight = w;
    if (pre_cast) {  // what the engine's shard casts produce
      Fp8Tensor wq = s.operand(kWeight, Tensor::empty({out, in}, r.forward_dtype()), /*record=*/false);
      ops::cast_to_fp8(host_context(), w, wq);
      weight = wq.data;
    }
    linear_forward(host_context(), r, s, /*record=*/true, x, weight, nullptr, y);
    linear_backward(host_context(), r, s, x, weight, dy, &dx, dw, nullptr);
  };
  LinearState local = LinearState::create(4), gathered = LinearState::create(4);
  for (LinearState* s : {&local, &gathered}) {
    float* scale = s->scale.data_as<float>();
    scale[kInput] = 30.0f, scale[kWeight] = 900.0f, scale[kGradOutput] = 5000.0f;
  }
  Tensor y1 = Tensor::empty({N, out}, DType::f32), y2 = Tensor::empty({N, out}, DType::f32);
  Tensor dx1 = Tensor::empty({N, in}, DType::f32), dx2 = Tensor::empty({N, in}, DType::f32);
  Tensor dw1 = Tensor::zeros({out, in}, DType::f32), dw2 = Tensor::zeros({out, in}, DType::f32);
  run(false, local, y1, dx1, dw1);
  run(true, gathered, y2, dx2, dw2);
  EXPECT_EQ(to_float_vector(y1), to_float_vector(y2));
  EXPECT_EQ(to_float_vector(dx1), to_float_vector(dx2));
  EXPECT_EQ(to_float_vector(dw1), to_float_vector(dw2));
  const auto h_local = to_float_vector(local.amax_history), h_gathered = to_float_vector(gathered.amax_history);
  EXPECT_GT(h_local[kWeight], 0.0f) << "the local cast records the weight amax";
  EXPECT_EQ(h_gathered[kWeight], 0.0f) << "a pre-cast weight is not cast (nor recorded) again";
  EXPECT_EQ(h_local[kInput], h_gathered[kInput]);
  EXPECT_EQ(h_local[kGradOutput], h_gathered[kGradOutput]);
  // A pre-cast weight in another format than the forward's is refused.
  Tensor y3 = Tensor::empty({N, out}, DType::f32);
  EXPECT_THROW(linear_forward(host_context(), r, gathered, true, x, Tensor::empty({out, in}, DType::fp8_e5m2),
                               nullptr, y3),
               Error);
}
