// Host chunked linear-head cross entropy against a float64 full-logits
// reference.
//
// Forward: losses and lse compared with the naive computation over the whole
// [N, V] logits in double. Backward: the analytic gradient of
// sum_i loss_scale * losses[i] is compared, separately for h, w and bias,
// with the central difference of that scalar along a random direction
// (op_test_util.hpp). dw and dbias start from random values to check they
// accumulate (+=); dh starts from garbage to check it is written (=).
// V = 37 with chunk 8 leaves a partial last chunk; some rows are ignored.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

#include "base/error.hpp"
#include "kernels/ops.hpp"
#include "support/op_test_util.hpp"

using namespace ftrain;

FTRAIN_BACKEND_TEST_SUITE(CrossEntropy);
using ftrain::testing::backend_ctx;
using ftrain::testing::backend_synchronize;
using ftrain::testing::directional_derivative;
using ftrain::testing::read_floats;
using ftrain::testing::dot;
using ftrain::testing::random_vector;
using ftrain::testing::relative_error;
using ftrain::testing::tensor_from;
using ftrain::testing::to_doubles;

namespace {

struct Case {
  std::int64_t rows, channels, vocab, chunk;
  bool with_bias;
  DType dtype;  // of h, w, bias, dh, dw, dbias
  std::string describe() const {
    std::ostringstream s;
    s << "N=" << rows << " C=" << channels << " V=" << vocab << " chunk=" << chunk << (with_bias ? " bias" : "")
      << " " << dtype_name(dtype);
    return s.str();
  }
};

struct Reference {
  std::vector<double> losses, lse;
};

Reference reference_cross_entropy(const Case& c, const std::vector<double>& h, const std::vector<double>& w,
                                  const std::vector<double>* bias, const std::vector<std::int32_t>& targets) {
  Reference ref;
  std::vector<double> logits(static_cast<std::size_t>(c.vocab));
  for (std::int64_t i = 0; i < c.rows; ++i) {
    double max_logit = -1e300;
    for (std::int64_t v = 0; v < c.vocab; ++v) {
      double z = bias ? (*bias)[v] : 0.0;
      for (std::int64_t k = 0; k < c.channels; ++k) z += h[i * c.channels + k] * w[v * c.channels + k];
      logits[v] = z;
      max_logit = std::max(max_logit, z);
    }
    double sum = 0;
    for (double z : logits) sum += std::exp(z - max_logit);
    const double lse = max_logit + std::log(sum);
    ref.lse.push_back(lse);
    ref.losses.push_back(targets[i] == kIgnoreIndex ? 0.0 : lse - logits[targets[i]]);
  }
  return ref;
}

std::vector<double> stored(const std::vector<double>& x, DType dtype) {
  std::vector<double> r(x.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    r[i] = dtype == DType::bf16 ? round_to_bf16(static_cast<float>(x[i])) : static_cast<float>(x[i]);
  return r;
}

std::vector<std::int32_t> make_targets(const Case& c, std::uint64_t seed) {
  std::vector<std::int32_t> t(static_cast<std::size_t>(c.rows));
  for (std::int64_t i = 0; i < c.rows; ++i) {
    const auto bits = rng::bits(seed, 3, static_cast<std::uint64_t>(i));
    t[i] = (i % 5 == 2) ? kIgnoreIndex : static_cast<std::int32_t>(bits % static_cast<std::uint64_t>(c.vocab));
  }
  t.back() = static_cast<std::int32_t>(c.vocab - 1);  // a target in the partial last chunk
  return t;
}

Tensor targets_tensor(const std::vector<std::int32_t>& t) {
  Tensor out = Tensor::empty({static_cast<std::int64_t>(t.size())}, DType::i32, Device::host, "targets");
  std::copy(t.begin(), t.end(), out.data_as<std::int32_t>());
  return out;
}

struct Tolerances {
  double forward, gradient;
};

void check_case(const Case& c, Tolerances tol, std::uint64_t seed) {
  SCOPED_TRACE(c.describe());
  const auto nh = static_cast<std::size_t>(c.rows * c.channels), nw = static_cast<std::size_t>(c.vocab * c.channels);
  const std::vector<double> h = stored(random_vector(nh, seed + 1), c.dtype);
  const std::vector<double> w = stored(random_vector(nw, seed + 2, 0.5), c.dtype);
  const std::vector<double> bias = stored(random_vector(static_cast<std::size_t>(c.vocab), seed + 3), c.dtype);
  const std::vector<std::int32_t> targets = make_targets(c, seed);
  const std::vector<double>* bias_ref = c.with_bias ? &bias : nullptr;

  Tensor th = tensor_from({c.rows, c.channels}, h, c.dtype), tw = tensor_from({c.vocab, c.channels}, w, c.dtype);
  Tensor tb = tensor_from({c.vocab}, bias, c.dtype), tt = targets_tensor(targets);
  const Tensor* tb_ptr = c.with_bias ? &tb : nullptr;
  Tensor losses = Tensor::empty({c.rows}, DType::f32), lse = Tensor::empty({c.rows}, DType::f32);
  ops::cross_entropy_forward(backend_ctx(), th, tw, tb_ptr, tt, c.chunk, losses, lse);

  const Reference ref = reference_cross_entropy(c, h, w, bias_ref, targets);
  const std::vector<double> got_losses = to_doubles(losses), got_lse = to_doubles(lse);
  EXPECT_LT(relative_error(got_losses, ref.losses), tol.forward) << "losses";
  EXPECT_LT(relative_error(got_lse, ref.lse), tol.forward) << "lse";
  for (std::int64_t i = 0; i < c.rows; ++i) {
    EXPECT_NEAR(got_losses[i], ref.losses[i], tol.forward * std::max(1.0, std::abs(ref.losses[i]))) << "row " << i;
    if (targets[i] == kIgnoreIndex) EXPECT_EQ(got_losses[i], 0.0) << "ignored row " << i;
  }

  const float loss_scale = 0.75f / static_cast<float>(c.rows);
  const std::vector<double> dw0 = stored(random_vector(nw, seed + 4, 0.1), c.dtype);
  const std::vector<double> db0 = stored(random_vector(static_cast<std::size_t>(c.vocab), seed + 5, 0.1), c.dtype);
  Tensor dh = tensor_from({c.rows, c.channels}, random_vector(nh, seed + 6), c.dtype);
  Tensor dw = tensor_from({c.vocab, c.channels}, dw0, c.dtype), db = tensor_from({c.vocab}, db0, c.dtype);
  ops::cross_entropy_backward(backend_ctx(), th, tw, tb_ptr, tt, lse, tensor_from({1}, {loss_scale}), c.chunk, dh, dw, c.with_bias ? &db : nullptr);

  // Increments of the accumulated gradients.
  std::vector<double> dw_added = to_doubles(dw), db_added = to_doubles(db);
  for (std::size_t e = 0; e < nw; ++e) dw_added[e] -= dw0[e];
  for (std::size_t e = 0; e < db_added.size(); ++e) db_added[e] -= db0[e];
  const std::vector<double> dh_got = to_doubles(dh);
  for (std::int64_t i = 0; i < c.rows; ++i) {
    if (targets[i] != kIgnoreIndex) continue;
    for (std::int64_t k = 0; k < c.channels; ++k) EXPECT_EQ(dh_got[i * c.channels + k], 0.0) << "ignored row " << i;
  }

  auto objective = [&](const std::vector<double>& hx, const std::vector<double>& wx, const std::vector<double>* bx) {
    const Reference r = reference_cross_entropy(c, hx, wx, bx, targets);
    double total = 0;
    for (double l : r.losses) total += loss_scale * l;
    return total;
  };
  auto magnitude = [](const std::vector<double>& a, const std::vector<double>& b) {
    double s = 0;
    for (std::size_t i = 0; i < a.size(); ++i) s += std::abs(a[i] * b[i]);
    return std::max(s, 1e-3);
  };
  const std::vector<double> uh = random_vector(nh, seed + 7), uw = random_vector(nw, seed + 8);
  const double fd_h =
      directional_derivative([&](const std::vector<double>& x) { return objective(x, w, bias_ref); }, h, uh);
  const double fd_w =
      directional_derivative([&](const std::vector<double>& x) { return objective(h, x, bias_ref); }, w, uw);
  EXPECT_LT(std::abs(dot(dh_got, uh) - fd_h) / magnitude(dh_got, uh), tol.gradient)
      << "dh: " << dot(dh_got, uh) << " vs " << fd_h;
  EXPECT_LT(std::abs(dot(dw_added, uw) - fd_w) / magnitude(dw_added, uw), tol.gradient)
      << "dw: " << dot(dw_added, uw) << " vs " << fd_w;
  if (c.with_bias) {
    const std::vector<double> ub = random_vector(bias.size(), seed + 9);
    const double fd_b = directional_derivative([&](const std::vector<double>& x) { return objective(h, w, &x); }, bias, ub);
    EXPECT_LT(std::abs(dot(db_added, ub) - fd_b) / magnitude(db_added, ub), tol.gradient)
        << "dbias: " << dot(db_added, ub) << " vs " << fd_b;
  } else {
    EXPECT_EQ(to_doubles(db), db0) << "dbias must be untouched without bias";
  }
}

constexpr Tolerances kF32{1e-5, 2e-5};
constexpr Tolerances kBf16{1e-2, 3e-2};

}  // namespace

TEST_P(CrossEntropy, PartialLastChunkWithAndWithoutBias) {
  std::uint64_t seed = 10;
  for (bool with_bias : {false, true}) check_case(Case{13, 16, 37, 8, with_bias, DType::f32}, kF32, seed += 20);
}

TEST_P(CrossEntropy, ChunkSizes) {
  std::uint64_t seed = 100;
  for (std::int64_t chunk : {1, 5, 37, 64}) check_case(Case{9, 8, 37, chunk, true, DType::f32}, kF32, seed += 20);
}

TEST_P(CrossEntropy, LargeLogitsStayFinite) {
  // Scaled-up activations: logits of a few hundred, where a non-online
  // logsumexp would overflow f32.
  const Case c{6, 8, 37, 8, false, DType::f32};
  std::vector<double> h = stored(random_vector(48, 5, 40.0), DType::f32), w = stored(random_vector(296, 6), DType::f32);
  const auto targets = make_targets(c, 7);
  Tensor losses = Tensor::empty({6}, DType::f32), lse = Tensor::empty({6}, DType::f32);
  Tensor th = tensor_from({6, 8}, h), tw = tensor_from({37, 8}, w), tt = targets_tensor(targets);
  ops::cross_entropy_forward(backend_ctx(), th, tw, nullptr, tt, 8, losses, lse);
  const Reference ref = reference_cross_entropy(c, h, w, nullptr, targets);
  EXPECT_LT(relative_error(to_doubles(lse), ref.lse), 1e-6);
  EXPECT_LT(relative_error(to_doubles(losses), ref.losses), 1e-5);
}

TEST_P(CrossEntropy, Bf16Storage) {
  std::uint64_t seed = 300;
  for (bool with_bias : {false, true}) check_case(Case{13, 16, 37, 8, with_bias, DType::bf16}, kBf16, seed += 20);
}

TEST_P(CrossEntropy, MixedF32GradientsForBf16Weights) {
  // bf16 h and w with f32 dw and dbias (the usual mixed-precision setup).
  const std::int64_t N = 7, C = 8, V = 37;
  Tensor h = tensor_from({N, C}, random_vector(N * C, 1), DType::bf16);
  Tensor w = tensor_from({V, C}, random_vector(V * C, 2), DType::bf16);
  Tensor b = tensor_from({V}, random_vector(V, 3), DType::bf16);
  Tensor t = targets_tensor({0, 36, kIgnoreIndex, 8, 9, 16, 3});
  Tensor losses = Tensor::empty({N}, DType::f32), lse = Tensor::empty({N}, DType::f32);
  ops::cross_entropy_forward(backend_ctx(), h, w, &b, t, 8, losses, lse);

  Tensor dh_bf16 = Tensor::zeros({N, C}, DType::bf16), dw_bf16 = Tensor::zeros({V, C}, DType::bf16),
         db_bf16 = Tensor::zeros({V}, DType::bf16);
  Tensor dh_f32 = Tensor::zeros({N, C}, DType::f32), dw_f32 = Tensor::zeros({V, C}, DType::f32),
         db_f32 = Tensor::zeros({V}, DType::f32);
  ops::cross_entropy_backward(backend_ctx(), h, w, &b, t, lse, tensor_from({1}, {1.0}), 8, dh_bf16, dw_bf16, &db_bf16);
  ops::cross_entropy_backward(backend_ctx(), h, w, &b, t, lse, tensor_from({1}, {1.0}), 8, dh_f32, dw_f32, &db_f32);
  EXPECT_LT(relative_error(to_doubles(dw_bf16), to_doubles(dw_f32)), 1e-2);
  EXPECT_LT(relative_error(to_doubles(db_bf16), to_doubles(db_f32)), 1e-2);
  EXPECT_LT(relative_error(to_doubles(dh_bf16), to_doubles(dh_f32)), 1e-2);
  // Softmax minus one-hot sums to zero over the vocabulary for every row.
  double total = 0;
  for (double x : to_doubles(db_f32)) total += x;
  EXPECT_NEAR(total, 0.0, 1e-5);
}

TEST_P(CrossEntropy, InvalidTargetThrowsNamingRowAndValue) {
  Tensor h = Tensor::zeros({4, 8}, DType::f32), w = Tensor::zeros({37, 8}, DType::f32);
  Tensor losses = Tensor::empty({4}, DType::f32), lse = Tensor::empty({4}, DType::f32);
  for (std::int32_t bad : {37, -1, 1000}) {
    Tensor t = targets_tensor({0, kIgnoreIndex, 36, bad});
    try {
      ops::cross_entropy_forward(backend_ctx(), h, w, nullptr, t, 8, losses, lse);
      backend_synchronize();
      FAIL() << "expected a throw for target " << bad;
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("row 3"), std::string::npos) << what;
      EXPECT_NE(what.find("target " + std::to_string(bad)), std::string::npos) << what;
    }
    Tensor dh = Tensor::zeros({4, 8}, DType::f32), dw = Tensor::zeros({37, 8}, DType::f32);
    EXPECT_THROW({ ops::cross_entropy_backward(backend_ctx(), h, w, nullptr, t, lse, tensor_from({1}, {1.0}), 8, dh, dw, nullptr); backend_synchronize(); }, Error);
  }
}

