// host add, add_inplace, scale_inplace, fill, cast, sum, sum_squares: values,
// aliasing, bf16 rounding, fp8 saturation, double accumulation, the shared
// blocked summation order (kernels/math/reduction.hpp), errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "host_op_checks.hpp"
#include "kernels/ops.hpp"

using namespace ftrain;
using namespace ftrain::testing;

FTRAIN_BACKEND_TEST_SUITE(Elementwise);

TEST_P(Elementwise, AddAndAliasing) {
  const Shape shape{3, 3001};  // two chunks, odd tail
  Tensor a = random_tensor(shape, 1, DType::f32, "a"), b = random_tensor(shape, 2, DType::f32, "b");
  const auto av = to_doubles(a), bv = to_doubles(b);
  std::vector<double> sum(av.size());
  for (std::size_t i = 0; i < sum.size(); ++i) sum[i] = static_cast<float>(av[i] + bv[i]);
  Tensor out = named_zeros(shape, DType::f32, "out");
  ops::add(backend_ctx(), a, b, out);
  EXPECT_EQ(to_doubles(out), sum);
  Tensor a2 = a.clone(), b2 = b.clone();
  ops::add(backend_ctx(), a2, b, a2);
  EXPECT_EQ(to_doubles(a2), sum) << "out aliases a";
  ops::add(backend_ctx(), a, b2, b2);
  EXPECT_EQ(to_doubles(b2), sum) << "out aliases b";

  // bf16 inputs, bf16 output aliasing an input: one rounding of the f32 sum.
  Tensor a16 = random_tensor(shape, 1, DType::bf16, "a16"), b16 = random_tensor(shape, 2, DType::bf16, "b16");
  const auto a16v = to_doubles(a16), b16v = to_doubles(b16);
  ops::add(backend_ctx(), a16, b16, a16);
  const auto got = to_doubles(a16);
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(got[i], round_to_bf16(static_cast<float>(a16v[i] + b16v[i]))) << "element " << i;

  Tensor wrong = named_zeros({3001, 3}, DType::f32, "transposed");
  expect_error_mentioning([&] { ops::add(backend_ctx(), a, wrong, out); }, {"add", "transposed"});
}

TEST_P(Elementwise, AddInplaceScaleFill) {
  Tensor acc = random_tensor({5000}, 1, DType::f32, "grad_acc");
  Tensor x = random_tensor({50, 100}, 2, DType::bf16, "micro_grad");  // same numel, other shape
  const auto a0 = to_doubles(acc), xv = to_doubles(x);
  ops::add_inplace(backend_ctx(), acc, x);
  const auto a1 = to_doubles(acc);
  for (std::size_t i = 0; i < a1.size(); ++i) ASSERT_EQ(a1[i], static_cast<float>(a0[i] + xv[i]));
  ops::scale_inplace(backend_ctx(), acc, 0.25f);
  const auto a2 = to_doubles(acc);
  for (std::size_t i = 0; i < a2.size(); ++i) ASSERT_EQ(a2[i], static_cast<float>(a1[i] * 0.25));

  Tensor acc16 = random_tensor({7}, 3, DType::bf16, "acc16");
  const auto c0 = to_doubles(acc16);
  ops::add_inplace(backend_ctx(), acc16, tensor_from({7}, std::vector<double>(7, 1.0)));
  for (std::size_t i = 0; i < 7; ++i) EXPECT_EQ(to_doubles(acc16)[i], round_to_bf16(static_cast<float>(c0[i] + 1.0)));

  Tensor short_x = named_zeros({4999}, DType::f32, "short");
  expect_error_mentioning([&] { ops::add_inplace(backend_ctx(), acc, short_x); }, {"add_inplace", "short"});

  for (const DType dtype : {DType::f32, DType::bf16, DType::f16, DType::fp8_e4m3, DType::fp8_e5m2}) {
    Tensor t = Tensor::empty({4099}, dtype);
    ops::fill(backend_ctx(), t, 1.5f);
    EXPECT_EQ(to_doubles(t), std::vector<double>(4099, 1.5)) << dtype_name(dtype);
  }
  Tensor e4 = Tensor::empty({3}, DType::fp8_e4m3);
  ops::fill(backend_ctx(), e4, 1000.0f);
  EXPECT_EQ(to_doubles(e4), std::vector<double>(3, 448.0)) << "fill saturates like cast";
  Tensor ints = named_zeros({3}, DType::i32, "ids");
  expect_error_mentioning([&] { ops::fill(backend_ctx(), ints, 1.0f); }, {"fill", "ids"});
}

