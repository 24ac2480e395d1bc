// The host GEMM providers (kernels/host/gemm.hpp): oneDNN's BF16 matmul
// against a float64 reference computed on exactly the bf16 values it reads,
// every transpose layout, odd shapes, write and accumulate; and the linear
// layer's forward, dgrad and wgrad on bf16 tensors through that route.
//
// Where the CPU has no AVX512-BF16 or the build has no oneDNN, the tests that
// need the native route skip with the reason the provider gives (never a
// silent pass: on a CPU that has the instructions, a build with oneDNN must
// take the route, or the first test fails).
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "host_op_checks.hpp"
#include "kernels/host/gemm.hpp"
#include "kernels/host/host_ops.hpp"
#include "kernels/ops.hpp"

using namespace ftrain;
using namespace ftrain::testing;

namespace {

bool cpu_flag(const std::string& flag) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line))
    if (line.rfind("flags", 0) == 0) return (line + " ").find(" " + flag + " ") != std::string::npos;
  return false;
}

#define SKIP_UNLESS_NATIVE_BF16()                                                      \
  if (!host::gemm::bf16_native()) GTEST_SKIP() << "no native BF16 GEMM here: " << host::gemm::describe()

// Row-major element (r, c) of op(X) where X is stored with leading dimension ld.
double at(const std::vector<double>& x, host::gemm::Op op, std::int64_t ld, std::int64_t r, std::int64_t c) {
  return op == host::gemm::Op::none ? x[r * ld + c] : x[c * ld + r];
}

}  // namespace

TEST(HostGemm, NativeBf16RouteIsTakenWhereTheCpuHasIt) {
  const bool cpu_has_bf16 = cpu_flag("avx512_bf16") || cpu_flag("amx_bf16");
  const char* forced = std::getenv("FTRAIN_HOST_GEMM");
  const bool user_forced_openblas = forced != nullptr && std::string(forced) == "openblas";
#if defined(FTRAIN_TEST_HAVE_ONEDNN)
  EXPECT_EQ(host::gemm::bf16_native(), cpu_has_bf16 && !user_forced_openblas) << host::gemm::describe();
#else
  EXPECT_FALSE(host::gemm::bf16_native()) << host::gemm::describe();
#endif
  const std::string d = host::gemm::describe();
  EXPECT_NE(d.find("f32 OpenBLAS"), std::string::npos) << d;
  EXPECT_NE(d.find(host::gemm::bf16_native() ? "oneDNN" : "widened to f32"), std::string::npos) << d;
  if (user_forced_openblas) EXPECT_NE(d.find("FTRAIN_HOST_GEMM=openblas"), std::string::npos) << d;
}

