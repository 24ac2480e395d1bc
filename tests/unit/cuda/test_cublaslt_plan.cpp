// cuBLASLt plans (kernels/cuda/cublaslt_plan.hpp) replayed on the host: every
// plan the tiny Llama, Llama 3.2 1B and tiny ViT linear layers produce
// (forward with and without the bias epilogue, dgrad, wgrad) is executed by
// OpenBLAS's column-major cblas_sgemm with exactly the plan's transposes,
// m/n/k, leading dimensions, alpha/beta and operand assignment, and compared
// with the host linear op. The same replay of a plan with one field swapped
// (a transpose, a leading dimension, the operands) must fail: the test can.
//
// The library rules the plan carries as data (cublaslt_plan.hpp): the bias
// and output dtypes (outside FP8 the bias epilogue reads D's dtype, so a
// bias of another dtype is converted first or added after the GEMM, and the
// replay with those dtypes must still equal the host linear on bf16/f32
// tensors), the operand alignments (placed, or the plan is refused; part of
// the algorithm key; a cached algorithm is never reused at a weaker one) and
// the choice of the first usable heuristic result.
#include <cblas.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "base/error.hpp"
#include "core/tensor.hpp"
#include "fsdp/flat_parameter.hpp"
#include "kernels/cuda/cublaslt_plan.hpp"
#include "kernels/ops.hpp"
#include "plugin/loader.hpp"
#include "runtime/execution_context.hpp"
#include "unit/cuda/preset_shapes.hpp"

using namespace ftrain;
using namespace ftrain::cuda;

namespace {

constexpr std::int64_t kRows = 3;  // odd on purpose: a swapped m/n or ld shows
// Operands in fresh device blocks (256-byte aligned), as the executor would
// place them from their pointers.
constexpr GemmOperandAlignment kAllocated{256, 256, 256, 256, 256};

struct LinearBuffers {
  std::int64_t rows, in, out;
  std::vector<float> x, w, b, dy, dw_initial;
};

std::vector<float> random_vector(std::int64_t n, std::mt19937& gen) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& e : v) e = dist(gen);
  return v;
}

Tensor tensor_of(const std::vector<float>& v, const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::f32);
  std::copy(v.begin(), v.end(), t.data_as<float>());
  return t;
}

std::vector<float> values(const Tensor& t) { return {t.data_as<float>(), t.data_as<float>() + t.numel()}; }

const std::vector<float>* operand(const LinearBuffers& l, LinearOperand o) {
  switch (o) {
    case LinearOperand::x: return &l.x;
    case LinearOperand::w: return &l.w;
    case LinearOperand::dy: return &l.dy;
    default: return nullptr;
  }
}

// Elements a column-major rows x cols operand with leading dimension ld reads.
std::int64_t extent(std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  return rows == 0 || cols == 0 ? 0 : (cols - 1) * ld + rows;
}

