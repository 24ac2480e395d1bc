// Ring attention's block ops on the host (op_list.hpp: attention_block_*):
// the attention of one block of queries against one block of keys and
// values, each token carrying its index in the whole sequence and its
// document id, so the causal bound and the document mask hold between
// blocks of a sequence split over ranks (math::attention_block_key_visible).
//
// Forward: one task per (batch, query head, query tile), the
// FlashAttention-2 recurrence over the key tiles (running max and sum,
// rescaled accumulator). A key tile none of whose keys any query of the tile
// sees is skipped (per tile: the smallest key position against the largest
// query position, and the tiles' document ranges).
//
// Merge: per row, the two blocks' (out, lse) combine as
// out = (e^(lse - m) out + e^(lse_b - m) out_b) / (e^(lse - m) + e^(lse_b - m)).
//
// Backward: one task per (batch, kv head), which owns the dk and dv rows of
// its head and the dq rows of its query heads (no atomics under a threaded
// Kokkos). P is recomputed from the FINAL lse (every block's keys), so the
// block's share of each gradient is exact: dV += P^T dO, dP = dO V^T,
// dS = P (dP - rowsum(dO O)), dQ += scale dS K, dK += scale dS^T Q.
//
// Written for correctness and clarity before speed: entry-wise masking and
// libm's exp (the single-sequence kernel, attention.cpp, is the tuned one).
#include <cblas.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "base/error.hpp"
#include "kernels/host/float_spans.hpp"
#include "kernels/host/host_ops.hpp"
#include "kernels/math/attention.hpp"