TEST(HostGemm, Bf16MatchesFloat64OnTheBf16ValuesForEveryLayout) {
  SKIP_UNLESS_NATIVE_BF16();
  using host::gemm::Op;
  struct Shape3 {
    std::int64_t m, n, k;
  };
  for (const Shape3 s : {Shape3{1, 1, 1}, Shape3{7, 13, 5}, Shape3{33, 17, 129}, Shape3{64, 48, 96},
                         Shape3{3, 250, 31}}) {
    for (const Op op_a : {Op::none, Op::transpose})
      for (const Op op_b : {Op::none, Op::transpose})
        for (const float beta : {0.0f, 1.0f}) {
          SCOPED_TRACE("m " + std::to_string(s.m) + " n " + std::to_string(s.n) + " k " + std::to_string(s.k) +
                       (op_a == Op::none ? " A:N" : " A:T") + (op_b == Op::none ? " B:N" : " B:T") +
                       " beta " + std::to_string(beta));
          // Stored shapes, with padded leading dimensions to exercise strides.
          const std::int64_t a_rows = op_a == Op::none ? s.m : s.k, a_cols = op_a == Op::none ? s.k : s.m;
          const std::int64_t b_rows = op_b == Op::none ? s.k : s.n, b_cols = op_b == Op::none ? s.n : s.k;
          const std::int64_t lda = a_cols + 3, ldb = b_cols + 1, ldc = s.n + 2;
          Tensor a = random_tensor({a_rows, lda}, 1, DType::bf16, "a");
          Tensor b = random_tensor({b_rows, ldb}, 2, DType::bf16, "b");
          Tensor c = random_tensor({s.m, ldc}, 3, DType::f32, "c");
          const auto av = to_doubles(a), bv = to_doubles(b), c0 = to_doubles(c);
          host::gemm::bf16({op_a, op_b, s.m, s.n, s.k, lda, ldb, ldc}, a.data_as<bf16>(), b.data_as<bf16>(), beta,
                           c.data_as<float>());
          const auto cv = to_doubles(c);
          double worst = 0.0;
          for (std::int64_t r = 0; r < s.m; ++r)
            for (std::int64_t j = 0; j < ldc; ++j) {
              const std::size_t i = static_cast<std::size_t>(r * ldc + j);
              if (j >= s.n) {
                EXPECT_EQ(cv[i], c0[i]) << "padding column " << j << " of row " << r << " was written";
                continue;
              }
              double ref = beta * c0[i], scale = std::abs(beta * c0[i]);
              for (std::int64_t p = 0; p < s.k; ++p) {
                const double t = at(av, op_a, lda, r, p) * at(bv, op_b, ldb, p, j);
                ref += t;
                scale += std::abs(t);
              }
              worst = std::max(worst, std::abs(cv[i] - ref) / std::max(scale, 1e-30));
            }
          // f32 accumulation of exact bf16 products: a few f32 ulps of the sum of magnitudes.
          EXPECT_LT(worst, 1e-6);
        }
  }
}

// The GEMM's own rounding to a bf16 C equals the f32 result rounded here
// (to_bf16, round to nearest even), bit for bit, for every layout and odd
// shapes, with padding columns left alone; and the linear layer's bf16 y and
// dx (no bias) take that route: a second rounding pass or a different
// rounding would show.
TEST(HostGemm, Bf16RoundedEqualsTheF32ResultRoundedToNearestEven) {
  SKIP_UNLESS_NATIVE_BF16();
  using host::gemm::Op;
  struct Shape3 {
    std::int64_t m, n, k;
  };
  std::int64_t compared = 0, ties_or_close = 0;
  for (const Shape3 s : {Shape3{1, 1, 1}, Shape3{7, 13, 5}, Shape3{33, 17, 129}, Shape3{64, 48, 96},
                         Shape3{3, 250, 31}, Shape3{512, 384, 384}, Shape3{130, 1024, 384}}) {
    for (const Op op_a : {Op::none, Op::transpose})
      for (const Op op_b : {Op::none, Op::transpose}) {
        SCOPED_TRACE("m " + std::to_string(s.m) + " n " + std::to_string(s.n) + " k " + std::to_string(s.k) +
                     (op_a == Op::none ? " A:N" : " A:T") + (op_b == Op::none ? " B:N" : " B:T"));
        const std::int64_t a_rows = op_a == Op::none ? s.m : s.k, a_cols = op_a == Op::none ? s.k : s.m;
        const std::int64_t b_rows = op_b == Op::none ? s.k : s.n, b_cols = op_b == Op::none ? s.n : s.k;
        const std::int64_t lda = a_cols + 3, ldb = b_cols + 1, ldc = s.n + 2;
        Tensor a = random_tensor({a_rows, lda}, 11, DType::bf16, "a");
        Tensor b = random_tensor({b_rows, ldb}, 12, DType::bf16, "b");
        Tensor wide = named_zeros({s.m, ldc}, DType::f32, "c_f32");
        Tensor narrow = random_tensor({s.m, ldc}, 13, DType::bf16, "c_bf16");
        const auto narrow0 = to_doubles(narrow);
        const host::gemm::Dims dims{op_a, op_b, s.m, s.n, s.k, lda, ldb, ldc};
        host::gemm::bf16(dims, a.data_as<bf16>(), b.data_as<bf16>(), 0.0f, wide.data_as<float>());
        host::gemm::bf16_rounded(dims, a.data_as<bf16>(), b.data_as<bf16>(), narrow.data_as<bf16>());
        const float* wv = wide.data_as<float>();
        const bf16* nv = narrow.data_as<bf16>();
        for (std::int64_t r = 0; r < s.m; ++r)
          for (std::int64_t j = 0; j < ldc; ++j) {
            const std::size_t i = static_cast<std::size_t>(r * ldc + j);
            if (j >= s.n) {
              ASSERT_EQ(to_float(nv[i]), narrow0[i]) << "padding column " << j << " of row " << r << " was written";
              continue;
            }
            ASSERT_EQ(nv[i].bits, to_bf16(wv[i]).bits)
                << "row " << r << " col " << j << ": f32 " << wv[i] << " rounds to " << to_float(to_bf16(wv[i]))
                << ", the GEMM wrote " << to_float(nv[i]);
            ++compared;
            // Results within a bf16 half-ulp tie's reach: where truncation or ties-away would differ.
            const std::uint32_t low = float_bits(wv[i]) & 0xffffu;
            if (low >= 0x7000u && low <= 0x9000u) ++ties_or_close;
          }
      }
  }
  EXPECT_GT(compared, 100000);
  EXPECT_GT(ties_or_close, 1000) << "too few results near a rounding boundary to tell roundings apart";
}