// Runs `plan` through cblas_sgemm; empty result (with `why`) when the plan
// could not be executed as given (inconsistent, or it would read/write
// outside the buffers: cuBLASLt would then compute garbage).
std::vector<float> replay(const GemmPlan& p, const LinearBuffers& l, std::string& why) {
  why = gemm_plan_problem(p);
  if (!why.empty()) return {};
  const std::vector<float>* a = operand(l, p.a);
  const std::vector<float>* b = operand(l, p.b);
  if (a == nullptr || b == nullptr) {
    why = "an output tensor as an input operand";
    return {};
  }
  std::vector<float> c;
  std::int64_t c_size = 0;
  switch (p.c) {
    case LinearOperand::y: c_size = l.rows * l.out; break;
    case LinearOperand::dx: c_size = l.rows * l.in; break;
    case LinearOperand::dw:
      c_size = l.out * l.in;
      c = l.dw_initial;  // beta = 1 accumulates into it
      break;
    default: why = "an input tensor as the output"; return {};
  }
  // y / dx start as garbage (device memory is not zeroed): beta = 0 must ignore it.
  if (c.empty()) c.assign(static_cast<std::size_t>(c_size), 7.0f);
  const std::int64_t a_rows = stored_rows(p.transa, p.m, p.k), a_cols = p.transa == Transpose::none ? p.k : p.m;
  const std::int64_t b_rows = stored_rows(p.transb, p.k, p.n), b_cols = p.transb == Transpose::none ? p.n : p.k;
  if (extent(a_rows, a_cols, p.lda) > static_cast<std::int64_t>(a->size()) ||
      extent(b_rows, b_cols, p.ldb) > static_cast<std::int64_t>(b->size()) || extent(p.m, p.n, p.ldc) > c_size) {
    why = "the plan reaches outside its tensors";
    return {};
  }
  cblas_sgemm(CblasColMajor, p.transa == Transpose::none ? CblasNoTrans : CblasTrans,
              p.transb == Transpose::none ? CblasNoTrans : CblasTrans, static_cast<int>(p.m), static_cast<int>(p.n),
              static_cast<int>(p.k), p.alpha, a->data(), static_cast<int>(p.lda), b->data(), static_cast<int>(p.ldb),
              p.beta, c.data(), static_cast<int>(p.ldc));
  if (p.epilogue == GemmEpilogue::bias)  // cuBLASLt's BIAS: one value per row m of D
    for (std::int64_t j = 0; j < p.n; ++j)
      for (std::int64_t i = 0; i < p.m; ++i) c[static_cast<std::size_t>(j * p.ldc + i)] += l.b[static_cast<std::size_t>(i)];
  return c;
}

// Largest |a - b| relative to the reference's scale; infinity when sizes differ.
double difference(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double scale = 1.0, worst = 0.0;
  for (float v : want) scale = std::max(scale, static_cast<double>(std::fabs(v)));
  for (std::size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]) / scale);
  return worst;
}

struct Reference {
  std::vector<float> y, dx, dw;
};

Reference host_linear(const LinearBuffers& l, bool bias) {
  Tensor x = tensor_of(l.x, {l.rows, l.in}), w = tensor_of(l.w, {l.out, l.in}), dy = tensor_of(l.dy, {l.rows, l.out});
  Tensor b = tensor_of(l.b, {l.out});
  Tensor y = Tensor::empty({l.rows, l.out}, DType::f32), dx = Tensor::empty({l.rows, l.in}, DType::f32);
  Tensor dw = tensor_of(l.dw_initial, {l.out, l.in}), db = Tensor::zeros({l.out}, DType::f32);
  ExecutionContext& ctx = host_context();
  ops::linear_forward(ctx, x, w, bias ? &b : nullptr, y);
  ops::linear_backward(ctx, x, w, dy, &dx, dw, bias ? &db : nullptr);
  return {values(y), values(dx), values(dw)};
}

constexpr double kTolerance = 1e-4;

bool same_plan(const GemmPlan& a, const GemmPlan& b) {
  return std::tie(a.transa, a.transb, a.m, a.n, a.k, a.a, a.b, a.c, a.lda, a.ldb, a.ldc, a.alpha, a.beta, a.epilogue,
                  a.alignment) ==
         std::tie(b.transa, b.transb, b.m, b.n, b.k, b.a, b.b, b.c, b.lda, b.ldb, b.ldc, b.alpha, b.beta, b.epilogue,
                  b.alignment);
}

// The mutations a plan must not survive (those that change it: on a square
// layer swapping two equal leading dimensions is no change).
std::vector<std::pair<std::string, GemmPlan>> mutations(const GemmPlan& p) {
  std::vector<std::pair<std::string, GemmPlan>> out;
  auto add = [&](std::string name, auto change) {
    GemmPlan q = p;
    change(q);
    if (!same_plan(p, q)) out.emplace_back(std::move(name), q);
  };
  auto flip = [](Transpose t) { return t == Transpose::none ? Transpose::transpose : Transpose::none; };
  add("transa flipped", [&](GemmPlan& q) { q.transa = flip(q.transa); });
  add("transb flipped", [&](GemmPlan& q) { q.transb = flip(q.transb); });
  add("lda <-> ldb", [](GemmPlan& q) { std::swap(q.lda, q.ldb); });
  add("lda + 1", [](GemmPlan& q) { q.lda += 1; });
  add("ldc <-> lda", [](GemmPlan& q) { std::swap(q.ldc, q.lda); });
  add("m <-> n", [](GemmPlan& q) { std::swap(q.m, q.n); });
  add("A <-> B", [](GemmPlan& q) { std::swap(q.a, q.b); });
  add("beta flipped", [](GemmPlan& q) { q.beta = q.beta == 0.0f ? 1.0f : 0.0f; });
  add("alignments not placed", [](GemmPlan& q) { q.alignment = {}; });
  add("f32 A aligned to 2 bytes", [](GemmPlan& q) { q.alignment.a = 2; });
  return out;
}

