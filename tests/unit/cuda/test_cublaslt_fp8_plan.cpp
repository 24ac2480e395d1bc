// cuBLASLt FP8 plans (kernels/cuda/cublaslt_plan.hpp: plan_fp8_linear)
// replayed on the host: every plan (forward, dgrad, wgrad) of every distinct
// linear shape of the tiny Llama and Llama 3.2 1B presets runs through
// OpenBLAS's column-major cblas_sgemm with exactly the plan's operands,
// transposes, m/n/k and leading dimensions, on the FP8 codes the host cast
// wrote (data and the transposed copies data_t: the grid the plan's element
// types say), decoded exactly to f32, then multiplied by the values behind
// the plan's A and B scale pointers (the operands' scale_inv), plus beta C
// and the bias step, and stored in the plan's D dtype. That must equal the
// host ops fp8_linear_forward / fp8_linear_backward on the same FP8 tensors
// (within the tolerance of a different summation order: a few f32 ulps; the
// host ops take the same factor, scale_inv_a * scale_inv_b). Mutated plans (operands swapped or untransposed, a
// leading dimension, m/n, beta, an FP8 format, a scale pointer aimed at
// another operand or at the scale instead of scale_inv, a non-TN layout)
// must fail the replay or be refused by fp8_gemm_plan_problem. The plan
// check also refuses what cuBLASLt's FP8 rules refuse: a layout other than
// TN, an operand below 16-byte alignment or with its alignment not placed, a
// bias epilogue of another dtype than bf16.
#include <cblas.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <utility>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "core/tensor.hpp"
#include "kernels/cuda/cublaslt_plan.hpp"
#include "kernels/ops.hpp"
#include "runtime/execution_context.hpp"
#include "unit/cuda/preset_shapes.hpp"

using namespace ftrain;
using namespace ftrain::cuda;