TEST_P(Elementwise, CastRoundsAndSaturates) {
  // bf16: round to nearest even. 1 + 2^-8 is halfway between 1 and 1 + 2^-7
  // (ties to the even 1); 1 + 3 * 2^-8 rounds up to 1 + 2^-6.
  const std::vector<double> values{1.0 + std::ldexp(1.0, -8), 1.0 + 3 * std::ldexp(1.0, -8), -3.14159, 1e-3};
  Tensor src = tensor_from({4}, values);
  Tensor to16 = named_zeros({2, 2}, DType::bf16, "to16");
  ops::cast(backend_ctx(), src, to16);
  const auto b = to_doubles(to16);
  EXPECT_EQ(b[0], 1.0);
  EXPECT_EQ(b[1], 1.0 + std::ldexp(1.0, -6));
  EXPECT_EQ(b[2], -3.140625);
  EXPECT_EQ(b[3], static_cast<double>(round_to_bf16(1e-3f)));

  // fp8: saturating, NaN stays NaN, round to nearest even on the grid.
  Tensor big = tensor_from({5}, {1e6, -1e6, 464.0, 0.0, 17.0});
  big.data_as<float>()[3] = std::numeric_limits<float>::quiet_NaN();
  Tensor e4 = named_zeros({5}, DType::fp8_e4m3, "e4");
  ops::cast(backend_ctx(), big, e4);
  const auto e4v = to_doubles(e4);
  EXPECT_EQ(e4v[0], 448.0);
  EXPECT_EQ(e4v[1], -448.0);
  EXPECT_EQ(e4v[2], 448.0);  // halfway 448 / 480 rounds to even mantissa, and 480 does not exist anyway
  EXPECT_TRUE(std::isnan(e4v[3]));
  EXPECT_EQ(e4v[4], 16.0);  // 17 is halfway between 16 and 18: ties to even (16)
  Tensor e5 = named_zeros({5}, DType::fp8_e5m2, "e5");
  ops::cast(backend_ctx(), big, e5);
  EXPECT_EQ(to_doubles(e5)[0], 57344.0);
  EXPECT_EQ(to_doubles(e5)[1], -57344.0);
  // Infinity saturates too.
  Tensor inf = tensor_from({1}, {0.0});
  inf.data_as<float>()[0] = std::numeric_limits<float>::infinity();
  Tensor inf8 = named_zeros({1}, DType::fp8_e4m3, "inf8");
  ops::cast(backend_ctx(), inf, inf8);
  EXPECT_EQ(to_doubles(inf8)[0], 448.0);

  // Between non-f32 dtypes, and back: values on the fp8 grid survive.
  Tensor back16 = named_zeros({5}, DType::bf16, "back16");
  ops::cast(backend_ctx(), e4, back16);
  EXPECT_EQ(to_doubles(back16)[0], 448.0);
  EXPECT_EQ(to_doubles(back16)[4], 16.0);
  Tensor f16t = named_zeros({5}, DType::f16, "f16");
  ops::cast(backend_ctx(), back16, f16t);
  EXPECT_EQ(to_doubles(f16t)[4], 16.0);

  // Long cast across chunks equals element-wise conversion.
  Tensor many = random_tensor({9000}, 4, DType::f32, "many", 100.0);
  Tensor many8 = named_zeros({9000}, DType::fp8_e5m2, "many8");
  ops::cast(backend_ctx(), many, many8);
  const auto mv = read_floats(many);
  const auto m8 = to_doubles(many8);
  for (std::size_t i = 0; i < mv.size(); ++i) ASSERT_EQ(m8[i], to_float(to_fp8_e5m2(mv[i]))) << i;

  // Same dtype copies bits; integer copies work, integer <-> float does not.
  Tensor ids = named_zeros({3}, DType::i32, "ids");
  ids.data_as<std::int32_t>()[1] = 42;
  Tensor ids2 = named_zeros({3}, DType::i32, "ids2");
  ops::cast(backend_ctx(), ids, ids2);
  EXPECT_EQ(read_floats(ids2)[1], 42.0f);
  Tensor three16 = named_zeros({3}, DType::bf16, "three16");
  expect_error_mentioning([&] { ops::cast(backend_ctx(), ids, three16); }, {"cast", "ids", "three16"});
  Tensor wrong = named_zeros({3}, DType::bf16, "three");
  expect_error_mentioning([&] { ops::cast(backend_ctx(), src, wrong); }, {"cast", "three", "4 elements"});
}

TEST_P(Elementwise, SumSquaresInDouble) {
  Tensor x = random_tensor({3, 4567}, 1, DType::f32, "grads", 3.0);
  double expect = 0;
  for (float v : read_floats(x)) expect += static_cast<double>(v) * v;
  EXPECT_NEAR(ops::sum_squares(backend_ctx(), x), expect, 1e-12 * expect);
  // f32 accumulation would lose the small terms next to a big one: 1e6 has
  // an f32 ulp of 0.0625, so adding 1e-6 ten thousand times would change nothing.
  std::vector<double> skewed(10001, 1e-3);
  skewed[0] = 1e3;
  Tensor s = tensor_from({10001}, skewed);
  const double small = static_cast<double>(1e-3f) * static_cast<double>(1e-3f);
  EXPECT_NEAR(ops::sum_squares(backend_ctx(), s), 1e6 + 10000 * small, 1e-6);
  Tensor b = random_tensor({777}, 2, DType::bf16, "g16");
  double expect_b = 0;
  for (float v : read_floats(b)) expect_b += static_cast<double>(v) * v;
  EXPECT_NEAR(ops::sum_squares(backend_ctx(), b), expect_b, 1e-12 * expect_b);
  EXPECT_EQ(ops::sum_squares(backend_ctx(), Tensor::zeros({0}, DType::f32)), 0.0);
  Tensor ids = named_zeros({3}, DType::i32, "ids");
  expect_error_mentioning([&] { ops::sum_squares(backend_ctx(), ids); }, {"sum_squares", "ids"});
}