TEST_P(CrossEntropy, RejectsBadShapes) {
  Tensor h = Tensor::zeros({4, 8}, DType::f32), w = Tensor::zeros({37, 7}, DType::f32, Device::host, "w");
  Tensor t = targets_tensor({0, 1, 2, 3});
  Tensor losses = Tensor::empty({4}, DType::f32), lse = Tensor::empty({4}, DType::f32);
  EXPECT_THROW({ ops::cross_entropy_forward(backend_ctx(), h, w, nullptr, t, 8, losses, lse); backend_synchronize(); }, Error);
  Tensor w_ok = Tensor::zeros({37, 8}, DType::f32);
  EXPECT_THROW({ ops::cross_entropy_forward(backend_ctx(), h, w_ok, nullptr, t, 0, losses, lse); backend_synchronize(); }, Error);
  Tensor short_losses = Tensor::empty({3}, DType::f32);
  EXPECT_THROW({ ops::cross_entropy_forward(backend_ctx(), h, w_ok, nullptr, t, 8, short_losses, lse); backend_synchronize(); }, Error);
}

TEST_P(CrossEntropy, NanLogitReachesTheLoss) {
  // A NaN weight row makes column 5 NaN in every row, whatever the targets:
  // the softmax terms are summed, so a NaN must survive the exp (a clamped
  // fast exp would turn it into e^87 and hide the divergence).
  const Case c{4, 8, 37, 8, false, DType::f32};
  std::vector<double> h = stored(random_vector(32, 5), DType::f32), w = stored(random_vector(296, 6), DType::f32);
  for (int k = 0; k < 8; ++k) w[5 * 8 + k] = std::nan("");
  std::vector<std::int32_t> targets{0, 11, 36, 20};  // never column 5
  Tensor losses = Tensor::empty({4}, DType::f32), lse = Tensor::empty({4}, DType::f32);
  Tensor th = tensor_from({4, 8}, h), tw = tensor_from({37, 8}, w), tt = targets_tensor(targets);
  ops::cross_entropy_forward(backend_ctx(), th, tw, nullptr, tt, 8, losses, lse);
  backend_synchronize();
  for (const double loss : to_doubles(losses)) EXPECT_TRUE(std::isnan(loss)) << "loss " << loss;
}