void check_model(const ftrain::testing::PresetShapes& shapes) {
  ASSERT_FALSE(shapes.linears.empty()) << shapes.model << " declared no linear layer";
  std::mt19937 gen(1234);
  for (const auto& s : shapes.linears) {
    SCOPED_TRACE(shapes.model + ": " + s.example + " [" + std::to_string(s.out) + ", " + std::to_string(s.in) + "]");
    LinearBuffers l{kRows, s.in, s.out, random_vector(kRows * s.in, gen), random_vector(s.out * s.in, gen),
                    random_vector(s.out, gen), random_vector(kRows * s.out, gen), random_vector(s.out * s.in, gen)};
    // Each layer with its own bias setting, and the forward also the other way.
    for (bool bias : {s.bias, !s.bias}) {
      const Reference ref = host_linear(l, bias);
      const LinearShape shape{kRows, s.in, s.out, GemmElement::f32, GemmElement::f32, GemmElement::f32, bias};
      const std::pair<LinearPass, const std::vector<float>*> passes[] = {
          {LinearPass::forward, &ref.y}, {LinearPass::dgrad, &ref.dx}, {LinearPass::wgrad, &ref.dw}};
      for (const auto& [pass, want] : passes) {
        if (bias != s.bias && pass != LinearPass::forward) continue;
        const GemmPlan plan = placed(plan_linear(pass, shape), kAllocated);
        std::string why;
        const std::vector<float> got = replay(plan, l, why);
        ASSERT_TRUE(why.empty()) << pass_name(pass) << " plan not executable: " << why;
        EXPECT_LT(difference(got, *want), kTolerance) << pass_name(pass) << " plan disagrees with the host linear";
        for (const auto& [name, wrong] : mutations(plan)) {
          const std::vector<float> bad = replay(wrong, l, why);
          EXPECT_TRUE(!why.empty() || difference(bad, *want) > kTolerance)
              << pass_name(pass) << " plan with " << name << " still matched: the replay cannot catch it";
        }
      }
    }
  }
}

}  // namespace

TEST(CublasLtPlan, TinyLlamaPlansReplayLikeTheHostLinear) {
  check_model(ftrain::testing::preset_shapes(FTRAIN_TEST_LLAMA_PLUGIN_DIR, "llama", "tiny"));
}

TEST(CublasLtPlan, Llama32_1bPlansReplayLikeTheHostLinear) {
  check_model(ftrain::testing::preset_shapes(FTRAIN_TEST_LLAMA_PLUGIN_DIR, "llama", "llama3.2-1b"));
}

TEST(CublasLtPlan, TinyVitPlansWithBiasReplayLikeTheHostLinear) {
  const auto shapes = ftrain::testing::preset_shapes(FTRAIN_TEST_VIT_PLUGIN_DIR, "vit", "tiny");
  bool any_bias = false;
  for (const auto& s : shapes.linears) any_bias = any_bias || s.bias;
  EXPECT_TRUE(any_bias) << "the ViT's linears carry biases: the bias epilogue must be exercised";
  check_model(shapes);
}

