// The fused FP8 producers (op_list.hpp: rmsnorm_forward_fp8,
// swiglu_forward_fp8) on every backend, against the unfused sequence they
// replace in the Llama block: rmsnorm_forward (or swiglu_forward) into the
// activation, then one cast_to_fp8 of it per consumer. Every output must be
// the same bit pattern: the activation, rstd, each cast's FP8 codes, its
// scale_inv and its amax slot (max-accumulated from a non-zero start). Odd
// shapes (1 column, widths that are no multiple of 16 or of a warp, rows
// beyond a 4096-element chunk), f32 and bf16 activations, E4M3 and E5M2,
// scales that are not powers of two and differ per cast, a cast without an
// amax slot, NaN.
//
// What it catches (checked by mutating the host kernel): a cast that used
// another cast's scale (the casts' scales differ), an amax or a code taken
// from the f32 value before it was rounded to the bf16 activation (bf16
// cases: the rounded and unrounded maxima differ), an amax that replaced the
// slot instead of max-combining with it (the slots start at 0.75 / 3.5).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "host_op_checks.hpp"
#include "kernels/ops.hpp"

using namespace ftrain;
using namespace ftrain::testing;

FTRAIN_BACKEND_TEST_SUITE(Fp8Fusions);

namespace {

Tensor scalar(float v, const char* name) {
  Tensor t = tensor_from({1}, {v});
  t.set_name(name);
  return t;
}

struct CastSpec {
  DType format;
  float scale;
  bool with_amax;
  float amax_start;
};

Fp8Tensor descriptor(const Shape& shape, const CastSpec& c) {
  return {named_zeros(shape, c.format, "data"), scalar(c.scale, "scale"), scalar(0.0f, "scale_inv"),
          c.with_amax ? scalar(c.amax_start, "amax") : Tensor()};
}

// The raw bytes of a tensor (after the backend's streams drained).
std::vector<std::uint8_t> bytes_of(const Tensor& t) {
  backend_synchronize();
  const Tensor h = t.device() == Device::host ? t : to_device(t, Device::host);
  const auto* p = static_cast<const std::uint8_t*>(h.data());
  return std::vector<std::uint8_t>(p, p + h.nbytes());
}

void expect_same_bytes(const Tensor& got, const Tensor& want, const std::string& what) {
  const auto g = bytes_of(got), w = bytes_of(want);
  ASSERT_EQ(g.size(), w.size()) << what;
  std::size_t mismatches = 0, first = 0;
  for (std::size_t i = 0; i < g.size(); ++i)
    if (g[i] != w[i] && mismatches++ == 0) first = i;
  EXPECT_EQ(mismatches, 0u) << what << ": " << mismatches << " bytes differ, the first at byte " << first << " ("
                            << int(g[first]) << " vs " << int(w[first]) << ")";
}

void expect_same_cast(const Fp8Tensor& got, const Fp8Tensor& want, const std::string& what) {
  expect_same_bytes(got.data, want.data, what + " codes");
  expect_same_bytes(got.scale_inv, want.scale_inv, what + " scale_inv");
  if (want.amax.defined()) expect_same_bytes(got.amax, want.amax, what + " amax");
}

// Three consumers as the q, k, v projections have: their own scales and
// formats, one without an amax slot (an evaluation forward records none).
const std::vector<CastSpec> kThreeCasts = {{DType::fp8_e4m3, 37.3f, true, 0.75f},
                                           {DType::fp8_e5m2, 1000.1f, true, 3.5f},
                                           {DType::fp8_e4m3, 0.0371f, false, 0.0f}};

void check_rmsnorm(const Shape& shape, DType x_dtype, DType y_dtype, const std::vector<CastSpec>& specs,
                   std::uint64_t seed, double x_scale, bool with_nan) {
  SCOPED_TRACE(std::string("rmsnorm x ") + std::string(dtype_name(x_dtype)) + ", y " + std::string(dtype_name(y_dtype)) + ", " +
               std::to_string(specs.size()) + " casts, shape [" + std::to_string(shape.front()) + ", ..., " +
               std::to_string(shape.back()) + "]");
  const std::int64_t width = shape.back(), rows = shape_numel(shape) / width;
  std::vector<double> xv = random_vector(static_cast<std::size_t>(shape_numel(shape)), seed, x_scale);
  if (with_nan) xv[xv.size() / 2] = std::numeric_limits<double>::quiet_NaN();
  const Tensor x = tensor_from(shape, xv, x_dtype);
  const Tensor w = random_tensor({width}, seed + 1, DType::bf16, "w", 1.5);
  const float eps = 1e-5f;

  // Unfused: the norm into the activation, then one cast of it per consumer.
  Tensor y_ref = named_zeros(shape, y_dtype, "y_ref"), rstd_ref = named_zeros({rows}, DType::f32, "rstd_ref");
  ops::rmsnorm_forward(backend_ctx(), x, w, eps, y_ref, rstd_ref);
  std::vector<Fp8Tensor> refs;
  for (const CastSpec& c : specs) {
    refs.push_back(descriptor(shape, c));
    ops::cast_to_fp8(backend_ctx(), y_ref, refs.back());
  }

  Tensor y = named_zeros(shape, y_dtype, "y"), rstd = named_zeros({rows}, DType::f32, "rstd");
  Fp8Casts casts;
  for (const CastSpec& c : specs) casts.out[casts.count++] = descriptor(shape, c);
  ops::rmsnorm_forward_fp8(backend_ctx(), x, w, eps, y, rstd, casts);

  expect_same_bytes(y, y_ref, "y");
  expect_same_bytes(rstd, rstd_ref, "rstd");
  for (std::size_t i = 0; i < specs.size(); ++i) expect_same_cast(casts.out[i], refs[i], "cast " + std::to_string(i));
}

void check_swiglu(const Shape& shape, DType in_dtype, DType out_dtype, const CastSpec& spec, std::uint64_t seed,
                  bool with_nan) {
  SCOPED_TRACE(std::string("swiglu in ") + std::string(dtype_name(in_dtype)) + ", out " + std::string(dtype_name(out_dtype)) + ", numel " +
               std::to_string(shape_numel(shape)) + ", " + std::string(dtype_name(spec.format)) + " scale " +
               std::to_string(spec.scale));
  const auto n = static_cast<std::size_t>(shape_numel(shape));
  std::vector<double> gv = random_vector(n, seed, 3.0);
  if (with_nan) gv[n / 3] = std::numeric_limits<double>::quiet_NaN();
  const Tensor gate = tensor_from(shape, gv, in_dtype);
  const Tensor up = random_tensor(shape, seed + 1, in_dtype, "up", 2.0);

  Tensor out_ref = named_zeros(shape, out_dtype, "out_ref");
  ops::swiglu_forward(backend_ctx(), gate, up, out_ref);
  Fp8Tensor ref = descriptor(shape, spec);
  ops::cast_to_fp8(backend_ctx(), out_ref, ref);

  Tensor out = named_zeros(shape, out_dtype, "out");
  Fp8Tensor q = descriptor(shape, spec);
  ops::swiglu_forward_fp8(backend_ctx(), gate, up, out, q);

  expect_same_bytes(out, out_ref, "out");
  expect_same_cast(q, ref, "cast");
}

const std::vector<Shape> kShapes = {{1, 1}, {3, 5}, {7, 33}, {2, 3, 17}, {13, 129}, {5, 1000}, {70, 96}};

}  // namespace