TEST(HostGemm, LinearBf16OutputsWithoutBiasAreRoundedByTheGemm) {
  SKIP_UNLESS_NATIVE_BF16();
  Tensor x = random_tensor({37, 24}, 1, DType::bf16, "x");
  Tensor w = random_tensor({19, 24}, 2, DType::bf16, "w", 0.3);
  Tensor dy = random_tensor({37, 19}, 4, DType::bf16, "dy");
  Tensor y = named_zeros({37, 19}, DType::bf16, "y"), dx = named_zeros({37, 24}, DType::bf16, "dx");
  Tensor y32 = named_zeros({37, 19}, DType::f32, "y32"), dx32 = named_zeros({37, 24}, DType::f32, "dx32");
  Tensor dw = named_zeros({19, 24}, DType::f32, "dw");
  const std::uint64_t rounded_before = host::gemm::bf16_rounded_calls();
  host::linear_forward(x, w, nullptr, y);
  host::linear_backward(x, w, dy, &dx, dw, nullptr);
  EXPECT_EQ(host::gemm::bf16_rounded_calls() - rounded_before, 2u) << "y and dx rounded by the GEMM";
  host::linear_forward(x, w, nullptr, y32);
  host::linear_backward(x, w, dy, &dx32, dw, nullptr);
  EXPECT_EQ(host::gemm::bf16_rounded_calls() - rounded_before, 2u) << "f32 outputs are not rounded";
  const float* y32v = y32.data_as<float>();
  const float* dx32v = dx32.data_as<float>();
  for (std::int64_t i = 0; i < y.numel(); ++i) ASSERT_EQ(y.data_as<bf16>()[i].bits, to_bf16(y32v[i]).bits) << i;
  for (std::int64_t i = 0; i < dx.numel(); ++i) ASSERT_EQ(dx.data_as<bf16>()[i].bits, to_bf16(dx32v[i]).bits) << i;
}