namespace {

// Distinct per operand, none a power of two: a scale pointer aimed at the
// wrong operand, or at the scale instead of its inverse, changes the result.
constexpr float kScales[kFp8NumOperands] = {2.5f, 40.0f, 700.0f};  // input, weight, grad_output
constexpr double kTolerance = 2e-5;
// Operands in fresh device blocks (256-byte aligned), as the executor would
// place them from their pointers.
constexpr GemmOperandAlignment kAllocated{256, 256, 256, 256, 256};

Tensor random_tensor(const Shape& shape, std::mt19937& gen, float stddev) {
  std::normal_distribution<float> dist(0.0f, stddev);
  Tensor t = Tensor::empty(shape, DType::f32);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = dist(gen);
  return t;
}

// fp8(src * scale) through the host op, with its transposed copy.
Fp8Tensor cast(const Tensor& src, DType format, float scale) {
  const std::int64_t cols = src.dim(-1), rows = src.numel() / cols;
  Fp8Tensor q{Tensor::empty(src.shape(), format), from_floats({1}, {scale}), from_floats({1}, {0.0f}), Tensor(),
              Tensor::empty({cols, rows}, format)};
  ops::cast_to_fp8(host_context(), src, q);
  return q;
}

struct Layer {
  std::int64_t rows, in, out;
  Tensor x_src, w_src, dy_src, dw_initial, bias_f32, bias_bf16;
  Fp8Tensor x, w, dy;
  // Decoded operands by (bytes, element type): the 1B's weights are decoded
  // once, not once per mutation.
  mutable std::map<std::pair<const void*, GemmElement>, std::vector<float>> decoded;
  const Fp8Tensor& operand(int op) const { return op == kFp8Input ? x : op == kFp8Weight ? w : dy; }
};

Layer make_layer(std::int64_t rows, std::int64_t in, std::int64_t out, DType backward, std::mt19937& gen) {
  Layer l{rows, in, out, random_tensor({rows, in}, gen, 1.0f), random_tensor({out, in}, gen, 0.05f),
          random_tensor({rows, out}, gen, 0.01f), random_tensor({out, in}, gen, 1.0f), random_tensor({out}, gen, 1.0f),
          Tensor::empty({out}, DType::bf16), {}, {}, {}, {}};
  ops::cast(host_context(), l.bias_f32, l.bias_bf16);
  l.x = cast(l.x_src, DType::fp8_e4m3, kScales[kFp8Input]);
  l.w = cast(l.w_src, DType::fp8_e4m3, kScales[kFp8Weight]);
  l.dy = cast(l.dy_src, backward, kScales[kFp8GradOutput]);
  return l;
}

// The bytes behind a plan operand and how many there are.
const Tensor* operand_bytes(const Layer& l, LinearOperand o) {
  switch (o) {
    case LinearOperand::x: return &l.x.data;
    case LinearOperand::w: return &l.w.data;
    case LinearOperand::dy: return &l.dy.data;
    case LinearOperand::x_t: return &l.x.data_t;
    case LinearOperand::w_t: return &l.w.data_t;
    case LinearOperand::dy_t: return &l.dy.data_t;
    default: return nullptr;
  }
}

// The bytes decoded as the plan says they are (cuBLASLt reads them so).
std::vector<float> decode(const Tensor& bytes, GemmElement as) {
  std::vector<float> v(static_cast<std::size_t>(bytes.numel()));
  const auto* b = static_cast<const std::uint8_t*>(bytes.data());
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = as == GemmElement::fp8_e4m3 ? to_float(fp8_e4m3{b[i]}) : to_float(fp8_e5m2{b[i]});
  return v;
}

std::int64_t extent(std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  return rows == 0 || cols == 0 ? 0 : (cols - 1) * ld + rows;
}

float scale_value(const Layer& l, const Fp8ScalePointer& s) {
  const Fp8Tensor& t = l.operand(s.operand);
  return s.inverse ? t.scale_inv.data_as<float>()[0] : t.scale.data_as<float>()[0];
}

// Runs an FP8 plan as cuBLASLt would; empty (with `why`) when it could not be.
std::vector<float> replay(const Fp8GemmPlan& f, const Layer& l, const Tensor* bias, std::string& why) {
  why = fp8_gemm_plan_problem(f);
  if (!why.empty()) return {};
  const GemmPlan& p = f.gemm;
  const Tensor* a_bytes = operand_bytes(l, p.a);
  const Tensor* b_bytes = operand_bytes(l, p.b);
  if (a_bytes == nullptr || b_bytes == nullptr) {
    why = "an output tensor as an input operand";
    return {};
  }
  std::int64_t c_size = 0;
  std::vector<float> c;
  switch (p.c) {
    case LinearOperand::y: c_size = l.rows * l.out; break;
    case LinearOperand::dx: c_size = l.rows * l.in; break;
    case LinearOperand::dw:
      c_size = l.out * l.in;
      c.assign(l.dw_initial.data_as<float>(), l.dw_initial.data_as<float>() + c_size);
      break;
    default: why = "an input tensor as the output"; return {};
  }
  if (c.empty()) c.assign(static_cast<std::size_t>(c_size), 7.0f);  // device garbage: beta 0 must ignore it
  const std::int64_t a_rows = stored_rows(p.transa, p.m, p.k), a_cols = p.transa == Transpose::none ? p.k : p.m;
  const std::int64_t b_rows = stored_rows(p.transb, p.k, p.n), b_cols = p.transb == Transpose::none ? p.n : p.k;
  if (extent(a_rows, a_cols, p.lda) > a_bytes->numel() || extent(b_rows, b_cols, p.ldb) > b_bytes->numel() ||
      extent(p.m, p.n, p.ldc) > c_size) {
    why = "the plan reaches outside its tensors";
    return {};
  }
  auto decoded = [&](const Tensor& bytes, GemmElement as) -> const std::vector<float>& {
    auto& slot = l.decoded[{bytes.data(), as}];
    if (slot.empty()) slot = decode(bytes, as);
    return slot;
  };
  const std::vector<float>& a = decoded(*a_bytes, p.a_type);
  const std::vector<float>& b = decoded(*b_bytes, p.b_type);
  std::vector<float> acc(c.size(), 0.0f);
  cblas_sgemm(CblasColMajor, p.transa == Transpose::none ? CblasNoTrans : CblasTrans,
              p.transb == Transpose::none ? CblasNoTrans : CblasTrans, static_cast<int>(p.m), static_cast<int>(p.n),
              static_cast<int>(p.k), 1.0f, a.data(), static_cast<int>(p.lda), b.data(), static_cast<int>(p.ldb), 0.0f,
              acc.data(), static_cast<int>(p.ldc));
  // cuBLASLt: D = alpha * scale_A * scale_B * (A B) + beta C, then the epilogue.
  const float factor = p.alpha * scale_value(l, f.a_scale) * scale_value(l, f.b_scale);
  const std::vector<float> bias_values = bias != nullptr ? to_float_vector(*bias) : std::vector<float>{};
  if (f.bias != Fp8BiasStep::none && bias == nullptr) {
    why = "a bias step without a bias";
    return {};
  }
  for (std::int64_t j = 0; j < p.n; ++j)
    for (std::int64_t i = 0; i < p.m; ++i) {
      const auto at = static_cast<std::size_t>(j * p.ldc + i);
      float v = acc[at] * factor;
      if (p.beta != 0.0f) v += p.beta * c[at];
      if (f.bias != Fp8BiasStep::none) v += bias_values[static_cast<std::size_t>(i)];
      c[at] = p.c_type == GemmElement::bf16 ? round_to_bf16(v) : v;
    }
  return c;
}

double difference(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double scale = 1e-30, worst = 0.0;
  for (float v : want) scale = std::max(scale, static_cast<double>(std::fabs(v)));
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]) / scale;
    if (!(d <= worst)) worst = std::isnan(d) ? INFINITY : d;
  }
  return worst;
}