TEST_P(Fp8Fusions, RmsnormFp8EqualsRmsnormThenOneCastPerConsumer) {
  std::uint64_t seed = 100;
  for (const Shape& shape : kShapes)
    for (DType x_dtype : {DType::f32, DType::bf16})
      for (DType y_dtype : {DType::bf16, DType::f32}) {
        check_rmsnorm(shape, x_dtype, y_dtype, kThreeCasts, seed++, 2.0, false);
        check_rmsnorm(shape, x_dtype, y_dtype, {kThreeCasts[1], kThreeCasts[0]}, seed++, 0.01, false);
        check_rmsnorm(shape, x_dtype, y_dtype, {{DType::fp8_e5m2, 3.0e-3f, true, 0.0f}}, seed++, 50.0, false);
      }
  // Saturation (scale far above the range) and a NaN row.
  check_rmsnorm({9, 40}, DType::bf16, DType::bf16, {{DType::fp8_e4m3, 3.0e4f, true, 0.0f}}, 7, 1.0, false);
  check_rmsnorm({9, 40}, DType::f32, DType::bf16, kThreeCasts, 8, 1.0, true);
}

TEST_P(Fp8Fusions, SwigluFp8EqualsSwigluThenCast) {
  std::uint64_t seed = 300;
  const std::vector<CastSpec> specs = {{DType::fp8_e4m3, 37.3f, true, 0.75f},
                                       {DType::fp8_e5m2, 1000.1f, true, 3.5f},
                                       {DType::fp8_e4m3, 0.0371f, false, 0.0f},
                                       {DType::fp8_e4m3, 5.0e3f, true, 0.0f}};
  const std::vector<Shape> shapes = {{1}, {3, 5}, {7, 33}, {2, 3, 17}, {3 * 4096 + 17}, {9, 1001}};
  for (const Shape& shape : shapes)
    for (DType in_dtype : {DType::f32, DType::bf16})
      for (DType out_dtype : {DType::bf16, DType::f32})
        for (const CastSpec& spec : specs) check_swiglu(shape, in_dtype, out_dtype, spec, seed++, false);
  check_swiglu({5, 31}, DType::bf16, DType::bf16, specs[0], 9, true);
}