TEST(CublasLtPlan, ForwardIsTheTnFormAndMixedDtypesAreRefused) {
  const GemmPlan f = plan_linear(LinearPass::forward, {5, 7, 3, GemmElement::bf16, GemmElement::bf16, GemmElement::f32, true});
  EXPECT_EQ(f.transa, Transpose::transpose);
  EXPECT_EQ(f.transb, Transpose::none);
  EXPECT_EQ(f.a_type, GemmElement::bf16);
  EXPECT_EQ(f.c_type, GemmElement::f32);
  EXPECT_EQ(f.epilogue, GemmEpilogue::bias);
  EXPECT_EQ(f.bias_step, GemmBiasStep::epilogue) << "an f32 bias for an f32 y: the epilogue reads it as stored";
  EXPECT_EQ(plan_linear(LinearPass::wgrad, {5, 7, 3}).beta, 1.0f) << "dw accumulates";
  EXPECT_EQ(plan_linear(LinearPass::dgrad, {5, 7, 3}).beta, 0.0f) << "dx is written";
  try {
    plan_linear(LinearPass::forward, {5, 7, 3, GemmElement::bf16, GemmElement::f32, GemmElement::f32, false});
    ADD_FAILURE() << "a bf16 activation with an f32 weight was planned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("one dtype"), std::string::npos) << e.what();
  }
}

namespace {

// One forward with a bias, replayed with dtypes as cuBLASLt and the bias
// step would run it: A and B as their stored values, f32 accumulation, the
// bias as the epilogue reads it (its stored values converted to bias_type
// first under epilogue_of_converted), D stored in c_type, and under
// add_after an f32 D plus the bias rounded once to the output dtype.
// Empty (with `why`) when the plan is refused.
std::vector<float> replay_with_dtypes(const GemmPlan& p, const std::vector<float>& x, const std::vector<float>& w,
                                      const std::vector<float>& bias_stored, std::string& why) {
  why = gemm_plan_problem(p);
  if (!why.empty()) return {};
  if (p.pass != LinearPass::forward || p.a != LinearOperand::w || p.b != LinearOperand::x) {
    why = "not the forward's operands";
    return {};
  }
  std::vector<float> d(static_cast<std::size_t>(p.ldc * p.n), 7.0f);
  cblas_sgemm(CblasColMajor, p.transa == Transpose::none ? CblasNoTrans : CblasTrans,
              p.transb == Transpose::none ? CblasNoTrans : CblasTrans, static_cast<int>(p.m), static_cast<int>(p.n),
              static_cast<int>(p.k), p.alpha, w.data(), static_cast<int>(p.lda), x.data(), static_cast<int>(p.ldb),
              p.beta, d.data(), static_cast<int>(p.ldc));
  auto as = [](GemmElement e, float v) { return e == GemmElement::bf16 ? round_to_bf16(v) : v; };
  std::vector<float> bias(bias_stored.size());
  for (std::size_t i = 0; i < bias.size(); ++i) bias[i] = as(p.bias_type, bias_stored[i]);  // exact or a copy
  for (std::int64_t j = 0; j < p.n; ++j)
    for (std::int64_t i = 0; i < p.m; ++i) {
      float& v = d[static_cast<std::size_t>(j * p.ldc + i)];
      if (p.epilogue == GemmEpilogue::bias) v += bias[static_cast<std::size_t>(i)];
      v = as(p.c_type, v);
      if (p.bias_step == GemmBiasStep::add_after) v = as(p.output_type, v + bias[static_cast<std::size_t>(i)]);
    }
  return d;
}

GemmElement element_of(DType d) { return d == DType::bf16 ? GemmElement::bf16 : GemmElement::f32; }

}  // namespace

namespace ftrain::cuda {
// Keys in failure messages by their alignments (what these tests vary).
void PrintTo(const GemmAlgorithmKey& k, std::ostream* os) {
  *os << "key m=" << k.m << " n=" << k.n << " k=" << k.k << " alignments A/B/C/D/bias " << k.alignment.a << "/"
      << k.alignment.b << "/" << k.alignment.c << "/" << k.alignment.d << "/" << k.alignment.bias;
}
}  // namespace ftrain::cuda

