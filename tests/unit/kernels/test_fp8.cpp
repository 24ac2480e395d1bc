// The FP8 ops (op_list.hpp: cast_to_fp8, fp8_linear_forward,
// fp8_linear_backward, fp8_update_scales) on every backend, against float64
// references written independently of the kernels:
//  * the cast against "the nearest of the 256 decoded codes, ties to the
//    even code, saturating", amax (max-accumulated into its slot, NaN
//    sticky), scale_inv;
//  * the FP8 linear against float64 GEMMs on the very FP8 values the op read,
//    divided by the two scales;
//  * the scale update against Transformer Engine's rule
//    (_default_sf_compute, _update_amax_history) in float64.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "host_op_checks.hpp"
#include "kernels/ops.hpp"

using namespace ftrain;
using namespace ftrain::testing;

FTRAIN_BACKEND_TEST_SUITE(Fp8Ops);

namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Every finite value of an FP8 format with its code.
std::vector<std::pair<double, int>> finite_codes(DType format) {
  std::vector<std::pair<double, int>> out;
  for (int c = 0; c < 256; ++c) {
    const float v = format == DType::fp8_e4m3 ? to_float(fp8_e4m3{static_cast<std::uint8_t>(c)})
                                              : to_float(fp8_e5m2{static_cast<std::uint8_t>(c)});
    if (std::isfinite(v)) out.push_back({v, c});
  }
  return out;
}

// The reference cast: the nearest finite FP8 value (ties: the even code, i.e.
// the even mantissa), beyond the largest one the largest (saturation), NaN
// stays NaN.
double reference_fp8(double v, DType format) {
  if (std::isnan(v)) return NAN;
  const double max = format == DType::fp8_e4m3 ? 448.0 : 57344.0;
  if (v >= max) return max;
  if (v <= -max) return -max;
  double best = 0;
  int best_code = -1;
  double best_distance = INFINITY;
  for (const auto& [value, code] : finite_codes(format)) {
    const double d = std::fabs(value - v);
    if (d < best_distance || (d == best_distance && (code & 1) == 0 && (best_code & 1) == 1)) {
      best = value, best_code = code, best_distance = d;
    }
  }
  return best;
}

Tensor scalar(float v, const char* name) {
  Tensor t = tensor_from({1}, {v});
  t.set_name(name);
  return t;
}

// A descriptor over fresh tensors on the backend's device.
Fp8Tensor descriptor(const Shape& shape, DType format, float scale, bool with_amax, float amax_start = 0.0f) {
  return {named_zeros(shape, format, "data"), scalar(scale, "scale"), scalar(0.0f, "scale_inv"),
          with_amax ? scalar(amax_start, "amax") : Tensor()};
}

float read_scalar(const Tensor& t) { return read_floats(t)[0]; }

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

TEST_P(Fp8Ops, CastIsTheNearestGridValueOfXTimesScale) {
  for (const DType format : {DType::fp8_e4m3, DType::fp8_e5m2}) {
    for (const DType src : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(std::string(dtype_name(format)) + " from " + std::string(dtype_name(src)));
      const float scale = 37.3f;  // not a power of two: the product rounds before the cast
      Tensor x = random_tensor({9, 7}, 3, src, "x", 2.0);
      Fp8Tensor q = descriptor({9, 7}, format, scale, /*with_amax=*/true);
      ops::cast_to_fp8(backend_ctx(), x, q);
      const auto xv = read_floats(x), qv = read_floats(q.data);
      for (std::size_t i = 0; i < xv.size(); ++i)
        ASSERT_EQ(qv[i], reference_fp8(static_cast<double>(xv[i] * scale), format)) << "element " << i << " x " << xv[i];
      EXPECT_EQ(read_scalar(q.scale_inv), 1.0f / scale);
      double amax = 0;
      for (float v : xv) amax = std::max(amax, std::fabs(static_cast<double>(v)));
      EXPECT_EQ(read_scalar(q.amax), static_cast<float>(amax));
    }
  }
}

