// Host flash attention against a float64 full-softmax reference.
//
// Forward: out and lse compared with the naive computation (the whole T x T
// score matrix in double). Backward: for each of q, k, v the analytic
// <dx, u> is compared with the central difference of <g, out(x + h u)> in
// double (op_test_util.hpp). Cases cover causal and full attention, GQA and
// MHA, T not a multiple of the tile, T spanning several tiles, D = 8 and 16,
// and tiles small and unequal (query 16 x key 8, 8 x 16) through the
// internal tiled entry point, so the online-softmax rescaling and the causal
// diagonal inside a tile are exercised many times per row; wide heads
// (D = 96 .. 256) and tall/wide tiles reach every branch of the op's split
// of large tile GEMMs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <vector>

#include "base/error.hpp"
#include "kernels/host/attention_tiled.hpp"
#include "kernels/ops.hpp"
#include "support/op_test_util.hpp"

using namespace ftrain;

FTRAIN_BACKEND_TEST_SUITE(Attention);
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
  std::int64_t batch, seq, q_heads, kv_heads, head_dim;
  bool causal;
  host::detail::AttentionTiles tiles;
  bool use_public_entry;  // ftrain::ops:: with the production tiles
  // Document id of each token, [B * T] (empty: no document mask).
  std::vector<std::int32_t> documents = {};

  std::string describe() const {
    std::ostringstream s;
    s << "B=" << batch << " T=" << seq << " Hq=" << q_heads << " Hkv=" << kv_heads << " D=" << head_dim
      << (causal ? " causal" : " full") << " tiles " << tiles.query << "x" << tiles.key
      << (use_public_entry ? " (ops::)" : "") << (documents.empty() ? "" : " document mask");
    return s.str();
  }
  Shape q_shape() const { return {batch, seq, q_heads, head_dim}; }
  Shape kv_shape() const { return {batch, seq, kv_heads, head_dim}; }
  double scale() const { return 1.0 / std::sqrt(static_cast<double>(head_dim)); }
};

struct Reference {
  std::vector<double> out, lse;
};

// The textbook definition: full scores, full softmax, in double.
Reference reference_attention(const Case& c, const std::vector<double>& q, const std::vector<double>& k,
                              const std::vector<double>& v) {
  const std::int64_t B = c.batch, T = c.seq, Hq = c.q_heads, Hkv = c.kv_heads, D = c.head_dim;
  const std::int64_t group = Hq / Hkv;
  Reference ref;
  ref.out.assign(static_cast<std::size_t>(B * T * Hq * D), 0.0);
  ref.lse.assign(static_cast<std::size_t>(B * Hq * T), 0.0);
  std::vector<double> scores(static_cast<std::size_t>(T));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < Hq; ++h)
      for (std::int64_t i = 0; i < T; ++i) {
        const std::int64_t g = h / group;
        const std::int64_t n_keys = c.causal ? i + 1 : T;
        // Another document's key: exp(-inf) = 0, the mask's definition.
        auto hidden = [&](std::int64_t j) {
          return !c.documents.empty() && c.documents[b * T + j] != c.documents[b * T + i];
        };
        double max_score = -std::numeric_limits<double>::infinity();
        for (std::int64_t j = 0; j < n_keys; ++j) {
          if (hidden(j)) {
            scores[j] = -std::numeric_limits<double>::infinity();
            continue;
          }
          double sc = 0;
          for (std::int64_t d = 0; d < D; ++d)
            sc += q[((b * T + i) * Hq + h) * D + d] * k[((b * T + j) * Hkv + g) * D + d];
          scores[j] = sc * c.scale();
          max_score = std::max(max_score, scores[j]);
        }
        double sum = 0;
        for (std::int64_t j = 0; j < n_keys; ++j) sum += std::exp(scores[j] - max_score);
        ref.lse[(b * Hq + h) * T + i] = max_score + std::log(sum);
        for (std::int64_t j = 0; j < n_keys; ++j) {
          const double p = std::exp(scores[j] - max_score) / sum;
          for (std::int64_t d = 0; d < D; ++d)
            ref.out[((b * T + i) * Hq + h) * D + d] += p * v[((b * T + j) * Hkv + g) * D + d];
        }
      }
  return ref;
}