namespace {

// kernels/math/reduction.hpp's order, written out again with plain loops:
// chunks of 4096, 8 lanes per chunk (lane l: elements l, l + 8, ... below
// the last whole group of 8; lane 0 then the tail), lanes then chunks added
// in order from 0.0. The CUDA kernels add in this order too (two passes), so
// this is the number every backend must return, bit for bit.
double blocked_order_sum(const std::vector<double>& terms) {
  const std::size_t n = terms.size(), chunk = 4096;
  double total = 0.0;
  for (std::size_t begin = 0; begin < n; begin += chunk) {
    const std::size_t len = std::min(chunk, n - begin), whole = len - len % 8;
    double lanes[8] = {};
    for (std::size_t i = 0; i < whole; ++i) lanes[i % 8] += terms[begin + i];
    for (std::size_t i = whole; i < len; ++i) lanes[0] += terms[begin + i];
    double partial = 0.0;
    for (double l : lanes) partial += l;
    total += partial;
  }
  return total;
}

double index_order_sum(const std::vector<double>& terms) {
  double total = 0.0;
  for (double t : terms) total += t;
  return total;
}

// f32 values over 16 decades: the order of the f64 additions shows in the result.
std::vector<double> wide_range_values(std::size_t n, std::uint64_t seed) {
  std::vector<double> v = random_vector(n, seed, 1.0);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(v[i] * std::pow(10.0, static_cast<double>(i % 17) - 8.0));
  return v;
}

}  // namespace

TEST_P(Elementwise, SumAndSumSquaresAddInTheSharedBlockedOrder) {
  for (const std::size_t n : {0, 1, 7, 8, 9, 4095, 4096, 4097, 3 * 4096 + 13, 20000}) {
    SCOPED_TRACE("n " + std::to_string(n));
    const std::vector<double> values = wide_range_values(n, 11 + n);
    std::vector<double> squares(n);
    for (std::size_t i = 0; i < n; ++i) squares[i] = values[i] * values[i];  // exact: f32 times f32
    Tensor x = tensor_from({static_cast<std::int64_t>(n)}, values);
    const double want_squares = blocked_order_sum(squares);
    const double got_squares = ops::sum_squares(backend_ctx(), x);
    EXPECT_EQ(std::memcmp(&got_squares, &want_squares, sizeof got_squares), 0)
        << got_squares << " vs " << want_squares;
    if (n == 20000) ASSERT_NE(want_squares, index_order_sum(squares)) << "the data must tell the orders apart";
    Tensor out = named_zeros({1}, DType::f32, "sum");
    ops::sum(backend_ctx(), x, out);
    EXPECT_EQ(read_floats(out)[0], static_cast<float>(blocked_order_sum(values)));
  }
  // Where the order decides the f32 result: 2^54, seven 1s, -2^54, seven 1s.
  // In index order each 1 after 2^54 is lost (half an ulp, ties to even): 7;
  // lane 0 cancels +-2^54 and lanes 1..7 keep two 1s each: 14.
  std::vector<double> cancelling(16, 1.0);
  cancelling[0] = std::ldexp(1.0, 54);
  cancelling[8] = -std::ldexp(1.0, 54);
  ASSERT_EQ(index_order_sum(cancelling), 7.0);
  ASSERT_EQ(blocked_order_sum(cancelling), 14.0);
  Tensor c = tensor_from({16}, cancelling);
  Tensor out = named_zeros({1}, DType::f32, "loss");
  ops::sum(backend_ctx(), c, out);
  EXPECT_EQ(read_floats(out)[0], 14.0f);
}

TEST_P(Elementwise, SumIsInDouble) {
  Tensor out = named_zeros({1}, DType::f32, "loss");
  // A large first value then many small ones: an f32 accumulator would stay
  // at 1e8, the f64 one reaches 1e8 + 1000 (exact in f32: a multiple of 8).
  std::vector<double> skewed(1001, 1.0);
  skewed[0] = 1e8;
  Tensor big = tensor_from({1001}, skewed);
  ops::sum(backend_ctx(), big, out);
  EXPECT_EQ(read_floats(out)[0], 100001000.0f);
  Tensor x = named_zeros({3}, DType::bf16, "losses");
  Tensor wrong = named_zeros({2}, DType::f32, "two");
  expect_error_mentioning([&] { ops::sum(backend_ctx(), x, wrong); }, {"sum", "two"});
}