// Fault 2 of issue 33: the ViT patch embedding (bf16 x and w, bf16 bias, f32
// y) and the GPU parity case "linear bf16 (5 x 33 -> 17)" handed cuBLASLt a
// bf16 bias epilogue into an f32 D, which it refuses outside FP8. Every
// combination of bias and output dtype must plan into what cuBLASLt takes
// and replay like the host linear on tensors of those dtypes.
TEST(CublasLtPlan, BiasOfAnotherDtypeThanTheOutputIsConvertedOrAddedAfter) {
  std::mt19937 gen(33);
  const struct {
    std::int64_t rows, in, out;
  } shapes[] = {{5, 33, 17}, {3, 48, 32}};
  for (const auto& s : shapes)
    for (DType activation : {DType::bf16, DType::f32})
      for (DType bias_dtype : {DType::bf16, DType::f32})
        for (DType output : {DType::f32, DType::bf16}) {
          SCOPED_TRACE(std::to_string(s.rows) + " x " + std::to_string(s.in) + " -> " + std::to_string(s.out) +
                       ", x/w " + std::string(dtype_name(activation)) + ", bias " +
                       std::string(dtype_name(bias_dtype)) + ", y " + std::string(dtype_name(output)));
          Tensor x = from_floats({s.rows, s.in}, random_vector(s.rows * s.in, gen), activation);
          Tensor w = from_floats({s.out, s.in}, random_vector(s.out * s.in, gen), activation);
          Tensor b = from_floats({s.out}, random_vector(s.out, gen), bias_dtype);
          Tensor y = Tensor::empty({s.rows, s.out}, output);
          ops::linear_forward(host_context(), x, w, &b, y);
          LinearShape shape{s.rows, s.in, s.out, element_of(activation), element_of(activation), element_of(output),
                            true};
          shape.bias_type = element_of(bias_dtype);
          const GemmPlan plan = placed(plan_linear(LinearPass::forward, shape), kAllocated);
          EXPECT_EQ(plan.bias_stored, element_of(bias_dtype)) << "the plan carries the bias tensor's dtype";
          EXPECT_EQ(plan.output_type, element_of(output)) << "the plan carries the output dtype";
          const GemmBiasStep expected = bias_dtype == output      ? GemmBiasStep::epilogue
                                        : output == DType::f32 ? GemmBiasStep::epilogue_of_converted
                                                               : GemmBiasStep::add_after;
          EXPECT_EQ(bias_step_name(plan.bias_step), std::string(bias_step_name(expected)));
          std::string why;
          const std::vector<float> got = replay_with_dtypes(plan, to_float_vector(x), to_float_vector(w),
                                                            to_float_vector(b), why);
          ASSERT_EQ(why, "") << "the plan cuBLASLt would be given is refused";
          // bf16 y: both sides round f32 sums a few ulps apart once, at most
          // one bf16 ulp (2^-8 relative) apart where they straddle an edge.
          EXPECT_LT(difference(got, to_float_vector(y)), output == DType::bf16 ? 8e-3 : kTolerance)
              << "the plan's bias step disagrees with the host linear";
        }
}

TEST(CublasLtPlan, MisalignedBiasIsCopiedToAlignedScratchBeforeTheEpilogue) {
  LinearShape shape{5, 33, 17, GemmElement::bf16, GemmElement::bf16, GemmElement::bf16, true};
  shape.bias_type = GemmElement::bf16;
  shape.bias_alignment = 2;  // a bf16 view at an odd element offset
  const GemmPlan plan = plan_linear(LinearPass::forward, shape);
  EXPECT_EQ(plan.bias_step, GemmBiasStep::epilogue_of_converted);
  EXPECT_EQ(plan.bias_type, GemmElement::bf16);
  // The executor places the scratch's (256-byte) alignment: taken. The view's own: refused.
  EXPECT_EQ(gemm_plan_problem(placed(plan, kAllocated)), "");
  GemmOperandAlignment at_view = kAllocated;
  at_view.bias = 2;
  EXPECT_NE(gemm_plan_problem(placed(plan, at_view)).find("bias alignment 2 bytes"), std::string::npos);
}