TEST_P(Fp8Ops, CastMaxAccumulatesAmaxIntoItsSlotWithoutAHostRead) {
  // The slot already holds 5 (an earlier GEMM of the same iteration): a
  // smaller amax keeps it, a larger one replaces it.
  Fp8Tensor q = descriptor({4}, DType::fp8_e4m3, 1.0f, /*with_amax=*/true, 5.0f);
  ops::cast_to_fp8(backend_ctx(), tensor_from({4}, {0.5, -3.0, 2.0, 0.0}), q);
  EXPECT_EQ(read_scalar(q.amax), 5.0f);
  ops::cast_to_fp8(backend_ctx(), tensor_from({4}, {0.5, -7.0, 2.0, 0.0}), q);
  EXPECT_EQ(read_scalar(q.amax), 7.0f) << "|negative| counts";
  // Without an amax slot nothing is recorded (evaluation, backward re-casts).
  Fp8Tensor no_record = descriptor({4}, DType::fp8_e4m3, 1.0f, /*with_amax=*/false);
  ops::cast_to_fp8(backend_ctx(), tensor_from({4}, {100.0, 1.0, 1.0, 1.0}), no_record);
  EXPECT_EQ(read_floats(no_record.data)[0], 96.0f) << "100 is a tie of 96 and 104 on E4M3's grid: the even mantissa";
  // Many chunks: the amax at the very end of the last one is found exactly.
  const std::int64_t n = 3 * 4096 + 17;
  std::vector<double> big = random_vector(static_cast<std::size_t>(n), 9);
  big.back() = -12.375;
  Fp8Tensor q_big = descriptor({n}, DType::fp8_e5m2, 1.0f, /*with_amax=*/true);
  ops::cast_to_fp8(backend_ctx(), tensor_from({n}, big), q_big);
  EXPECT_EQ(read_scalar(q_big.amax), 12.375f);
}

TEST_P(Fp8Ops, CastSaturatesAtTheFormatsLargestValue) {
  const std::vector<double> values{1e6, -1e6, 449.0, 465.0, 60000.0, -1e30, kInf, -kInf};
  for (const DType format : {DType::fp8_e4m3, DType::fp8_e5m2}) {
    const double max = format == DType::fp8_e4m3 ? 448.0 : 57344.0;
    Fp8Tensor q = descriptor({8}, format, 1.0f, /*with_amax=*/true);
    ops::cast_to_fp8(backend_ctx(), tensor_from({8}, values), q);
    const auto qv = read_floats(q.data);
    for (std::size_t i = 0; i < values.size(); ++i) {
      ASSERT_TRUE(std::isfinite(qv[i])) << dtype_name(format) << " element " << i << ": never inf or NaN";
      if (std::fabs(values[i]) > max) EXPECT_EQ(qv[i], values[i] > 0 ? max : -max) << dtype_name(format) << " " << i;
    }
    EXPECT_EQ(read_scalar(q.amax), kInf) << "the amax is the input's, not the saturated value's";
  }
  // The scale is applied before saturating: 2 * 300 saturates, 300 does not.
  Fp8Tensor q = descriptor({1}, DType::fp8_e4m3, 2.0f, /*with_amax=*/false);
  ops::cast_to_fp8(backend_ctx(), tensor_from({1}, {300.0}), q);
  EXPECT_EQ(read_floats(q.data)[0], 448.0f);
}

TEST_P(Fp8Ops, CastPropagatesNanIntoDataAndAmax) {
  for (const DType format : {DType::fp8_e4m3, DType::fp8_e5m2}) {
    Fp8Tensor q = descriptor({5}, format, 1.0f, /*with_amax=*/true, 3.0f);
    ops::cast_to_fp8(backend_ctx(), tensor_from({5}, {1.0, 1000.0, kNan, -2.0, 0.5}), q);
    const auto qv = read_floats(q.data);
    EXPECT_TRUE(std::isnan(qv[2])) << dtype_name(format);
    EXPECT_TRUE(std::isfinite(qv[1]) && std::isfinite(qv[3]));
    EXPECT_TRUE(std::isnan(read_scalar(q.amax))) << "a NaN amax, not the largest finite one";
    // Once recorded, a NaN stays for the iteration (the update keeps the scale).
    ops::cast_to_fp8(backend_ctx(), tensor_from({5}, {9.0, 1.0, 1.0, 1.0, 1.0}), q);
    EXPECT_TRUE(std::isnan(read_scalar(q.amax)));
  }
}