struct Reference {
  std::vector<float> y, dx, dw;
};

Reference host_fp8_linear(const Layer& l, const Tensor* bias, DType output, bool backward = true) {
  Tensor y = Tensor::empty({l.rows, l.out}, output);
  ops::fp8_linear_forward(host_context(), l.x, l.w, bias, y);
  if (!backward) return {to_float_vector(y), {}, {}};
  Tensor dx = Tensor::empty({l.rows, l.in}, output), dw = l.dw_initial.clone();
  ops::fp8_linear_backward(host_context(), l.x, l.w, l.dy, l.dy_src, &dx, dw, nullptr);
  return {to_float_vector(y), to_float_vector(dx), to_float_vector(dw)};
}

LinearOperand transposed_twin(LinearOperand o) {
  switch (o) {
    case LinearOperand::x: return LinearOperand::x_t;
    case LinearOperand::w: return LinearOperand::w_t;
    case LinearOperand::dy: return LinearOperand::dy_t;
    case LinearOperand::x_t: return LinearOperand::x;
    case LinearOperand::w_t: return LinearOperand::w;
    case LinearOperand::dy_t: return LinearOperand::dy;
    default: return o;
  }
}

std::vector<std::pair<std::string, Fp8GemmPlan>> mutations(const Fp8GemmPlan& f) {
  std::vector<std::pair<std::string, Fp8GemmPlan>> out;
  auto add = [&](std::string name, auto change) {
    Fp8GemmPlan q = f;
    change(q);
    out.emplace_back(std::move(name), q);
  };
  auto flip = [](Transpose t) { return t == Transpose::none ? Transpose::transpose : Transpose::none; };
  auto other_format = [](GemmElement e) {
    return e == GemmElement::fp8_e4m3 ? GemmElement::fp8_e5m2 : GemmElement::fp8_e4m3;
  };
  add("transa flipped", [&](Fp8GemmPlan& q) { q.gemm.transa = flip(q.gemm.transa); });
  add("transb flipped", [&](Fp8GemmPlan& q) { q.gemm.transb = flip(q.gemm.transb); });
  add("A <-> B", [](Fp8GemmPlan& q) { std::swap(q.gemm.a, q.gemm.b); });
  add("A untransposed/transposed copy", [](Fp8GemmPlan& q) { q.gemm.a = transposed_twin(q.gemm.a); });
  add("B untransposed/transposed copy", [](Fp8GemmPlan& q) { q.gemm.b = transposed_twin(q.gemm.b); });
  add("lda + 16", [](Fp8GemmPlan& q) { q.gemm.lda += 16; });
  add("ldb + 16", [](Fp8GemmPlan& q) { q.gemm.ldb += 16; });
  add("m <-> n", [](Fp8GemmPlan& q) { std::swap(q.gemm.m, q.gemm.n); });
  add("beta flipped", [](Fp8GemmPlan& q) { q.gemm.beta = q.gemm.beta == 0.0f ? 1.0f : 0.0f; });
  add("alignments not placed", [](Fp8GemmPlan& q) { q.gemm.alignment = {}; });
  add("A aligned to 8 bytes", [](Fp8GemmPlan& q) { q.gemm.alignment.a = 8; });
  add("D aligned to 4 bytes", [](Fp8GemmPlan& q) { q.gemm.alignment.d = 4; });
  add("A format flipped", [&](Fp8GemmPlan& q) { q.gemm.a_type = other_format(q.gemm.a_type); });
  add("B format flipped", [&](Fp8GemmPlan& q) { q.gemm.b_type = other_format(q.gemm.b_type); });
  add("A scale is scale, not scale_inv", [](Fp8GemmPlan& q) { q.a_scale.inverse = false; });
  add("B scale is scale, not scale_inv", [](Fp8GemmPlan& q) { q.b_scale.inverse = false; });
  for (int shift : {1, 2}) {
    add("A scale pointer at operand +" + std::to_string(shift),
        [shift](Fp8GemmPlan& q) { q.a_scale.operand = (q.a_scale.operand + shift) % kFp8NumOperands; });
    add("B scale pointer at operand +" + std::to_string(shift),
        [shift](Fp8GemmPlan& q) { q.b_scale.operand = (q.b_scale.operand + shift) % kFp8NumOperands; });
  }
  return out;
}