namespace ftrain::host {

namespace {

using HostRange = Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>;
constexpr float kMinusInfinity = -std::numeric_limits<float>::infinity();
constexpr std::int64_t kTile = 64;

float load(const void* base, DType dtype, std::int64_t i) {
  return dtype == DType::f32 ? static_cast<const float*>(base)[i] : to_float(static_cast<const bf16*>(base)[i]);
}

void store(void* base, DType dtype, std::int64_t i, float x) {
  if (dtype == DType::f32)
    static_cast<float*>(base)[i] = x;
  else
    static_cast<bf16*>(base)[i] = to_bf16(x);
}

void load_row(const void* base, DType dtype, std::int64_t offset, std::int64_t n, float factor, float* dst) {
  for (std::int64_t d = 0; d < n; ++d) dst[d] = load(base, dtype, offset + d) * factor;
}

// dst[offset + d] += src[d] * factor, in the tensor's storage.
void add_row(void* base, DType dtype, std::int64_t offset, std::int64_t n, const float* src, float factor) {
  for (std::int64_t d = 0; d < n; ++d) store(base, dtype, offset + d, load(base, dtype, offset + d) + src[d] * factor);
}

void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
          std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b,
              static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

// One side of a block: positions and (optional) document ids, [B, T].
struct BlockTokens {
  const std::int32_t* positions = nullptr;
  const std::int32_t* documents = nullptr;
  std::int64_t seq = 0;
  std::int32_t position(std::int64_t b, std::int64_t t) const { return positions[b * seq + t]; }
  std::int32_t document(std::int64_t b, std::int64_t t) const { return documents ? documents[b * seq + t] : 0; }
  // Smallest and largest position and document id of tokens [t0, t0 + n) of sample b.
  void range(std::int64_t b, std::int64_t t0, std::int64_t n, std::int32_t* pos, std::int32_t* doc) const {
    pos[0] = pos[1] = position(b, t0);
    doc[0] = doc[1] = document(b, t0);
    for (std::int64_t t = t0 + 1; t < t0 + n; ++t) {
      pos[0] = std::min(pos[0], position(b, t)), pos[1] = std::max(pos[1], position(b, t));
      doc[0] = std::min(doc[0], document(b, t)), doc[1] = std::max(doc[1], document(b, t));
    }
  }
};

BlockTokens block_tokens(const char* op, const Tensor& positions, const Tensor* documents) {
  spans::require_on_host(op, {{&positions, "positions"}});
  if (documents != nullptr) spans::require_on_host(op, {{documents, "documents"}});
  return {positions.data_as<std::int32_t>(), documents ? documents->data_as<std::int32_t>() : nullptr,
          positions.dim(1)};
}

// False when no key of the key tile is visible to any query of the query tile.
bool tile_visible(bool causal, const BlockTokens& qs, const BlockTokens& ks, std::int64_t b, std::int64_t i0,
                  std::int64_t nq, std::int64_t j0, std::int64_t nk) {
  std::int32_t qp[2], qd[2], kp[2], kd[2];
  qs.range(b, i0, nq, qp, qd);
  ks.range(b, j0, nk, kp, kd);
  if (causal && kp[0] > qp[1]) return false;
  return qs.documents == nullptr || (kd[1] >= qd[0] && kd[0] <= qd[1]);
}

// S[r][c] = -inf where key j0 + c is not visible to query i0 + r.
void mask(bool causal, const BlockTokens& qs, const BlockTokens& ks, std::int64_t b, float* s, std::int64_t lds,
          std::int64_t i0, std::int64_t nq, std::int64_t j0, std::int64_t nk) {
  const bool documents = qs.documents != nullptr;
  for (std::int64_t r = 0; r < nq; ++r)
    for (std::int64_t c = 0; c < nk; ++c)
      if (!math::attention_block_key_visible(causal, qs.position(b, i0 + r), ks.position(b, j0 + c), documents,
                                             qs.document(b, i0 + r), ks.document(b, j0 + c)))
        s[r * lds + c] = kMinusInfinity;
}

struct BlockShape {
  std::int64_t batch, q_len, k_len, q_heads, kv_heads, head_dim;
  std::int64_t q_row(std::int64_t b, std::int64_t t, std::int64_t h) const {
    return math::attention_bshd_row(b, t, h, q_len, q_heads, head_dim);
  }
  std::int64_t k_row(std::int64_t b, std::int64_t t, std::int64_t g) const {
    return math::attention_bshd_row(b, t, g, k_len, kv_heads, head_dim);
  }
  std::int64_t lse(std::int64_t b, std::int64_t h, std::int64_t t) const {
    return math::attention_lse_index(b, h, t, q_len, q_heads);
  }
};

BlockShape block_shape(const Tensor& q, const Tensor& k) {
  return {q.dim(0), q.dim(1), k.dim(1), q.dim(2), k.dim(2), q.dim(3)};
}

}  // namespace

void attention_block_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_positions,
                             const Tensor& k_positions, const Tensor* q_documents, const Tensor* k_documents,
                             bool causal, float softmax_scale, Tensor& out, Tensor& lse) {
  constexpr const char* op = "attention_block_forward";
  spans::require_on_host(op, {{&q, "q"}, {&k, "k"}, {&v, "v"}, {&out, "out"}, {&lse, "lse"}});
  const BlockShape s = block_shape(q, k);
  if (s.batch == 0 || s.q_len == 0 || s.q_heads == 0) return;
  const BlockTokens qs = block_tokens(op, q_positions, q_documents), ks = block_tokens(op, k_positions, k_documents);
  const std::int64_t D = s.head_dim, q_tiles = (s.q_len + kTile - 1) / kTile;
  const void *q_data = q.data(), *k_data = k.data(), *v_data = v.data();
  void* out_data = out.data();
  float* lse_data = lse.data_as<float>();
  const DType q_type = q.dtype(), k_type = k.dtype(), v_type = v.dtype(), out_type = out.dtype();
  Kokkos::parallel_for("ftrain::attention_block::forward", HostRange(0, s.batch * s.q_heads * q_tiles),
                       [=](const std::int64_t task) {
    const std::int64_t qt = task % q_tiles, h = (task / q_tiles) % s.q_heads, b = task / (q_tiles * s.q_heads);
    const std::int64_t g = math::attention_kv_head(h, s.q_heads, s.kv_heads);
    const std::int64_t i0 = qt * kTile, nq = std::min(kTile, s.q_len - i0);
    std::vector<float> q_tile(static_cast<std::size_t>(kTile * D)), k_tile(static_cast<std::size_t>(kTile * D)),
        v_tile(static_cast<std::size_t>(kTile * D)), acc(static_cast<std::size_t>(kTile * D), 0.0f),
        scores(static_cast<std::size_t>(kTile * kTile)), row_max(static_cast<std::size_t>(kTile), kMinusInfinity),
        row_sum(static_cast<std::size_t>(kTile), 0.0f);
    for (std::int64_t r = 0; r < nq; ++r) load_row(q_data, q_type, s.q_row(b, i0 + r, h), D, softmax_scale, &q_tile[r * D]);
    for (std::int64_t j0 = 0; j0 < s.k_len; j0 += kTile) {
      const std::int64_t nk = std::min(kTile, s.k_len - j0);
      if (!tile_visible(causal, qs, ks, b, i0, nq, j0, nk)) continue;
      for (std::int64_t c = 0; c < nk; ++c) {
        load_row(k_data, k_type, s.k_row(b, j0 + c, g), D, 1.0f, &k_tile[c * D]);
        load_row(v_data, v_type, s.k_row(b, j0 + c, g), D, 1.0f, &v_tile[c * D]);
      }
      gemm(false, true, nq, nk, D, 1.0f, q_tile.data(), D, k_tile.data(), D, 0.0f, scores.data(), kTile);
      mask(causal, qs, ks, b, scores.data(), kTile, i0, nq, j0, nk);
      for (std::int64_t r = 0; r < nq; ++r) {
        float* srow = &scores[r * kTile];
        const float new_max = std::max(row_max[r], *std::max_element(srow, srow + nk));
        if (new_max == kMinusInfinity) {
          std::fill(srow, srow + nk, 0.0f);  // nothing visible in this row yet
          continue;
        }
        const float correction = std::exp(row_max[r] - new_max);
        float sum = 0.0f;
        for (std::int64_t c = 0; c < nk; ++c) sum += srow[c] = std::exp(srow[c] - new_max);
        row_sum[r] = row_sum[r] * correction + sum;
        row_max[r] = new_max;
        for (std::int64_t d = 0; d < D; ++d) acc[r * D + d] *= correction;
      }
      gemm(false, false, nq, D, nk, 1.0f, scores.data(), kTile, v_tile.data(), D, 1.0f, acc.data(), D);
    }
    for (std::int64_t r = 0; r < nq; ++r) {
      const bool empty = row_sum[r] == 0.0f;
      const float inverse = empty ? 0.0f : 1.0f / row_sum[r];
      for (std::int64_t d = 0; d < D; ++d) store(out_data, out_type, s.q_row(b, i0 + r, h) + d, acc[r * D + d] * inverse);
      lse_data[s.lse(b, h, i0 + r)] = empty ? kMinusInfinity : row_max[r] + std::log(row_sum[r]);
    }
  });
}