// What cuBLASLt's documentation refuses, each on an otherwise right plan.
TEST(CublasLtPlan, PlanCheckRefusesWhatCublasLtRefuses) {
  LinearShape vit_patch_embed{6, 48, 32, GemmElement::bf16, GemmElement::bf16, GemmElement::f32, true};
  vit_patch_embed.bias_type = GemmElement::bf16;
  const GemmPlan good = placed(plan_linear(LinearPass::forward, vit_patch_embed), kAllocated);
  ASSERT_EQ(gemm_plan_problem(good), "");
  // Refused, and for the reason named (a refusal for another reason would
  // hide the rule under test).
  auto refused = [&](auto change, const std::string& reason) -> ::testing::AssertionResult {
    GemmPlan bad = good;
    change(bad);
    const std::string problem = gemm_plan_problem(bad);
    if (problem.find(reason) != std::string::npos) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << (problem.empty() ? "accepted" : "refused as \"" + problem + "\"")
                                         << ", expected a refusal naming \"" << reason << "\"";
  };
  // The executor before issue 33: a bias epilogue reading the bf16 bias into the f32 D.
  EXPECT_TRUE(refused(
      [](GemmPlan& q) {
        q.bias_type = GemmElement::bf16;
        q.bias_step = GemmBiasStep::epilogue;
      },
      "bias bf16 with D f32: outside FP8 cuBLASLt's bias epilogue takes D's dtype"));
  // No MIN_ALIGNMENT preference could be set for an operand whose alignment is unknown.
  EXPECT_TRUE(refused([](GemmPlan& q) { q.alignment = {}; }, "A alignment not set"));
  EXPECT_TRUE(refused([](GemmPlan& q) { q.alignment.d = 0; }, "D alignment not set"));
  EXPECT_TRUE(refused([](GemmPlan& q) { q.alignment.bias = 0; }, "bias alignment not set"));
  EXPECT_TRUE(refused([](GemmPlan& q) { q.alignment.b = 12; }, "B alignment 12 is not a power of two"));
  EXPECT_TRUE(refused([](GemmPlan& q) { q.alignment.b = 512; }, "B alignment 512 is not a power of two <= 256"));
  EXPECT_TRUE(refused([](GemmPlan& q) { q.alignment.c = 2; }, "C alignment 2 bytes is below its f32 element"));
  EXPECT_TRUE(refused([](GemmPlan& q) { q.alignment.bias = 8; }, "bias alignment 8 bytes"));
  EXPECT_TRUE(refused([](GemmPlan& q) { q.bias_step = GemmBiasStep::none; }, "does not match the epilogue"));
  EXPECT_TRUE(refused([](GemmPlan& q) { q.output_type = GemmElement::bf16; }, "differs from D"));
  // Without a bias epilogue the bias pointer is not an operand.
  GemmPlan dgrad = placed(plan_linear(LinearPass::dgrad, {6, 48, 32}), kAllocated);
  dgrad.alignment.bias = 0;
  EXPECT_EQ(gemm_plan_problem(dgrad), "");
}

TEST(CublasLtPlan, AddressAlignmentIsTheLargestPowerOfTwoUpTo256) {
  EXPECT_EQ(address_alignment(std::uintptr_t{0x7f0000001000}), 256u);
  EXPECT_EQ(address_alignment(std::uintptr_t{0x7f0000001100}), 256u);
  EXPECT_EQ(address_alignment(std::uintptr_t{0x7f0000001080}), 128u);
  EXPECT_EQ(address_alignment(std::uintptr_t{0x7f0000001010}), 16u);
  EXPECT_EQ(address_alignment(std::uintptr_t{0x7f0000001002}), 2u);
  EXPECT_EQ(address_alignment(std::uintptr_t{0x7f0000001001}), 1u);
  EXPECT_EQ(address_alignment(nullptr), 256u);
  alignas(256) static const float block[8] = {};
  const GemmOperandAlignment a = operand_alignment(block, block + 1, block + 2, block + 4, block + 3);
  EXPECT_EQ(a, (GemmOperandAlignment{256, 4, 8, 16, 4}));
}