TEST(HostGemm, Bf16EmptyReductionWritesZerosOrKeepsC) {
  SKIP_UNLESS_NATIVE_BF16();
  Tensor a = named_zeros({4, 1}, DType::bf16, "a"), b = named_zeros({1, 3}, DType::bf16, "b");
  Tensor c = random_tensor({4, 3}, 5, DType::f32, "c");
  const auto c0 = to_doubles(c);
  host::gemm::bf16({host::gemm::Op::none, host::gemm::Op::none, 4, 3, 0, 1, 3, 3}, a.data_as<bf16>(),
                   b.data_as<bf16>(), 1.0f, c.data_as<float>());
  EXPECT_EQ(to_doubles(c), c0);
  host::gemm::bf16({host::gemm::Op::none, host::gemm::Op::none, 4, 3, 0, 1, 3, 3}, a.data_as<bf16>(),
                   b.data_as<bf16>(), 0.0f, c.data_as<float>());
  for (double v : to_doubles(c)) EXPECT_EQ(v, 0.0);
}

// The linear layer with bf16 operands and f32 outputs: the oneDNN route must
// give the float64 result on the bf16 values within f32 accumulation error
// (the widened OpenBLAS route gives the same to that tolerance), and every
// GEMM of forward, dgrad and wgrad must have gone through oneDNN.
TEST(HostGemm, LinearForwardDgradWgradOnBf16OperandsUseOneDnn) {
  SKIP_UNLESS_NATIVE_BF16();
  for (const auto& [rows, din, dout] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{9, 24, 11},
                                        {1, 1, 1}, {31, 67, 5}, {64, 128, 96}}) {
    SCOPED_TRACE("rows " + std::to_string(rows) + " in " + std::to_string(din) + " out " + std::to_string(dout));
    Tensor x = random_tensor({rows, din}, 1, DType::bf16, "x");
    Tensor w = random_tensor({dout, din}, 2, DType::bf16, "w", 0.3);
    Tensor dy = random_tensor({rows, dout}, 4, DType::bf16, "dy");
    Tensor y = named_zeros({rows, dout}, DType::f32, "y");
    Tensor dx = named_zeros({rows, din}, DType::f32, "dx");
    Tensor dw = random_tensor({dout, din}, 6, DType::f32, "dw");  // accumulated into
    const auto dw0 = to_doubles(dw);

    const std::uint64_t calls_before = host::gemm::bf16_calls();
    host::linear_forward(x, w, nullptr, y);
    host::linear_backward(x, w, dy, &dx, dw, nullptr);
    EXPECT_EQ(host::gemm::bf16_calls() - calls_before, 3u) << "forward, dgrad and wgrad each one oneDNN matmul";

    const auto xv = to_doubles(x), wv = to_doubles(w), gv = to_doubles(dy);
    std::vector<double> y_ref(rows * dout, 0.0), dx_ref(rows * din, 0.0), dw_ref = dw0;
    for (std::int64_t n = 0; n < rows; ++n)
      for (std::int64_t o = 0; o < dout; ++o)
        for (std::int64_t i = 0; i < din; ++i) {
          y_ref[n * dout + o] += xv[n * din + i] * wv[o * din + i];
          dx_ref[n * din + i] += gv[n * dout + o] * wv[o * din + i];
          dw_ref[o * din + i] += gv[n * dout + o] * xv[n * din + i];
        }
    EXPECT_LT(relative_error(to_doubles(y), y_ref), 1e-6);
    EXPECT_LT(relative_error(to_doubles(dx), dx_ref), 1e-6);
    EXPECT_LT(relative_error(to_doubles(dw), dw_ref), 1e-6);
  }
}

// Mixed operands (one f32) never take the bf16 route: that would round an
// f32 operand the tensor does not hold.
TEST(HostGemm, MixedF32Bf16OperandsStayOnF32) {
  SKIP_UNLESS_NATIVE_BF16();
  Tensor x = random_tensor({5, 7}, 1, DType::f32, "x");
  Tensor w = random_tensor({3, 7}, 2, DType::bf16, "w");
  Tensor y = named_zeros({5, 3}, DType::f32, "y");
  const std::uint64_t calls_before = host::gemm::bf16_calls();
  host::linear_forward(x, w, nullptr, y);
  EXPECT_EQ(host::gemm::bf16_calls(), calls_before);
}