void attention_block_merge(Tensor& out, Tensor& lse, const Tensor& block_out, const Tensor& block_lse) {
  constexpr const char* op = "attention_block_merge";
  spans::require_on_host(op, {{&out, "out"}, {&lse, "lse"}, {&block_out, "block_out"}, {&block_lse, "block_lse"}});
  const std::int64_t B = out.dim(0), T = out.dim(1), H = out.dim(2), D = out.dim(3);
  float* out_data = out.data_as<float>();
  float* lse_data = lse.data_as<float>();
  const void* block_data = block_out.data();
  const float* block_lse_data = block_lse.data_as<float>();
  const DType block_type = block_out.dtype();
  Kokkos::parallel_for("ftrain::attention_block::merge", HostRange(0, B * H * T), [=](const std::int64_t row) {
    const std::int64_t t = row % T, h = (row / T) % H, b = row / (T * H);
    const std::int64_t l = math::attention_lse_index(b, h, t, T, H);
    const float a = lse_data[l], c = block_lse_data[l];
    if (c == kMinusInfinity) return;  // the block adds nothing to this row
    const float m = std::max(a, c);
    const float wa = a == kMinusInfinity ? 0.0f : std::exp(a - m), wc = std::exp(c - m);
    const float total = wa + wc;
    const std::int64_t o = math::attention_bshd_row(b, t, h, T, H, D);
    for (std::int64_t d = 0; d < D; ++d)
      out_data[o + d] = (wa * out_data[o + d] + wc * load(block_data, block_type, o + d)) / total;
    lse_data[l] = m + std::log(total);
  });
}