// Scale pointer mutations that leave the product scale_A * scale_B as it was
// (A's pointer moved onto B's operand and B's onto A's) cannot change D and
// are no mistake; everything else must be caught.
bool harmless(const Fp8GemmPlan& good, const Fp8GemmPlan& bad) {
  return bad.a_scale.inverse == good.a_scale.inverse && bad.b_scale.inverse == good.b_scale.inverse &&
         ((bad.a_scale.operand == good.a_scale.operand && bad.b_scale.operand == good.b_scale.operand) ||
          (bad.a_scale.operand == good.b_scale.operand && bad.b_scale.operand == good.a_scale.operand)) &&
         bad.gemm.a == good.gemm.a && bad.gemm.b == good.gemm.b && bad.gemm.lda == good.gemm.lda &&
         bad.gemm.ldb == good.gemm.ldb && bad.gemm.m == good.gemm.m && bad.gemm.beta == good.gemm.beta &&
         bad.gemm.a_type == good.gemm.a_type && bad.gemm.b_type == good.gemm.b_type &&
         bad.gemm.transa == good.gemm.transa && bad.gemm.transb == good.gemm.transb;
}

void check_model(const ftrain::testing::PresetShapes& shapes, std::int64_t rows, DType backward, bool mutate) {
  ASSERT_FALSE(shapes.linears.empty()) << shapes.model << " declared no linear layer";
  std::mt19937 gen(77);
  const GemmElement backward_format = backward == DType::fp8_e4m3 ? GemmElement::fp8_e4m3 : GemmElement::fp8_e5m2;
  for (const auto& s : shapes.linears) {
    SCOPED_TRACE(shapes.model + ": " + s.example + " [" + std::to_string(s.out) + ", " + std::to_string(s.in) +
                 "], dy " + std::string(dtype_name(backward)));
    const Layer l = make_layer(rows, s.in, s.out, backward, gen);
    // Without a bias, with a bf16 bias (epilogue) and an f32 one (added after).
    for (const Tensor* bias : {static_cast<const Tensor*>(nullptr), &l.bias_bf16, &l.bias_f32}) {
      // The backward does not see the bias: its reference once.
      const Reference ref = host_fp8_linear(l, bias, DType::f32, /*backward=*/bias == nullptr);
      Fp8LinearShape shape{rows, s.in, s.out, GemmElement::fp8_e4m3, backward_format, GemmElement::f32,
                           bias != nullptr, bias == &l.bias_f32 ? GemmElement::f32 : GemmElement::bf16};
      const std::pair<LinearPass, const std::vector<float>*> passes[] = {
          {LinearPass::forward, &ref.y}, {LinearPass::dgrad, &ref.dx}, {LinearPass::wgrad, &ref.dw}};
      for (const auto& [pass, want] : passes) {
        if (bias != nullptr && pass != LinearPass::forward) continue;
        const Fp8GemmPlan plan = placed(plan_fp8_linear(pass, shape), kAllocated);
        std::string why;
        const std::vector<float> got = replay(plan, l, bias, why);
        ASSERT_TRUE(why.empty()) << pass_name(pass) << " FP8 plan not executable: " << why;
        EXPECT_LT(difference(got, *want), kTolerance) << pass_name(pass) << " FP8 plan disagrees with the host op";
        if (!mutate || bias != nullptr) continue;
        for (const auto& [name, wrong] : mutations(plan)) {
          if (harmless(plan, wrong)) continue;
          const std::vector<float> bad = replay(wrong, l, bias, why);
          EXPECT_TRUE(!why.empty() || difference(bad, *want) > kTolerance)
              << pass_name(pass) << " FP8 plan with " << name << " still matched: the replay cannot catch it";
        }
      }
    }
  }
}

}  // namespace

