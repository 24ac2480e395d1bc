// The LoRA linear (layers/lora.hpp) against a float64 reference and finite
// differences, dropout off and on: y = x W^T + scale * (drop(x) A^T) B^T
// with W frozen (its gradient undefined, so only dx, dA, dB are computed).
// Also: the dropout mask depends on the global sample, not on how the
// samples are split (rank-count independence), and the PEFT names/matching.
#include <gtest/gtest.h>

#include "kernels/ops.hpp"
#include "layers/lora.hpp"
#include "plugin/model.hpp"
#include "unit/kernels/host_op_checks.hpp"

using namespace ftrain;
using namespace ftrain::testing;

namespace {

constexpr std::int64_t kRows = 6, kIn = 7, kOut = 5, kRank = 3;
constexpr std::int64_t kSamples = 2;  // rows are 2 samples x 3 rows
constexpr std::uint64_t kSeed = 99;
constexpr float kScale = 16.0f / 3.0f;

struct AdapterRig {
  lora::AdaptedLinear linear;
  lora::UnitAdapters unit;
  StepContext ctx;
};

void make_setup(AdapterRig& s, const Tensor& a, const Tensor& b, float dropout, std::int64_t first_sample = 0,
                std::int64_t samples = kSamples) {
  s.linear.module = "model.layers.0.self_attn.q_proj";
  s.linear.dropout_stream = rng::hash_name(s.linear.module);
  s.linear.a = a;
  s.linear.b = b;
  s.linear.grad_a = named_zeros(a.shape(), DType::f32, "grad_a");
  s.linear.grad_b = named_zeros(b.shape(), DType::f32, "grad_b");
  s.unit.by_slot = {nullptr, &s.linear};  // slot 1 adapted, slot 0 not
  s.unit.scale = kScale;
  s.unit.dropout = dropout;
  s.unit.seed = kSeed;
  s.unit.first_sample = first_sample;
  s.unit.samples = samples;
  s.ctx.lora = &s.unit;
  s.ctx.training = true;
}

// float64 reference; inputs {x, W, A, B}.
std::vector<double> reference(const Inputs& in, float p, std::int64_t first_row = 0) {
  const auto &x = in[0], &w = in[1], &a = in[2], &b = in[3];
  const std::uint64_t stream = rng::hash_name("model.layers.0.self_attn.q_proj");
  std::vector<double> y(static_cast<std::size_t>(kRows * kOut));
  for (std::int64_t n = 0; n < kRows; ++n) {
    std::vector<double> xd(kIn), t(kRank, 0.0);
    for (std::int64_t i = 0; i < kIn; ++i)
      xd[i] = x[n * kIn + i] * lora::dropout_factor(kSeed, stream, first_row + n, i, kIn, p);
    for (std::int64_t r = 0; r < kRank; ++r)
      for (std::int64_t i = 0; i < kIn; ++i) t[r] += xd[i] * a[r * kIn + i];
    for (std::int64_t o = 0; o < kOut; ++o) {
      double base = 0, delta = 0;
      for (std::int64_t i = 0; i < kIn; ++i) base += x[n * kIn + i] * w[o * kIn + i];
      for (std::int64_t r = 0; r < kRank; ++r) delta += t[r] * b[o * kRank + r];
      y[n * kOut + o] = base + kScale * delta;
    }
  }
  return y;
}

}  // namespace

class LoraLinear : public ::testing::TestWithParam<float> {};