TEST_P(Fp8Ops, LinearMatchesFloat64OnTheQuantisedOperands) {
  const std::int64_t N = 13, in = 11, out = 6;
  for (const DType grad_format : {DType::fp8_e5m2, DType::fp8_e4m3}) {
    for (const DType act : {DType::f32, DType::bf16}) {
      for (const bool bias : {true, false}) {
        SCOPED_TRACE(std::string("dy ") + std::string(dtype_name(grad_format)) + ", activations " + std::string(dtype_name(act)) +
                     (bias ? ", bias" : ""));
        const float sx = 30.0f, sw = 900.0f, sdy = 5000.0f;  // not powers of two
        Tensor x = random_tensor({N, in}, 5, act, "x"), w = random_tensor({out, in}, 6, act, "w", 0.2);
        Tensor b = random_tensor({out}, 7, act, "b"), dy = random_tensor({N, out}, 8, act, "dy", 0.01);
        Fp8Tensor xq = descriptor({N, in}, DType::fp8_e4m3, sx, false);
        Fp8Tensor wq = descriptor({out, in}, DType::fp8_e4m3, sw, false);
        Fp8Tensor dyq = descriptor({N, out}, grad_format, sdy, false);
        ops::cast_to_fp8(backend_ctx(), x, xq);
        ops::cast_to_fp8(backend_ctx(), w, wq);
        ops::cast_to_fp8(backend_ctx(), dy, dyq);
        Tensor y = named_zeros({N, out}, act, "y");
        ops::fp8_linear_forward(backend_ctx(), xq, wq, bias ? &b : nullptr, y);
        Tensor dx = named_zeros({N, in}, act, "dx");
        Tensor dw = tensor_from({out, in}, std::vector<double>(out * in, 1.0));  // accumulates onto 1
        Tensor db = tensor_from({out}, std::vector<double>(out, 2.0));
        ops::fp8_linear_backward(backend_ctx(), xq, wq, dyq, dy, &dx, dw, bias ? &db : nullptr);

        // The FP8 values the op consumed, as float64.
        const auto xv = to_doubles(xq.data), wv = to_doubles(wq.data), dyv = to_doubles(dyq.data);
        const auto bv = to_doubles(b), dy_source = to_doubles(dy);
        const double y_tol = act == DType::bf16 ? 1e-2 : 1e-5;  // bf16 output: one rounding of 2^-8
        const auto yv = to_doubles(y), dxv = to_doubles(dx), dwv = to_doubles(dw), dbv = to_doubles(db);
        for (std::int64_t n = 0; n < N; ++n)
          for (std::int64_t o = 0; o < out; ++o) {
            double acc = 0;
            for (std::int64_t i = 0; i < in; ++i) acc += xv[n * in + i] * wv[o * in + i];
            const double want = acc / (double{sx} * sw) + (bias ? bv[o] : 0.0);
            ASSERT_NEAR(yv[n * out + o], want, y_tol * (1 + std::fabs(want))) << "y " << n << "," << o;
          }
        for (std::int64_t n = 0; n < N; ++n)
          for (std::int64_t i = 0; i < in; ++i) {
            double acc = 0;
            for (std::int64_t o = 0; o < out; ++o) acc += dyv[n * out + o] * wv[o * in + i];
            const double want = acc / (double{sdy} * sw);
            ASSERT_NEAR(dxv[n * in + i], want, y_tol * (1e-4 + std::fabs(want))) << "dx " << n << "," << i;
          }
        for (std::int64_t o = 0; o < out; ++o) {
          for (std::int64_t i = 0; i < in; ++i) {
            double acc = 0;
            for (std::int64_t n = 0; n < N; ++n) acc += dyv[n * out + o] * xv[n * in + i];
            ASSERT_NEAR(dwv[o * in + i], 1.0 + acc / (double{sdy} * sx), 1e-5) << "dw accumulates, " << o << "," << i;
          }
          double colsum = 0;
          for (std::int64_t n = 0; n < N; ++n) colsum += dy_source[n * out + o];
          if (bias) ASSERT_NEAR(dbv[o], 2.0 + colsum, 1e-5) << "db from the unquantised dy, accumulated, " << o;
        }
        // dx written, not accumulated: a second call gives the same dx.
        const auto dx_first = read_floats(dx);
        ops::fp8_linear_backward(backend_ctx(), xq, wq, dyq, dy, &dx, dw, nullptr);
        EXPECT_EQ(read_floats(dx), dx_first);
      }
    }
  }
}