TEST(CublasLtFp8Plan, TinyLlamaPlansReplayLikeTheHostFp8LinearHybrid) {
  check_model(ftrain::testing::preset_shapes(FTRAIN_TEST_LLAMA_PLUGIN_DIR, "llama", "tiny"), 48, DType::fp8_e5m2,
              /*mutate=*/true);
}

TEST(CublasLtFp8Plan, TinyLlamaPlansReplayLikeTheHostFp8LinearAllE4m3) {
  check_model(ftrain::testing::preset_shapes(FTRAIN_TEST_LLAMA_PLUGIN_DIR, "llama", "tiny"), 48, DType::fp8_e4m3,
              /*mutate=*/true);
}

TEST(CublasLtFp8Plan, Llama32_1bPlansReplayLikeTheHostFp8Linear) {
  // 16 rows keep the 1B's four distinct shapes (up to 8192 x 2048) to
  // seconds; the mutations (the same plan function) run on the tiny model.
  check_model(ftrain::testing::preset_shapes(FTRAIN_TEST_LLAMA_PLUGIN_DIR, "llama", "llama3.2-1b"), 16,
              DType::fp8_e5m2, /*mutate=*/false);
}

TEST(CublasLtFp8Plan, LayoutFormatsScalesAndFastAccumAreAsCublasLtWants) {
  const Fp8LinearShape s{32, 64, 48};
  for (LinearPass pass : {LinearPass::forward, LinearPass::dgrad, LinearPass::wgrad}) {
    const Fp8GemmPlan f = placed(plan_fp8_linear(pass, s), kAllocated);
    SCOPED_TRACE(pass_name(pass));
    EXPECT_EQ(f.gemm.transa, Transpose::transpose) << "TN";
    EXPECT_EQ(f.gemm.transb, Transpose::none) << "TN";
    EXPECT_EQ(f.fast_accum, pass == LinearPass::forward) << "fast accumulation in the forward only";
    EXPECT_TRUE(f.a_scale.inverse && f.b_scale.inverse) << "scale pointers take the dequantisation factors";
    EXPECT_EQ(f.gemm.a_type, GemmElement::fp8_e4m3) << "x and w are E4M3";
    EXPECT_EQ(f.gemm.b_type, pass == LinearPass::forward ? GemmElement::fp8_e4m3 : GemmElement::fp8_e5m2)
        << "dy is E5M2 in hybrid";
    EXPECT_TRUE(fp8_gemm_plan_problem(f).empty()) << fp8_gemm_plan_problem(f);
  }
  EXPECT_EQ(plan_fp8_linear(LinearPass::dgrad, s).gemm.a, LinearOperand::w_t);
  EXPECT_EQ(plan_fp8_linear(LinearPass::wgrad, s).gemm.a, LinearOperand::x_t);
  EXPECT_EQ(plan_fp8_linear(LinearPass::wgrad, s).gemm.b, LinearOperand::dy_t);
  EXPECT_EQ(plan_fp8_linear(LinearPass::wgrad, s).gemm.beta, 1.0f) << "dw accumulates";
  Fp8LinearShape biased = s;
  biased.bias = true;
  biased.output = GemmElement::bf16;
  EXPECT_EQ(plan_fp8_linear(LinearPass::forward, biased).bias, Fp8BiasStep::epilogue);
  EXPECT_EQ(plan_fp8_linear(LinearPass::forward, biased).gemm.c_type, GemmElement::bf16);
  biased.bias_type = GemmElement::f32;
  EXPECT_EQ(plan_fp8_linear(LinearPass::forward, biased).bias, Fp8BiasStep::add_after);
  EXPECT_EQ(plan_fp8_linear(LinearPass::forward, biased).gemm.c_type, GemmElement::f32)
      << "an f32 bias is added to an f32 D, rounded to y's dtype once";
  auto refused = [](Fp8LinearShape bad, const char* needle) {
    try {
      plan_fp8_linear(LinearPass::wgrad, bad);
      return std::string("planned");
    } catch (const Error& e) {
      return std::string(e.what()).find(needle) != std::string::npos ? std::string() : std::string(e.what());
    }
  };
  EXPECT_EQ(refused({24, 64, 48}, "rows (batch x sequence) = 24 is not a multiple of 16"), "");
  EXPECT_EQ(refused({32, 60, 48}, "in = 60"), "");
  EXPECT_EQ(refused({32, 64, 48, GemmElement::fp8_e5m2}, "E5M2 x E5M2"), "");
  try {
    plan_linear(LinearPass::forward, {5, 7, 3, GemmElement::fp8_e4m3, GemmElement::fp8_e4m3, GemmElement::f32, false});
    ADD_FAILURE() << "plan_linear took FP8 operands";
  } catch (const Error&) {
  }
}