// The amax is the stored activation's: with a bf16 activation it is a bf16
// value (the unfused cast read the rounded y), not the f32 the norm computed.
TEST_P(Fp8Fusions, AmaxIsTakenFromTheRoundedActivation) {
  const Shape shape{4, 37};
  Tensor x = random_tensor(shape, 5, DType::f32, "x", 3.0), w = random_tensor({37}, 6, DType::f32, "w", 1.3);
  Tensor y = named_zeros(shape, DType::bf16, "y"), rstd = named_zeros({4}, DType::f32, "rstd");
  Fp8Casts casts;
  casts.out[casts.count++] = descriptor(shape, {DType::fp8_e4m3, 1.0f, true, 0.0f});
  ops::rmsnorm_forward_fp8(backend_ctx(), x, w, 1e-6f, y, rstd, casts);
  const float amax = read_floats(casts.out[0].amax)[0];
  float want = 0.0f;
  for (float v : read_floats(y)) want = std::max(want, std::fabs(v));
  EXPECT_EQ(amax, want);
  EXPECT_EQ(amax, to_float(to_bf16(amax))) << "a bf16 value";
}

TEST_P(Fp8Fusions, RefusesBadDescriptorsNamingThem) {
  const Shape shape{3, 8};
  Tensor x = random_tensor(shape, 1, DType::f32, "x"), w = random_tensor({8}, 2, DType::f32, "w");
  Tensor y = named_zeros(shape, DType::bf16, "y"), rstd = named_zeros({3}, DType::f32, "rstd");
  Fp8Casts none;
  expect_error_mentioning([&] { ops::rmsnorm_forward_fp8(backend_ctx(), x, w, 1e-6f, y, rstd, none); },
                          {"rmsnorm_forward_fp8", "0 casts"});
  Fp8Casts with_t;
  with_t.out[with_t.count++] = descriptor(shape, {DType::fp8_e4m3, 1.0f, true, 0.0f});
  with_t.out[0].data_t = named_zeros({8, 3}, DType::fp8_e4m3, "data_t");
  expect_error_mentioning([&] { ops::rmsnorm_forward_fp8(backend_ctx(), x, w, 1e-6f, y, rstd, with_t); },
                          {"casts.out[0].data_t", "transposed copy"});
  Fp8Tensor wrong_shape = descriptor({3, 9}, {DType::fp8_e4m3, 1.0f, true, 0.0f});
  expect_error_mentioning([&] { ops::swiglu_forward_fp8(backend_ctx(), x, x, y, wrong_shape); },
                          {"swiglu_forward_fp8", "cast.data"});
}