// Fault 9 of issue 33: the algorithm cache's key ignored alignment, so an
// algorithm the heuristic chose for 256-byte aligned operands was reused for
// a view at a 2-byte offset.
TEST(CublasLtPlan, AlgorithmKeyCarriesAlignmentsAndNoAlgorithmIsReusedAtAWeakerOne) {
  const GemmPlan plan = plan_linear(LinearPass::forward, {6, 48, 32, GemmElement::bf16, GemmElement::bf16,
                                                          GemmElement::bf16, false});
  const GemmPlan aligned = placed(plan, kAllocated);
  GemmOperandAlignment view = kAllocated;
  view.a = 2;  // the weight, a flat-parameter view at an odd bf16 offset
  const GemmPlan misaligned = placed(plan, view);
  ASSERT_EQ(gemm_plan_problem(misaligned), "") << "a 2-byte aligned bf16 operand is valid, with its preference";
  EXPECT_NE(gemm_algorithm_key(aligned), gemm_algorithm_key(misaligned));
  for (auto change : {+[](GemmOperandAlignment& a) { a.b = 4; }, +[](GemmOperandAlignment& a) { a.c = 8; },
                      +[](GemmOperandAlignment& a) { a.d = 16; }}) {
    GemmOperandAlignment other = kAllocated;
    change(other);
    EXPECT_NE(gemm_algorithm_key(aligned), gemm_algorithm_key(placed(plan, other)));
  }
  // Without a bias epilogue the (null) bias pointer does not split the cache.
  GemmOperandAlignment no_bias = kAllocated;
  no_bias.bias = 4;
  EXPECT_EQ(gemm_algorithm_key(aligned), gemm_algorithm_key(placed(plan, no_bias)));

  EXPECT_NE(algorithm_reuse_problem(aligned, misaligned).find("A aligned to 256 bytes reused at 2"),
            std::string::npos);
  EXPECT_EQ(algorithm_reuse_problem(misaligned, aligned), "") << "a stronger alignment may run it";

  GemmPlanCache<int> cache;
  cache.insert(gemm_algorithm_key(aligned), aligned, std::make_unique<int>(1));
  ASSERT_NE(cache.find(gemm_algorithm_key(aligned), aligned), nullptr);
  EXPECT_EQ(cache.find(gemm_algorithm_key(misaligned), misaligned), nullptr) << "the view needs its own algorithm";
  cache.insert(gemm_algorithm_key(misaligned), misaligned, std::make_unique<int>(2));
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(*cache.find(gemm_algorithm_key(misaligned), misaligned), 2);
  // A key that lost the alignment (the old key) finds the aligned entry for
  // the view: the cache refuses to hand that algorithm out.
  try {
    cache.find(gemm_algorithm_key(aligned), misaligned);
    ADD_FAILURE() << "an algorithm chosen at 256 bytes was handed out for a 2-byte aligned A";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("A aligned to 256 bytes reused at 2"), std::string::npos) << e.what();
  }
}

TEST(CublasLtPlan, FirstUsableHeuristicResultIsTaken) {
  struct Result {
    int state;
  };
  constexpr int kSuccess = 0, kNotSupported = 15;
  const Result results[] = {{kNotSupported}, {kSuccess}, {kSuccess}};
  EXPECT_EQ(first_usable_heuristic(results, 3, kSuccess), 1) << "the best result is not usable: the next one is";
  EXPECT_EQ(first_usable_heuristic(results, 1, kSuccess), -1) << "only unusable results: none";
  EXPECT_EQ(first_usable_heuristic(results, 0, kSuccess), -1);
  const Result best_usable[] = {{kSuccess}, {kNotSupported}};
  EXPECT_EQ(first_usable_heuristic(best_usable, 2, kSuccess), 0);
}