// The case's document ids as the op takes them (on the backend's device).
Tensor documents_tensor(const Case& c) {
  if (c.documents.empty()) return Tensor();
  Tensor t = Tensor::empty({c.batch, c.seq}, DType::i32, Device::host, "documents");
  std::copy(c.documents.begin(), c.documents.end(), t.data_as<std::int32_t>());
  const Device d = c.use_public_entry ? backend_ctx().device() : Device::host;
  return d == Device::host ? t : to_device(t, d);
}

void run_forward(const Case& c, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse) {
  const auto scale = static_cast<float>(c.scale());
  const Tensor docs = documents_tensor(c);
  const Tensor* documents = docs.defined() ? &docs : nullptr;
  if (c.use_public_entry) {
    ops::attention_forward(backend_ctx(), q, k, v, c.causal, documents, scale, out, lse);
  } else {
    host::detail::attention_forward_tiled(q, k, v, c.causal, documents, scale, out, lse, c.tiles);
  }
}

void run_backward(const Case& c, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                  const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv) {
  const auto scale = static_cast<float>(c.scale());
  const Tensor docs = documents_tensor(c);
  const Tensor* documents = docs.defined() ? &docs : nullptr;
  if (c.use_public_entry) {
    ops::attention_backward(backend_ctx(), q, k, v, out, lse, dout, c.causal, documents, scale, dq, dk, dv);
  } else {
    host::detail::attention_backward_tiled(q, k, v, out, lse, dout, c.causal, documents, scale, dq, dk, dv,
                                           c.tiles);
  }
}

// Document ids of rows of `seq` tokens whose documents have the given
// lengths (the last one runs to the end of the row); one list per row.
std::vector<std::int32_t> packed_documents(std::int64_t seq, const std::vector<std::vector<std::int64_t>>& rows) {
  std::vector<std::int32_t> ids;
  for (const auto& lengths : rows) {
    std::int32_t id = 0;
    std::int64_t left = lengths.empty() ? seq : lengths[0];
    for (std::int64_t t = 0; t < seq; ++t) {
      while (left == 0 && static_cast<std::size_t>(id + 1) < lengths.size()) left = lengths[++id];
      ids.push_back(id);
      if (left > 0) --left;
    }
  }
  return ids;
}

// Rounds values to what a tensor of `dtype` stores, so the reference sees
// exactly the op's inputs.
std::vector<double> stored(const std::vector<double>& x, DType dtype) {
  if (dtype == DType::f32) {
    std::vector<double> r(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) r[i] = static_cast<float>(x[i]);
    return r;
  }
  std::vector<double> r(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) r[i] = round_to_bf16(static_cast<float>(x[i]));
  return r;
}

struct Tolerances {
  double forward, gradient;
};