// The fused head's GEMMs take the same route: forward logits exact to f32
// accumulation on the bf16 values (one matmul per vocabulary chunk), backward
// two more per chunk (dh and dw, on dlogit rounded to bf16 as autocast does).
TEST(HostGemm, CrossEntropyHeadOnBf16OperandsUsesOneDnn) {
  SKIP_UNLESS_NATIVE_BF16();
  const std::int64_t N = 12, C = 40, V = 70, chunk = 32;  // 3 chunks, the last partial
  Tensor h = random_tensor({N, C}, 1, DType::bf16, "h");
  Tensor w = random_tensor({V, C}, 2, DType::bf16, "w", 0.2);
  std::vector<float> t(N);
  for (std::int64_t i = 0; i < N; ++i) t[i] = static_cast<float>((i * 17) % V);
  t[3] = static_cast<float>(kIgnoreIndex);
  Tensor targets = Tensor::empty({N}, DType::i32);
  for (std::int64_t i = 0; i < N; ++i) targets.data_as<std::int32_t>()[i] = static_cast<std::int32_t>(t[i]);
  Tensor losses = named_zeros({N}, DType::f32, "losses"), lse = named_zeros({N}, DType::f32, "lse");

  const std::uint64_t before = host::gemm::bf16_calls();
  host::cross_entropy_forward(h, w, nullptr, targets, chunk, losses, lse);
  EXPECT_EQ(host::gemm::bf16_calls() - before, 3u);

  const auto hv = to_doubles(h), wv = to_doubles(w), lv = to_doubles(losses);
  for (std::int64_t i = 0; i < N; ++i) {
    std::vector<double> logits(V);
    double mx = -1e300;
    for (std::int64_t v = 0; v < V; ++v) {
      double s = 0;
      for (std::int64_t c = 0; c < C; ++c) s += hv[i * C + c] * wv[v * C + c];
      logits[v] = s;
      mx = std::max(mx, s);
    }
    double sum = 0;
    for (double l : logits) sum += std::exp(l - mx);
    const double ref = i == 3 ? 0.0 : mx + std::log(sum) - logits[static_cast<std::size_t>(t[i])];
    EXPECT_NEAR(lv[i], ref, 1e-5 * (1 + std::abs(ref))) << "row " << i;
  }

  Tensor dh = named_zeros({N, C}, DType::f32, "dh"), dw = named_zeros({V, C}, DType::f32, "dw");
  const std::uint64_t before_backward = host::gemm::bf16_calls();
  const Tensor loss_scale = from_floats({1}, {1.0f / N});
  host::cross_entropy_backward(h, w, nullptr, targets, lse, loss_scale, chunk, dh, dw, nullptr);
  EXPECT_EQ(host::gemm::bf16_calls() - before_backward, 9u) << "logits, dh and dw for each of 3 chunks";
}

// Last in this file: where it is allowed, use_widened_bf16 switches the whole
// process. precision fp8 asks for the widened route before its first GEMM;
// asked after oneDNN has served one, the run would mix two roundings, so it
// is refused with the reason and the route stays as it was.
TEST(HostGemm, WidenedRouteIsRefusedOnceOneDnnServedAGemm) {
  SKIP_UNLESS_NATIVE_BF16();
  const Tensor a = random_tensor({2, 2}, 7, DType::bf16, "a");
  Tensor c = named_zeros({2, 2}, DType::f32, "c");
  host::gemm::bf16({host::gemm::Op::none, host::gemm::Op::none, 2, 2, 2, 2, 2, 2}, a.data_as<bf16>(),
                   a.data_as<bf16>(), 0.0f, c.data_as<float>());
  try {
    host::gemm::use_widened_bf16("the test's reason");
    FAIL() << "use_widened_bf16 after a oneDNN GEMM was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("the test's reason"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("before the first one"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(host::gemm::bf16_native()) << host::gemm::describe();
}