TEST(CublasLtPlan, EveryUsableHeuristicResultIsACandidateBestFirst) {
  struct Result {
    int state;
  };
  constexpr int kSuccess = 0, kNotSupported = 15;
  const Result results[] = {{kNotSupported}, {kSuccess}, {kNotSupported}, {kSuccess}};
  EXPECT_EQ(usable_heuristics(results, 4, kSuccess), (std::vector<int>{1, 3}));
  EXPECT_TRUE(usable_heuristics(results, 1, kSuccess).empty());
}

// The H100 refused the heuristic's first FP8 algorithm for m 64 n 128 k 64 at
// cublasLtMatmul (NOT_SUPPORTED): the executor goes on to the next candidate
// and keeps it, and reports a refusal of all of them.
TEST(CublasLtPlan, ARefusedCandidateIsPassedOverAndTheWorkingOneKept) {
  constexpr int kOk = 0, kNotSupported = 15, kInvalid = 7;
  std::vector<int> tried;
  std::size_t chosen = 0;
  auto refuse_first_two = [&](std::size_t i) {
    tried.push_back(static_cast<int>(i));
    return i < 2 ? kNotSupported : kOk;
  };
  EXPECT_EQ(run_first_supported(std::size_t{4}, chosen, kNotSupported, refuse_first_two), kOk);
  EXPECT_EQ(chosen, 2u);
  EXPECT_EQ(tried, (std::vector<int>{0, 1, 2}));
  tried.clear();
  EXPECT_EQ(run_first_supported(std::size_t{4}, chosen, kNotSupported, refuse_first_two), kOk);
  EXPECT_EQ(tried, (std::vector<int>{2})) << "the next call starts at the candidate that ran";

  std::size_t none = 0;
  EXPECT_EQ(run_first_supported(std::size_t{3}, none, kNotSupported, [](std::size_t) { return kNotSupported; }),
            kNotSupported);
  EXPECT_EQ(none, 3u) << "every candidate refused: none left";

  std::size_t other = 0;
  EXPECT_EQ(run_first_supported(std::size_t{3}, other, kNotSupported, [](std::size_t) { return kInvalid; }), kInvalid)
      << "another error is the caller's, not a reason to try the next algorithm";
  EXPECT_EQ(other, 0u);
}

// FSDP packs each unit's parameters back to back (fsdp/flat_parameter.cpp, no
// alignment padding), and the linear ops read their weights as views of the
// gathered buffer. With the MIN_ALIGNMENT preferences any view gets a valid
// algorithm, but one below 16 bytes only a slower one. For the presets every
// view starts at least 16-byte aligned in bf16 (the narrowest compute
// dtype), so padding the views would change nothing for them: a preset that
// breaks this fails here, the sign that padding is due.
TEST(CublasLtPlan, PresetFlatParameterViewsAre16ByteAlignedInBf16) {
  const std::pair<std::string, std::string> presets[] = {
      {"llama", "tiny"}, {"llama", "llama3.2-1b"}, {"vit", "tiny"}};
  for (const auto& [plugin, preset] : presets) {
    const std::string dir = plugin == "llama" ? FTRAIN_TEST_LLAMA_PLUGIN_DIR : FTRAIN_TEST_VIT_PLUGIN_DIR;
    ModelHandle model = PluginLoader({dir}).create_model(plugin, preset, {});
    int views = 0;
    for (int u = 0; u < model->num_units(); ++u) {
      std::vector<ParamSpec> own;  // as FsdpEngine: tied slots live in their owner's flat
      for (const auto& spec : model->unit(u).params())
        if (spec.tied_to.empty()) own.push_back(spec);
      const FlatParameter flat(u, model->unit(u).name(), own, /*shard_group_size=*/1, /*shard_rank=*/0);
      for (const FlatEntry& e : flat.entries()) {
        ++views;
        // The gathered buffer itself is a fresh (256-byte aligned) block.
        const std::uint32_t alignment = address_alignment(static_cast<std::uintptr_t>(e.offset) * 2 + 256 * 4096);
        EXPECT_GE(alignment, 16u) << plugin << " " << preset << ": " << e.name << " at element " << e.offset
                                  << " of unit " << flat.unit_name();
      }
    }
    EXPECT_GT(views, 0) << plugin << " " << preset;
  }
}