// cuBLASLt dequantises with the operands' scale_inv (its A/B scale pointers),
// never with scale: the host GEMMs must too, or a scale_inv left behind its
// scale (a rank of the FP8 all-gather that casts no piece of a weight) would
// train on the GPU with numbers no host test ever saw. Halving one operand's
// scale_inv (exact: a power of two) must halve every output it scales, and
// changing the scales alone must change nothing.
TEST_P(Fp8Ops, LinearDequantisesWithTheScaleInvItIsGiven) {
  const std::int64_t N = 16, in = 32, out = 16;
  Tensor x = random_tensor({N, in}, 15, DType::f32, "x"), w = random_tensor({out, in}, 16, DType::f32, "w", 0.2);
  Tensor dy = random_tensor({N, out}, 17, DType::f32, "dy", 0.01);
  Fp8Tensor xq = descriptor({N, in}, DType::fp8_e4m3, 30.0f, false);
  Fp8Tensor wq = descriptor({out, in}, DType::fp8_e4m3, 900.0f, false);
  Fp8Tensor dyq = descriptor({N, out}, DType::fp8_e5m2, 5000.0f, false);
  ops::cast_to_fp8(backend_ctx(), x, xq);
  ops::cast_to_fp8(backend_ctx(), w, wq);
  ops::cast_to_fp8(backend_ctx(), dy, dyq);
  struct Outputs {
    std::vector<float> y, dx, dw;
  };
  const auto run = [&]() {
    Tensor y = named_zeros({N, out}, DType::f32, "y"), dx = named_zeros({N, in}, DType::f32, "dx");
    Tensor dw = named_zeros({out, in}, DType::f32, "dw");
    ops::fp8_linear_forward(backend_ctx(), xq, wq, nullptr, y);
    ops::fp8_linear_backward(backend_ctx(), xq, wq, dyq, dy, &dx, dw, nullptr);
    return Outputs{read_floats(y), read_floats(dx), read_floats(dw)};
  };
  const Outputs fresh = run();
  const auto scaled = [](const std::vector<float>& v, float f) {
    std::vector<float> out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = v[i] * f;
    return out;
  };
  const auto set_scalar = [](Tensor& t, float v) { copy_tensor(scalar(v, "value"), t); };
  // w's scale_inv halved, its scale kept: y and dx halve, dw does not move.
  set_scalar(wq.scale_inv, 0.5f * (1.0f / 900.0f));
  const Outputs stale_w = run();
  EXPECT_EQ(stale_w.y, scaled(fresh.y, 0.5f)) << "y must be dequantised with w.scale_inv";
  EXPECT_EQ(stale_w.dx, scaled(fresh.dx, 0.5f)) << "dx must be dequantised with w.scale_inv";
  EXPECT_EQ(stale_w.dw, fresh.dw) << "dw does not read w";
  set_scalar(wq.scale_inv, 1.0f / 900.0f);
  // x's scale_inv halved: y and dw halve.
  set_scalar(xq.scale_inv, 0.5f * (1.0f / 30.0f));
  const Outputs stale_x = run();
  EXPECT_EQ(stale_x.y, scaled(fresh.y, 0.5f)) << "y must be dequantised with x.scale_inv";
  EXPECT_EQ(stale_x.dw, scaled(fresh.dw, 0.5f)) << "dw must be dequantised with x.scale_inv";
  set_scalar(xq.scale_inv, 1.0f / 30.0f);
  // The scales alone (what the casts read) do not reach the GEMMs.
  for (Fp8Tensor* t : {&xq, &wq, &dyq}) set_scalar(t->scale, 1.0f);
  const Outputs scales_moved = run();
  EXPECT_EQ(scales_moved.y, fresh.y);
  EXPECT_EQ(scales_moved.dx, fresh.dx);
  EXPECT_EQ(scales_moved.dw, fresh.dw);
}