TEST(CublasLtFp8Plan, Bf16OutputRoundsOnceLikeTheHost) {
  std::mt19937 gen(9);
  const Layer l = make_layer(32, 64, 48, DType::fp8_e5m2, gen);
  for (const Tensor* bias : {static_cast<const Tensor*>(nullptr), &l.bias_bf16, &l.bias_f32}) {
    const Reference ref = host_fp8_linear(l, bias, DType::bf16);
    Fp8LinearShape shape{32, 64, 48, GemmElement::fp8_e4m3, GemmElement::fp8_e5m2, GemmElement::bf16, bias != nullptr,
                         bias == &l.bias_f32 ? GemmElement::f32 : GemmElement::bf16};
    std::string why;
    std::vector<float> got = replay(placed(plan_fp8_linear(LinearPass::forward, shape), kAllocated), l, bias, why);
    ASSERT_TRUE(why.empty()) << why;
    for (float& v : got) v = round_to_bf16(v);  // add_after: the f32 D stored into bf16 y
    // One bf16 rounding on both sides of f32 values a few ulps apart: at
    // most one bf16 ulp (2^-8 relative) where they straddle a rounding edge.
    EXPECT_LT(difference(got, ref.y), 8e-3);
    std::vector<float> dx = replay(placed(plan_fp8_linear(LinearPass::dgrad, shape), kAllocated), l, nullptr, why);
    EXPECT_LT(difference(dx, ref.dx), 8e-3);
  }
}