void check_case(const Case& c, DType dtype, Tolerances tol, std::uint64_t seed) {
  SCOPED_TRACE(c.describe() + (dtype == DType::bf16 ? " bf16" : " f32"));
  const auto nq = static_cast<std::size_t>(shape_numel(c.q_shape()));
  const auto nkv = static_cast<std::size_t>(shape_numel(c.kv_shape()));
  const std::vector<double> q = stored(random_vector(nq, seed + 1), dtype);
  const std::vector<double> k = stored(random_vector(nkv, seed + 2), dtype);
  const std::vector<double> v = stored(random_vector(nkv, seed + 3), dtype);
  const std::vector<double> g = stored(random_vector(nq, seed + 4), dtype);

  Tensor tq = tensor_from(c.q_shape(), q, dtype), tk = tensor_from(c.kv_shape(), k, dtype),
         tv = tensor_from(c.kv_shape(), v, dtype), tg = tensor_from(c.q_shape(), g, dtype);
  Tensor out = Tensor::empty(c.q_shape(), dtype, Device::host, "out");
  Tensor lse = Tensor::empty({c.batch, c.q_heads, c.seq}, DType::f32, Device::host, "lse");
  run_forward(c, tq, tk, tv, out, lse);

  const Reference ref = reference_attention(c, q, k, v);
  EXPECT_LT(relative_error(to_doubles(out), ref.out), tol.forward) << "out";
  EXPECT_LT(relative_error(to_doubles(lse), ref.lse), tol.forward) << "lse";

  // Gradients are written (=): start from garbage to prove nothing is added.
  Tensor dq = tensor_from(c.q_shape(), random_vector(nq, seed + 5), dtype);
  Tensor dk = tensor_from(c.kv_shape(), random_vector(nkv, seed + 6), dtype);
  Tensor dv = tensor_from(c.kv_shape(), random_vector(nkv, seed + 7), dtype);
  run_backward(c, tq, tk, tv, out, lse, tg, dq, dk, dv);

  // d<g, out>/dx along u, for x = q, k, v in turn.
  const std::vector<double> uq = random_vector(nq, seed + 8), uk = random_vector(nkv, seed + 9),
                            uv = random_vector(nkv, seed + 10);
  const double fd_q = directional_derivative(
      [&](const std::vector<double>& x) { return dot(g, reference_attention(c, x, k, v).out); }, q, uq);
  const double fd_k = directional_derivative(
      [&](const std::vector<double>& x) { return dot(g, reference_attention(c, q, x, v).out); }, k, uk);
  const double fd_v = directional_derivative(
      [&](const std::vector<double>& x) { return dot(g, reference_attention(c, q, k, x).out); }, v, uv);
  const double an_q = dot(to_doubles(dq), uq), an_k = dot(to_doubles(dk), uk), an_v = dot(to_doubles(dv), uv);
  // Relative to the size of the terms summed, so a small derivative that is
  // a cancellation of large ones is judged fairly; absolute below 1, where
  // the true derivative is zero (T = 1: the softmax is constant in q and k).
  auto magnitude = [](const std::vector<double>& a, const std::vector<double>& b) {
    double s = 0;
    for (std::size_t i = 0; i < a.size(); ++i) s += std::abs(a[i] * b[i]);
    return std::max(s, 1.0);
  };
  EXPECT_LT(std::abs(an_q - fd_q) / magnitude(to_doubles(dq), uq), tol.gradient) << "dq: " << an_q << " vs " << fd_q;
  EXPECT_LT(std::abs(an_k - fd_k) / magnitude(to_doubles(dk), uk), tol.gradient) << "dk: " << an_k << " vs " << fd_k;
  EXPECT_LT(std::abs(an_v - fd_v) / magnitude(to_doubles(dv), uv), tol.gradient) << "dv: " << an_v << " vs " << fd_v;
}

constexpr Tolerances kF32{2e-6, 2e-5};
// bf16 stores out and the gradients rounded to 8 bits of mantissa.
constexpr Tolerances kBf16{1e-2, 1.5e-2};

}  // namespace

TEST_P(Attention, SmallUnequalTilesMatchReference) {
  std::uint64_t seed = 100;
  for (bool causal : {true, false})
    for (host::detail::AttentionTiles tiles : {host::detail::AttentionTiles{16, 8}, host::detail::AttentionTiles{8, 16}})
      for (std::int64_t D : {8, 16}) {
        // GQA (4 query heads over 2 kv heads), odd T that fills no tile.
        check_case(Case{2, 37, 4, 2, D, causal, tiles, false}, DType::f32, kF32, seed += 20);
      }
}

TEST_P(Attention, MultiHeadAndSingleKvHead) {
  std::uint64_t seed = 300;
  for (bool causal : {true, false}) {
    check_case(Case{2, 29, 3, 3, 8, causal, {8, 8}, false}, DType::f32, kF32, seed += 20);    // MHA
    check_case(Case{1, 23, 4, 1, 16, causal, {16, 4}, false}, DType::f32, kF32, seed += 20);  // MQA
  }
}