TEST_P(Fp8Ops, LinearRejectsWrongOperandsNamingThem) {
  Fp8Tensor xq = descriptor({4, 3}, DType::fp8_e4m3, 1.0f, false), wq = descriptor({2, 3}, DType::fp8_e4m3, 1.0f, false);
  Tensor y = named_zeros({4, 5}, DType::f32, "y_wrong");
  expect_error_mentioning([&] { ops::fp8_linear_forward(backend_ctx(), xq, wq, nullptr, y); },
                          {"fp8_linear_forward", "y_wrong"});
  Fp8Tensor not_fp8{named_zeros({4, 3}, DType::bf16, "x_bf16"), scalar(1.0f, "scale"), scalar(1.0f, "scale_inv"), {}};
  Tensor y2 = named_zeros({4, 2}, DType::f32, "y");
  expect_error_mentioning([&] { ops::fp8_linear_forward(backend_ctx(), not_fp8, wq, nullptr, y2); },
                          {"fp8_linear_forward", "x_bf16", "fp8_e4m3 or fp8_e5m2"});
  Fp8Tensor q = descriptor({3}, DType::fp8_e4m3, 1.0f, false);
  expect_error_mentioning([&] { ops::cast_to_fp8(backend_ctx(), tensor_from({4}, {1, 2, 3, 4}), q); },
                          {"cast_to_fp8", "out.data"});
}

namespace {

// Transformer Engine's delayed-scaling update in float64 (the rule of
// fp8/recipe.hpp): per column amax from the history, scale from amax, roll.
void reference_update(std::vector<double>& h, std::vector<double>& s, std::int64_t len, DType fwd, DType bwd,
                      int margin, Fp8AmaxAlgo algo) {
  for (int c = 0; c < 3; ++c) {
    double amax = h[c];
    if (algo == Fp8AmaxAlgo::max) {
      bool nan = false;
      for (std::int64_t r = 0; r < len; ++r) {
        nan |= std::isnan(h[r * 3 + c]);
        amax = std::max(amax, h[r * 3 + c]);
      }
      if (nan) amax = NAN;
    }
    const double max = (c == 2 ? bwd : fwd) == DType::fp8_e4m3 ? 448.0 : 57344.0;
    const double sf = max / amax / std::pow(2.0, margin);
    const bool keep = !(amax > 0) || !std::isfinite(amax) || !std::isfinite(static_cast<float>(sf));
    s[c] = keep ? s[c] : static_cast<double>(static_cast<float>(sf));
  }
  std::vector<double> rolled(h.size());
  for (std::int64_t r = 0; r < len; ++r)
    for (int c = 0; c < 3; ++c) rolled[r * 3 + c] = h[((r + 1) % len) * 3 + c];  // torch.roll(h, -1, 0)
  for (int c = 0; c < 3; ++c) rolled[c] = 0.0;
  h = rolled;
}

}  // namespace