void attention_block_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& lse, const Tensor& dout, const Tensor& q_positions,
                              const Tensor& k_positions, const Tensor* q_documents, const Tensor* k_documents,
                              bool causal, float softmax_scale, Tensor& dq, Tensor& dk, Tensor& dv) {
  constexpr const char* op = "attention_block_backward";
  spans::require_on_host(op, {{&q, "q"}, {&k, "k"}, {&v, "v"}, {&out, "out"}, {&lse, "lse"}, {&dout, "dout"},
                              {&dq, "dq"}, {&dk, "dk"}, {&dv, "dv"}});
  const BlockShape s = block_shape(q, k);
  if (s.batch == 0 || s.q_len == 0 || s.k_len == 0 || s.q_heads == 0) return;
  const BlockTokens qs = block_tokens(op, q_positions, q_documents), ks = block_tokens(op, k_positions, k_documents);
  const std::int64_t D = s.head_dim, group = s.q_heads / s.kv_heads;
  const void *q_data = q.data(), *k_data = k.data(), *v_data = v.data(), *out_data = out.data(),
             *dout_data = dout.data();
  const float* lse_data = lse.data_as<float>();
  void *dq_data = dq.data(), *dk_data = dk.data(), *dv_data = dv.data();
  const DType q_type = q.dtype(), k_type = k.dtype(), v_type = v.dtype(), out_type = out.dtype(),
              dout_type = dout.dtype(), dq_type = dq.dtype(), dk_type = dk.dtype(), dv_type = dv.dtype();
  Kokkos::parallel_for("ftrain::attention_block::backward", HostRange(0, s.batch * s.kv_heads),
                       [=](const std::int64_t task) {
    const std::int64_t g = task % s.kv_heads, b = task / s.kv_heads;
    // This kv head's whole key block, and its dK, dV accumulated over the group.
    std::vector<float> k_all(static_cast<std::size_t>(s.k_len * D)), v_all(k_all.size()), dk_all(k_all.size(), 0.0f),
        dv_all(k_all.size(), 0.0f);
    for (std::int64_t j = 0; j < s.k_len; ++j) {
      load_row(k_data, k_type, s.k_row(b, j, g), D, 1.0f, &k_all[j * D]);
      load_row(v_data, v_type, s.k_row(b, j, g), D, 1.0f, &v_all[j * D]);
    }
    std::vector<float> q_tile(static_cast<std::size_t>(kTile * D)), do_tile(q_tile.size()), dq_tile(q_tile.size()),
        p(static_cast<std::size_t>(kTile * kTile)), dp(p.size()), row_lse(static_cast<std::size_t>(kTile)),
        row_delta(static_cast<std::size_t>(kTile)), o_row(static_cast<std::size_t>(D));
    for (std::int64_t h = g * group; h < (g + 1) * group; ++h) {
      for (std::int64_t i0 = 0; i0 < s.q_len; i0 += kTile) {
        const std::int64_t nq = std::min(kTile, s.q_len - i0);
        for (std::int64_t r = 0; r < nq; ++r) {
          load_row(q_data, q_type, s.q_row(b, i0 + r, h), D, 1.0f, &q_tile[r * D]);
          load_row(dout_data, dout_type, s.q_row(b, i0 + r, h), D, 1.0f, &do_tile[r * D]);
          load_row(out_data, out_type, s.q_row(b, i0 + r, h), D, 1.0f, o_row.data());
          float delta = 0.0f;
          for (std::int64_t d = 0; d < D; ++d) delta += do_tile[r * D + d] * o_row[d];
          row_delta[r] = delta;
          row_lse[r] = lse_data[s.lse(b, h, i0 + r)];
        }
        std::fill(dq_tile.begin(), dq_tile.end(), 0.0f);
        bool any = false;
        for (std::int64_t j0 = 0; j0 < s.k_len; j0 += kTile) {
          const std::int64_t nk = std::min(kTile, s.k_len - j0);
          if (!tile_visible(causal, qs, ks, b, i0, nq, j0, nk)) continue;
          any = true;
          // P = exp(scale Q K^T - lse) over the visible entries (0 elsewhere).
          gemm(false, true, nq, nk, D, softmax_scale, q_tile.data(), D, &k_all[j0 * D], D, 0.0f, p.data(), kTile);
          mask(causal, qs, ks, b, p.data(), kTile, i0, nq, j0, nk);
          for (std::int64_t r = 0; r < nq; ++r)
            for (std::int64_t c = 0; c < nk; ++c) {
              float& x = p[r * kTile + c];
              x = (x == kMinusInfinity || row_lse[r] == kMinusInfinity) ? 0.0f : std::exp(x - row_lse[r]);
            }
          gemm(true, false, nk, D, nq, 1.0f, p.data(), kTile, do_tile.data(), D, 1.0f, &dv_all[j0 * D], D);
          gemm(false, true, nq, nk, D, 1.0f, do_tile.data(), D, &v_all[j0 * D], D, 0.0f, dp.data(), kTile);
          for (std::int64_t r = 0; r < nq; ++r)
            for (std::int64_t c = 0; c < nk; ++c) dp[r * kTile + c] = p[r * kTile + c] * (dp[r * kTile + c] - row_delta[r]);
          gemm(false, false, nq, D, nk, softmax_scale, dp.data(), kTile, &k_all[j0 * D], D, 1.0f, dq_tile.data(), D);
          gemm(true, false, nk, D, nq, softmax_scale, dp.data(), kTile, q_tile.data(), D, 1.0f, &dk_all[j0 * D], D);
        }
        if (!any) continue;
        for (std::int64_t r = 0; r < nq; ++r) add_row(dq_data, dq_type, s.q_row(b, i0 + r, h), D, &dq_tile[r * D], 1.0f);
      }
    }
    for (std::int64_t j = 0; j < s.k_len; ++j) {
      add_row(dk_data, dk_type, s.k_row(b, j, g), D, &dk_all[j * D], 1.0f);
      add_row(dv_data, dv_type, s.k_row(b, j, g), D, &dv_all[j * D], 1.0f);
    }
  });
}

}  // namespace ftrain::host