TEST_P(Attention, ProductionTilesAcrossTileBoundary) {
  std::uint64_t seed = 500;
  for (bool causal : {true, false}) {
    check_case(Case{2, 70, 4, 2, 16, causal, {}, true}, DType::f32, kF32, seed += 20);
    check_case(Case{1, 37, 2, 2, 8, causal, {}, true}, DType::f32, kF32, seed += 20);
  }
}

TEST_P(Attention, WideHeadsSplitTileGemms) {
  // 64 x 64 x D tile products above OpenBLAS' single-thread volume are split
  // along k or n inside the op: D = 96 splits once, D = 256 twice.
  std::uint64_t seed = 600;
  for (std::int64_t D : {96, 256}) check_case(Case{1, 70, 2, 1, D, true, {}, true}, DType::f32, kF32, seed += 20);
  check_case(Case{1, 70, 2, 2, 128, false, {}, true}, DType::f32, kF32, seed += 20);
  // Tall and wide tiles reach the other split branches (transposed A split
  // along k, transposed B split along n).
  check_case(Case{1, 300, 1, 1, 64, true, {128, 64}, false}, DType::f32, kF32, seed += 20);
  check_case(Case{1, 300, 1, 1, 64, false, {32, 256}, false}, DType::f32, kF32, seed += 20);
}

TEST_P(Attention, SingleTokenSequence) {
  check_case(Case{2, 1, 2, 1, 8, true, {}, true}, DType::f32, kF32, 700);
}

TEST_P(Attention, Bf16Storage) {
  std::uint64_t seed = 800;
  for (bool causal : {true, false}) {
    check_case(Case{2, 37, 4, 2, 16, causal, {16, 8}, false}, DType::bf16, kBf16, seed += 20);
    check_case(Case{1, 70, 2, 2, 8, causal, {}, true}, DType::bf16, kBf16, seed += 20);
  }
}

// Packed windows: causal and same-document. Documents shorter than a tile,
// boundaries inside tiles and on tile edges, whole key tiles skipped; GQA,
// MHA, a one-token document, and the full (non-causal) mask too.
TEST_P(Attention, DocumentMaskMatchesReference) {
  std::uint64_t seed = 900;
  const std::vector<std::int32_t> docs37 = packed_documents(37, {{5, 1, 16, 15}, {8, 8, 21}});
  for (bool causal : {true, false})
    for (host::detail::AttentionTiles tiles : {host::detail::AttentionTiles{16, 8}, host::detail::AttentionTiles{8, 16}}) {
      check_case(Case{2, 37, 4, 2, 8, causal, tiles, false, docs37}, DType::f32, kF32, seed += 20);  // GQA
      check_case(Case{2, 37, 3, 3, 16, causal, tiles, false, docs37}, DType::f32, kF32, seed += 20);  // MHA
    }
  // Production tiles through ops::, four documents of a 150-token window.
  check_case(Case{1, 150, 4, 2, 16, true, {}, true, packed_documents(150, {{40, 30, 64, 16}})}, DType::f32, kF32, 990);
  check_case(Case{2, 37, 4, 2, 16, true, {16, 8}, false, docs37}, DType::bf16, kBf16, 995);
}

// One document per row is exactly no mask, bit for bit (the same tiles run).
TEST(AttentionDocumentMask, OneDocumentIsNoMask) {
  const Case plain{2, 45, 4, 2, 16, true, {16, 8}, false};
  Case one_document = plain;
  one_document.documents.assign(2 * 45, 7);
  const auto nq = static_cast<std::size_t>(shape_numel(plain.q_shape()));
  const auto nkv = static_cast<std::size_t>(shape_numel(plain.kv_shape()));
  Tensor q = tensor_from(plain.q_shape(), random_vector(nq, 1)), k = tensor_from(plain.kv_shape(), random_vector(nkv, 2)),
         v = tensor_from(plain.kv_shape(), random_vector(nkv, 3));
  Tensor out_a = Tensor::empty(plain.q_shape(), DType::f32), out_b = Tensor::empty(plain.q_shape(), DType::f32);
  Tensor lse_a = Tensor::empty({2, 4, 45}, DType::f32), lse_b = Tensor::empty({2, 4, 45}, DType::f32);
  run_forward(plain, q, k, v, out_a, lse_a);
  run_forward(one_document, q, k, v, out_b, lse_b);
  EXPECT_EQ(to_doubles(out_a), to_doubles(out_b));
  EXPECT_EQ(to_doubles(lse_a), to_doubles(lse_b));
}

