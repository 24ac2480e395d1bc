// cuBLASLt plans (kernels/cuda/cublaslt_plan.hpp) replayed on the host: every
// plan the tiny Llama, Llama 3.2 1B and tiny ViT linear layers produce
// (forward with and without the bias epilogue, dgrad, wgrad) is executed by
// OpenBLAS's column-major cblas_sgemm with exactly the plan's transposes,
// m/n/k, leading dimensions, alpha/beta and operand assignment, and compared
// with the host linear op. The same replay of a plan with one field swapped
// (a transpose, a leading dimension, the operands) must fail: the test can.
#include <cblas.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.hpp"
#include "core/tensor.hpp"
#include "kernels/cuda/cublaslt_plan.hpp"
#include "kernels/ops.hpp"
#include "runtime/execution_context.hpp"
#include "unit/cuda/preset_shapes.hpp"

using namespace ftrain;
using namespace ftrain::cuda;

namespace {

constexpr std::int64_t kRows = 3;  // odd on purpose: a swapped m/n or ld shows

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
  return std::tie(a.transa, a.transb, a.m, a.n, a.k, a.a, a.b, a.c, a.lda, a.ldb, a.ldc, a.alpha, a.beta, a.epilogue) ==
         std::tie(b.transa, b.transb, b.m, b.n, b.k, b.a, b.b, b.c, b.lda, b.ldb, b.ldc, b.alpha, b.beta, b.epilogue);
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
        const GemmPlan plan = plan_linear(pass, shape);
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
  EXPECT_EQ(plan_linear(LinearPass::wgrad, {5, 7, 3}).beta, 1.0f) << "dw accumulates";
  EXPECT_EQ(plan_linear(LinearPass::dgrad, {5, 7, 3}).beta, 0.0f) << "dx is written";
  try {
    plan_linear(LinearPass::forward, {5, 7, 3, GemmElement::bf16, GemmElement::f32, GemmElement::f32, false});
    ADD_FAILURE() << "a bf16 activation with an f32 weight was planned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("one dtype"), std::string::npos) << e.what();
  }
}