TEST_P(LoraLinear, GradientsOfInputAAndBMatchFiniteDifferences) {
  const float p = GetParam();
  Tensor x = random_tensor({kRows, kIn}, 1, DType::f32, "x");
  Tensor w = random_tensor({kOut, kIn}, 2, DType::f32, "w", 0.5);
  Tensor a = random_tensor({kRank, kIn}, 3, DType::f32, "lora_A", 0.5);
  Tensor b = random_tensor({kOut, kRank}, 4, DType::f32, "lora_B", 0.5);  // non-zero, so dA is too
  AdapterRig s;
  make_setup(s, a, b, p);
  ExecutionContext& ex = host_context();

  Tensor y = named_zeros({kRows, kOut}, DType::f32, "y");
  ops::linear_forward(ex, x, w, nullptr, y);
  lora::add_forward(s.ctx, 1, x, y);
  const Inputs in{to_doubles(x), to_doubles(w), to_doubles(a), to_doubles(b)};
  const auto f = [&](const Inputs& v) { return reference(v, p); };
  EXPECT_LT(relative_error(to_doubles(y), f(in)), 1e-6);

  // Frozen base: dw undefined, the op computes dx only; then the adapter part.
  Tensor dy = random_tensor({kRows, kOut}, 5, DType::f32, "dy");
  Tensor dx = named_zeros({kRows, kIn}, DType::f32, "dx");
  Tensor frozen_dw;
  ops::linear_backward(ex, x, w, dy, &dx, frozen_dw, nullptr);
  lora::add_backward(s.ctx, 1, x, dy, &dx);
  EXPECT_FALSE(frozen_dw.defined());
  const auto g = to_doubles(dy);
  expect_vjp_matches(f, in, 0, to_doubles(dx), g, 1e-5, 10, "dx");
  expect_vjp_matches(f, in, 2, to_doubles(s.linear.grad_a), g, 1e-5, 11, "dA");
  expect_vjp_matches(f, in, 3, to_doubles(s.linear.grad_b), g, 1e-5, 12, "dB");

  // Adapter gradients accumulate (+=) across micro-steps.
  const auto da1 = to_doubles(s.linear.grad_a), db1 = to_doubles(s.linear.grad_b);
  lora::add_backward(s.ctx, 1, x, dy, nullptr);
  expect_scaled(to_doubles(s.linear.grad_a), da1, 2.0, 1e-5, "dA twice");
  expect_scaled(to_doubles(s.linear.grad_b), db1, 2.0, 1e-5, "dB twice");

  // A slot without an adapter is left alone.
  Tensor y0 = named_zeros({kRows, kOut}, DType::f32, "y0");
  lora::add_forward(s.ctx, 0, x, y0);
  for (double v : to_doubles(y0)) EXPECT_EQ(v, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Dropout, LoraLinear, ::testing::Values(0.0f, 0.4f),
                         [](const auto& info) { return info.param == 0.0f ? std::string("Off") : std::string("On"); });

TEST(LoraDropout, ActuallyDropsAndScales) {
  // p = 0.4 over many elements: about 40% zeros, the rest scaled by 1/0.6.
  Tensor x = named_zeros({100, 50}, DType::f32, "x");
  ops::fill(host_context(), x, 1.0f);
  Tensor y = named_zeros({100, 50}, DType::f32, "y");
  ops::dropout(host_context(), x, 0.4f, kSeed, 7, 0, y);
  int zeros = 0;
  for (double v : to_doubles(y)) {
    if (v == 0.0) ++zeros;
    else EXPECT_NEAR(v, 1.0 / 0.6, 1e-6);
  }
  EXPECT_NEAR(zeros / 5000.0, 0.4, 0.03);
}

TEST(LoraDropout, MaskDependsOnTheGlobalSampleNotTheSplit) {
  // Four samples in one micro-batch give what two micro-batches of two
  // (first_sample 0 and 2, e.g. on two ranks) give.
  Tensor a = random_tensor({kRank, kIn}, 3, DType::f32, "lora_A");
  Tensor b = random_tensor({kOut, kRank}, 4, DType::f32, "lora_B");
  Tensor x = random_tensor({2 * kRows, kIn}, 1, DType::f32, "x");  // 4 samples x 3 rows
  AdapterRig whole;
  make_setup(whole, a, b, 0.5f, /*first_sample=*/0, /*samples=*/4);
  Tensor y = named_zeros({2 * kRows, kOut}, DType::f32, "y");
  lora::add_forward(whole.ctx, 1, x, y);
  const auto expected = to_doubles(y);
  std::vector<double> split;
  for (int half = 0; half < 2; ++half) {
    AdapterRig part;
    make_setup(part, a, b, 0.5f, /*first_sample=*/2 * half, /*samples=*/2);
    Tensor xh = x.view({kRows, kIn}, half * kRows * kIn);
    Tensor yh = named_zeros({kRows, kOut}, DType::f32, "yh");
    lora::add_forward(part.ctx, 1, xh, yh);
    for (double v : to_doubles(yh)) split.push_back(v);
  }
  ASSERT_EQ(split.size(), expected.size());
  for (std::size_t i = 0; i < split.size(); ++i) EXPECT_EQ(split[i], expected[i]) << i;
  // And the mask is not all-ones: without dropout the output differs.
  AdapterRig plain;
  make_setup(plain, a, b, 0.0f, 0, 4);
  Tensor y_plain = named_zeros({2 * kRows, kOut}, DType::f32, "y");
  lora::add_forward(plain.ctx, 1, x, y_plain);
  EXPECT_GT(relative_error(to_doubles(y_plain), expected), 1e-3);
  // Evaluation (training false) never drops.
  whole.ctx.training = false;
  Tensor y_eval = named_zeros({2 * kRows, kOut}, DType::f32, "y");
  lora::add_forward(whole.ctx, 1, x, y_eval);
  EXPECT_EQ(to_doubles(y_eval), to_doubles(y_plain));
}

TEST(LoraConfig, PeftMatchingNamesAndScale) {
  lora::Config c;
  c.targets = {"q_proj", "v_proj"};
  EXPECT_TRUE(c.targets_module("model.layers.3.self_attn.q_proj"));
  EXPECT_TRUE(c.targets_module("v_proj"));
  EXPECT_FALSE(c.targets_module("model.layers.3.self_attn.k_proj"));
  EXPECT_FALSE(c.targets_module("model.layers.3.self_attn.xq_proj")) << "suffix must follow a dot";
  c.all_linear = true;
  EXPECT_TRUE(c.targets_module("blocks.0.mlp.fc1"));
  EXPECT_EQ(lora::module_of_weight("model.layers.0.self_attn.q_proj.weight"), "model.layers.0.self_attn.q_proj");
  EXPECT_EQ(lora::module_of_weight("model.norm.bias"), "");
  EXPECT_EQ(lora::lora_a_name("m.q_proj"), "m.q_proj.lora_A.weight");
  EXPECT_EQ(lora::lora_b_name("m.q_proj"), "m.q_proj.lora_B.weight");
  c.rank = 16;
  c.alpha = 32;
  EXPECT_DOUBLE_EQ(c.scale(), 2.0);
  c.rslora = true;
  EXPECT_DOUBLE_EQ(c.scale(), 8.0);
}