TEST(AttentionDocumentMask, RejectsDecreasingIds) {
  Case c{1, 8, 1, 1, 8, true, {4, 4}, false, {0, 0, 1, 1, 0, 0, 1, 1}};
  Tensor q = tensor_from(c.q_shape(), random_vector(8 * 8, 1));
  Tensor out = Tensor::empty(c.q_shape(), DType::f32), lse = Tensor::empty({1, 1, 8}, DType::f32);
  try {
    run_forward(c, q, q, q, out, lse);
    FAIL() << "expected a throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("decrease in row 0 at token 4"), std::string::npos) << e.what();
  }
}

// Host internals (tile sizes of the host kernel): not a backend test.
TEST(AttentionHostTiles, TileSizeDoesNotChangeResult) {
  const Case base{1, 45, 2, 1, 16, true, {}, false};
  const auto n = static_cast<std::size_t>(shape_numel(base.q_shape()));
  const auto nkv = static_cast<std::size_t>(shape_numel(base.kv_shape()));
  Tensor q = tensor_from(base.q_shape(), random_vector(n, 1)), k = tensor_from(base.kv_shape(), random_vector(nkv, 2)),
         v = tensor_from(base.kv_shape(), random_vector(nkv, 3));
  std::vector<std::vector<double>> outs;
  for (host::detail::AttentionTiles tiles :
       {host::detail::AttentionTiles{64, 64}, host::detail::AttentionTiles{1, 1}, host::detail::AttentionTiles{7, 5}}) {
    Tensor out = Tensor::empty(base.q_shape(), DType::f32), lse = Tensor::empty({1, 2, 45}, DType::f32);
    host::detail::attention_forward_tiled(q, k, v, true, nullptr, 0.25f, out, lse, tiles);
    outs.push_back(to_doubles(out));
  }
  EXPECT_LT(relative_error(outs[1], outs[0]), 1e-6);
  EXPECT_LT(relative_error(outs[2], outs[0]), 1e-6);
}

TEST_P(Attention, RejectsBadShapes) {
  Tensor q = Tensor::zeros({1, 4, 3, 8}, DType::f32, Device::host, "q");
  Tensor k = Tensor::zeros({1, 4, 2, 8}, DType::f32, Device::host, "k");  // 3 % 2 != 0
  Tensor out = Tensor::zeros({1, 4, 3, 8}, DType::f32), lse = Tensor::zeros({1, 3, 4}, DType::f32);
  EXPECT_THROW({ ops::attention_forward(backend_ctx(), q, k, k, true, nullptr, 1.0f, out, lse); backend_synchronize(); }, Error);

  Tensor k_ok = Tensor::zeros({1, 4, 1, 8}, DType::f32);
  Tensor bad_lse = Tensor::zeros({1, 4, 3}, DType::f32, Device::host, "lse");
  try {
    ops::attention_forward(backend_ctx(), q, k_ok, k_ok, true, nullptr, 1.0f, out, bad_lse);
    backend_synchronize();
    FAIL() << "expected a throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lse"), std::string::npos) << e.what();
  }
  Tensor int_q = Tensor::zeros({1, 4, 3, 8}, DType::i32);
  EXPECT_THROW({ ops::attention_forward(backend_ctx(), int_q, k_ok, k_ok, true, nullptr, 1.0f, out, lse); backend_synchronize(); }, Error);
}