TEST_P(Fp8Ops, UpdateScalesFollowsTransformerEnginesRule) {
  // Histories mixing ordinary amaxes with the values the rule guards
  // against: zero (nothing recorded), inf, NaN, a denormal (448 / it
  // overflows f32).
  const std::vector<double> specials{0.0, kInf, kNan, 1e-45};
  int cases = 0;
  for (const std::int64_t len : {1, 2, 5}) {
    for (const Fp8AmaxAlgo algo : {Fp8AmaxAlgo::max, Fp8AmaxAlgo::most_recent}) {
      for (const int margin : {0, 3}) {
        for (const DType bwd : {DType::fp8_e5m2, DType::fp8_e4m3}) {
          for (std::uint64_t seed = 0; seed < 6; ++seed) {
            std::vector<double> h = random_vector(static_cast<std::size_t>(len * 3), 100 + seed, 4.0);
            for (double& v : h) v = static_cast<float>(std::fabs(v));  // the f32 values the tensor holds
            if (seed >= 2) h[(seed * 7) % h.size()] = static_cast<float>(specials[seed - 2]);
            std::vector<double> s{1.0, 7.5, 0.25};
            Tensor th = tensor_from({len, 3}, h), ts = tensor_from({3}, s);
            Tensor tsi = tensor_from({3}, {1.0, 1.0, 1.0});  // stale until the update writes it
            // Two iterations: the second starts from the rolled history.
            for (int iteration = 0; iteration < 2; ++iteration) {
              SCOPED_TRACE("L " + std::to_string(len) + " algo " + std::to_string(static_cast<int>(algo)) +
                           " margin " + std::to_string(margin) + " seed " + std::to_string(seed) + " iteration " +
                           std::to_string(iteration));
              ops::fp8_update_scales(backend_ctx(), th, ts, tsi, DType::fp8_e4m3, bwd, margin, algo);
              reference_update(h, s, len, DType::fp8_e4m3, bwd, margin, algo);
              const auto got_s = read_floats(ts), got_h = read_floats(th), got_si = read_floats(tsi);
              for (int c = 0; c < 3; ++c) {
                ASSERT_TRUE(same_bits(got_s[c], static_cast<float>(s[c]))) << "scale " << c << ": " << got_s[c]
                                                                           << " vs " << s[c];
                // Every column's scale_inv, changed or kept: a rank of the FP8
                // all-gather that casts no piece of a weight has no other writer.
                ASSERT_TRUE(same_bits(got_si[c], 1.0f / static_cast<float>(s[c])))
                    << "scale_inv " << c << ": " << got_si[c] << " vs 1 / " << s[c];
              }
              for (std::size_t i = 0; i < h.size(); ++i)
                ASSERT_TRUE(same_bits(got_h[i], static_cast<float>(h[i])) ||
                            (std::isnan(got_h[i]) && std::isnan(h[i])))
                    << "history element " << i << ": " << got_h[i] << " vs " << h[i];
              h[1] = 3.0;  // the next iteration records a weight amax
              Tensor slot = th.view({1}, 1);
              Fp8Tensor record{named_zeros({1}, DType::fp8_e4m3, "w"), scalar(1.0f, "scale"), scalar(0, "inv"), slot};
              ops::cast_to_fp8(backend_ctx(), tensor_from({1}, {3.0}), record);
              ++cases;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 3 * 2 * 2 * 2 * 6 * 2);
}

TEST_P(Fp8Ops, UpdateScalesRejectsAWrongStateNamingIt) {
  Tensor h = named_zeros({4, 2}, DType::f32, "history_4x2"), s = named_zeros({3}, DType::f32, "scale");
  Tensor si = named_zeros({3}, DType::f32, "scale_inv");
  expect_error_mentioning(
      [&] { ops::fp8_update_scales(backend_ctx(), h, s, si, DType::fp8_e4m3, DType::fp8_e5m2, 0, Fp8AmaxAlgo::max); },
      {"fp8_update_scales", "history_4x2"});
  Tensor h3 = named_zeros({4, 3}, DType::f32, "history");
  expect_error_mentioning(
      [&] { ops::fp8_update_scales(backend_ctx(), h3, s, si, DType::bf16, DType::fp8_e5m2, 0, Fp8AmaxAlgo::max); },
      {"fp8_update_scales", "bf16"});
  Tensor si2 = named_zeros({2}, DType::f32, "scale_inv_of_2");
  expect_error_mentioning(
      [&] { ops::fp8_update_scales(backend_ctx(), h3, s, si2, DType::fp8_e4m3, DType::fp8_e5m2, 0, Fp8AmaxAlgo::max); },
      {"fp8_update_scales", "scale_inv_of_2"});
}

TEST_P(Fp8Ops, TransposeMovesTheCodesUnchanged) {
  // An odd [rows, cols] (partial tiles on a GPU), and a [B, T, cols] view.
  for (const Shape& shape : {Shape{37, 45}, Shape{2, 3, 5}}) {
    SCOPED_TRACE(shape_string(shape));
    const std::int64_t cols = shape.back(), rows = shape_numel(shape) / cols;
    Fp8Tensor q = descriptor(shape, DType::fp8_e5m2, 900.0f, /*with_amax=*/false);
    ops::cast_to_fp8(backend_ctx(), random_tensor(shape, 5, DType::f32, "x", 3.0), q);
    Tensor transposed = named_zeros({cols, rows}, DType::fp8_e5m2, "data_t");
    ops::fp8_transpose(backend_ctx(), q.data, transposed);
    const auto codes = read_floats(q.data), t = read_floats(transposed);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c)
        ASSERT_TRUE(same_bits(t[static_cast<std::size_t>(c * rows + r)], codes[static_cast<std::size_t>(r * cols + c)]))
            << "row " << r << " col " << c;
  }
  Fp8Tensor q = descriptor({4, 6}, DType::fp8_e4m3, 1.0f, false);
  Tensor wrong = named_zeros({4, 6}, DType::fp8_e4m3, "not_transposed");
  expect_error_mentioning([&] { ops::fp8_transpose(backend_ctx(), q.data, wrong); }, {"fp8_transpose", "not_transposed"});
}