// cuBLASLt's FP8 rules as the plan check states them: each case a plan
// that is right but for one thing cuBLASLt's documentation refuses.
TEST(CublasLtFp8Plan, PlanCheckRefusesWhatCublasLtRefuses) {
  Fp8LinearShape biased{32, 64, 48};
  biased.bias = true;
  biased.output = GemmElement::bf16;
  const Fp8GemmPlan good = placed(plan_fp8_linear(LinearPass::forward, biased), kAllocated);
  ASSERT_EQ(fp8_gemm_plan_problem(good), "");
  EXPECT_EQ(good.gemm.bias_type, GemmElement::bf16) << "the plan carries the bias dtype";
  EXPECT_EQ(good.gemm.output_type, GemmElement::bf16) << "the plan carries the output dtype";
  auto refused = [&](auto change, const std::string& reason) -> ::testing::AssertionResult {
    Fp8GemmPlan bad = good;
    change(bad);
    const std::string problem = fp8_gemm_plan_problem(bad);
    if (problem.find(reason) != std::string::npos) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << (problem.empty() ? "accepted" : "refused as \"" + problem + "\"")
                                         << ", expected a refusal naming \"" << reason << "\"";
  };
  EXPECT_TRUE(refused([](Fp8GemmPlan& q) { q.gemm.transa = Transpose::none; }, "FP8 GEMMs need the TN layout"));
  EXPECT_TRUE(refused([](Fp8GemmPlan& q) { q.gemm.transb = Transpose::transpose; }, "FP8 GEMMs need the TN layout"));
  EXPECT_TRUE(refused([](Fp8GemmPlan& q) { q.gemm.alignment = {}; }, "A alignment not set"));
  EXPECT_TRUE(refused([](Fp8GemmPlan& q) { q.gemm.alignment.b = 8; }, "FP8 B aligned to 8 bytes, not 16"));
  EXPECT_TRUE(refused([](Fp8GemmPlan& q) { q.gemm.alignment.c = 2; }, "FP8 C aligned to 2 bytes, not 16"));
  EXPECT_TRUE(refused([](Fp8GemmPlan& q) { q.gemm.bias_type = GemmElement::f32; }, "bias epilogue without a bf16 bias"));
  EXPECT_TRUE(refused([](Fp8GemmPlan& q) { q.gemm.alignment.bias = 4; }, "bias alignment 4 bytes"));
}

// The recipe keeps a linear layer's three scale_inv values in one f32[3]
// (fp8/recipe.hpp): the weight's and the gradient's sit 4 and 8 bytes into
// it, where cuBLASLt refuses an FP8 GEMM (seen on an H100), so those two are
// staged into aligned slots; 16 bytes and more are passed as they are.
TEST(CublasLtFp8Plan, ScalesInsideThePackedScaleInvAreStaged) {
  alignas(256) static float packed[64] = {};
  EXPECT_FALSE(fp8_scale_needs_staging(&packed[0]));  // the input's, at the allocation's start
  EXPECT_TRUE(fp8_scale_needs_staging(&packed[1]));   // the weight's
  EXPECT_TRUE(fp8_scale_needs_staging(&packed[2]));   // the gradient's
  EXPECT_TRUE(fp8_scale_needs_staging(&packed[3]));
  for (int at : {4, 8, 16, 32, 64 - 4}) EXPECT_FALSE(fp8_scale_needs_staging(&packed[at])) << at * 4 << " bytes";
  EXPECT_EQ(kFp8ScalePointerAlignment % sizeof(float), 0u);
}
