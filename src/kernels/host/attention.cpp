// Host flash attention (FlashAttention-2 recurrence on CPU tiles).
//
// Layout: q[B,T,Hq,D], k,v[B,T,Hkv,D], out[B,T,Hq,D], lse f32[B,Hq,T].
// Query head h reads kv head h / (Hq / Hkv) (GQA; MHA when Hq == Hkv).
// lse[b,h,i] = log(sum_j exp(scale * q_i . k_j)) over the visible keys j.
// With document ids (a packed window), key j is visible only within query
// i's document: key tiles wholly outside the query tile's documents are
// skipped in both passes, so the work follows the documents' lengths. Which
// entries are visible and which tiles are skipped is
// math::attention_key_visible / attention_key_tile_visible, the rule the
// CUDA reference kernel applies too.
//
// Forward: one task per (batch, query head, query tile). The task keeps its
// Q tile (pre-scaled), an f32 output accumulator and the running row max m
// and row sum l; for each key tile it computes S = Q K^T, rescales the
// accumulator by exp(m_old - m_new) and adds P V. Only tile-sized scratch
// exists, never a T x T matrix.
//
// Backward: one task per (batch, kv head). The task owns every row of dk and
// dv of its kv head and every row of dq of the query heads in its group, so
// a threaded Kokkos needs no atomics: dk/dv accumulate over the group in
// f32 buffers [T, D] local to the task, dq accumulates in a tile. For each
// (query tile, key tile) pair: P = exp(scale * Q K^T - lse), dV += P^T dO,
// dP = dO V^T, dS = P * (dP - rowsum(dO * O)), dQ += scale dS K,
// dK += scale dS^T Q.
//
// The tile GEMMs go through cblas_sgemm: OpenBLAS picks the widest kernels
// the CPU has at run time, which beats what the compiler makes of plain
// loops under the project's baseline -march. Storage may be f32 or bf16 per
// tensor; all arithmetic is f32.
#include <cblas.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "kernels/host/attention_tiled.hpp"
#include "kernels/host/float_spans.hpp"
#include "kernels/host/host_ops.hpp"
#include "kernels/math/attention.hpp"

namespace ftrain::host {

namespace {

using HostRange = Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>;
constexpr float kMinusInfinity = -std::numeric_limits<float>::infinity();

// Widens n elements starting at element `offset` of a f32/bf16 buffer.
void load_row(const void* base, DType dtype, std::int64_t offset, std::int64_t n, float factor, float* dst) {
  if (dtype == DType::f32) {
    const float* src = static_cast<const float*>(base) + offset;
    if (factor == 1.0f) {
      std::memcpy(dst, src, static_cast<std::size_t>(n) * sizeof(float));
    } else {
      for (std::int64_t d = 0; d < n; ++d) dst[d] = src[d] * factor;
    }
  } else {
    const bf16* src = static_cast<const bf16*>(base) + offset;
    for (std::int64_t d = 0; d < n; ++d) dst[d] = to_float(src[d]) * factor;
  }
}

// Stores n floats times `factor` (rounding to nearest even for bf16).
void store_row(void* base, DType dtype, std::int64_t offset, std::int64_t n, const float* src, float factor) {
  if (dtype == DType::f32) {
    float* dst = static_cast<float*>(base) + offset;
    for (std::int64_t d = 0; d < n; ++d) dst[d] = src[d] * factor;
  } else {
    bf16* dst = static_cast<bf16*>(base) + offset;
    for (std::int64_t d = 0; d < n; ++d) dst[d] = to_bf16(src[d] * factor);
  }
}

// C[m,n] = alpha * op(A)[m,k] . op(B)[k,n] + beta * C, row-major with explicit
// leading dimensions. OpenBLAS runs a GEMM on the calling thread only when
// m n k <= 65536 * GEMM_MULTITHREAD_THRESHOLD (4 by default); a larger tile
// product (D = 128) would wake the BLAS thread pool for a few microseconds
// of work, and nest it inside a threaded Kokkos. So products above that
// volume are split in halves along k (accumulating) or n.
void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
          std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  constexpr std::int64_t kSingleThreadVolume = 65536 * 4;
  constexpr std::int64_t kMinSplit = 16;
  if (m * n * k > kSingleThreadVolume && std::max(n, k) >= 2 * kMinSplit) {
    if (k >= n) {
      const std::int64_t k1 = k / 2;
      gemm(trans_a, trans_b, m, n, k1, alpha, a, lda, b, ldb, beta, c, ldc);
      gemm(trans_a, trans_b, m, n, k - k1, alpha, trans_a ? a + k1 * lda : a + k1, lda,
           trans_b ? b + k1 : b + k1 * ldb, ldb, 1.0f, c, ldc);
    } else {
      const std::int64_t n1 = n / 2;
      gemm(trans_a, trans_b, m, n1, k, alpha, a, lda, b, ldb, beta, c, ldc);
      gemm(trans_a, trans_b, m, n - n1, k, alpha, a, lda, trans_b ? b + n1 * ldb : b + n1, ldb, beta, c + n1, ldc);
    }
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b,
              static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

// The softmax work between the tile GEMMs is T^2 exponentials per head; with
// libm's scalar expf it costs as much as the GEMMs. GCC/Clang vector
// extensions keep these loops vectorised at the project's baseline -march
// (plain loops with float selects are not, under the default
// -ftrapping-math).
using f32x4 = float __attribute__((vector_size(16)));
using i32x4 = std::int32_t __attribute__((vector_size(16)));
constexpr std::int64_t kLanes = 4;

inline f32x4 splat(float x) { return f32x4{x, x, x, x}; }
inline f32x4 load4(const float* p) {
  f32x4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store4(float* p, f32x4 v) { std::memcpy(p, &v, sizeof v); }

// Where the compiler can build per-ISA clones picked at load time (GCC and
// Clang on x86-64 ELF), the exponential gets AVX2 and AVX-512 versions: it
// is a quarter of the attention time at the SSE2 baseline.
// Not under ThreadSanitizer: a clone's IFUNC resolver runs while the
// dynamic loader relocates libftrain, before TSan's runtime is initialised,
// and an instrumented resolver crashes there (the baseline ISA is used).
// Not when the whole file is already built for AVX2 or wider
// (FTRAIN_HOST_ISA=native, cmake/FtrainHostIsa.cmake): nothing to gain, and
// GCC 12 stops with an internal compiler error on such clones. The clones
// compute the default's bits: the build forbids FMA contraction.
#if defined(__x86_64__) && defined(__GNUC__) && defined(__ELF__) && !defined(__SANITIZE_THREAD__) && !defined(__AVX2__)
#define FTRAIN_ISA_CLONES __attribute__((target_clones("avx512f", "arch=haswell", "default")))
#else
#define FTRAIN_ISA_CLONES
#endif

// x[c] = exp(x[c] - shift) for c < n; 0 where x[c] - shift < -87 (masked
// keys at -inf, and results under the smallest normal float); NaN stays NaN.
// Cephes' expf on 16-lane vectors (one AVX-512 register, two AVX, four SSE):
// k = round(t / ln 2) by the 1.5 * 2^23 trick, reduction with a two-part
// ln 2, degree-5 polynomial, scaling by 2^k through the exponent bits.
// Relative error below 2e-7.
using f32x16 = float __attribute__((vector_size(64)));
using i32x16 = std::int32_t __attribute__((vector_size(64)));
constexpr std::int64_t kExpLanes = 16;

FTRAIN_ISA_CLONES void exp_shifted(float* x, std::int64_t n, float shift) {
  for (std::int64_t c = 0; c < n; c += kExpLanes) {
    const std::int64_t lanes = std::min(kExpLanes, n - c);
    f32x16 t;
    if (lanes == kExpLanes) {
      std::memcpy(&t, x + c, sizeof t);
    } else {
      for (std::int64_t l = 0; l < kExpLanes; ++l) t[l] = l < lanes ? x[c + l] : kMinusInfinity;
    }
    t -= shift;
    const i32x16 underflow = t < -87.0f;
    t = underflow ? f32x16{} - 87.0f : t;
    t = t > 88.0f ? f32x16{} + 88.0f : t;
    const f32x16 k = (t * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    const f32x16 r = (t - k * 0.693359375f) - k * -2.12194440e-4f;
    f32x16 p = f32x16{} + 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const i32x16 exponent = (__builtin_convertvector(k, i32x16) + 127) << 23;
    f32x16 two_to_k;
    std::memcpy(&two_to_k, &exponent, sizeof two_to_k);
    t = underflow ? f32x16{} : (p * r * r + r + 1.0f) * two_to_k;
    if (lanes == kExpLanes) {
      std::memcpy(x + c, &t, sizeof t);
    } else {
      for (std::int64_t l = 0; l < lanes; ++l) x[c + l] = t[l];
    }
  }
}

// Two accumulators hide the latency of the add / max chain.
float max_of(const float* x, std::int64_t n) {
  f32x4 m0 = splat(kMinusInfinity), m1 = m0;
  std::int64_t c = 0;
  for (; c + 2 * kLanes <= n; c += 2 * kLanes) {
    const f32x4 a = load4(x + c), b = load4(x + c + kLanes);
    m0 = a > m0 ? a : m0;
    m1 = b > m1 ? b : m1;
  }
  m0 = m1 > m0 ? m1 : m0;
  float m = std::max(std::max(m0[0], m0[1]), std::max(m0[2], m0[3]));
  for (; c < n; ++c) m = std::max(m, x[c]);
  return m;
}

float sum_of(const float* x, std::int64_t n) {
  f32x4 s0 = splat(0.0f), s1 = s0;
  std::int64_t c = 0;
  for (; c + 2 * kLanes <= n; c += 2 * kLanes) {
    s0 += load4(x + c);
    s1 += load4(x + c + kLanes);
  }
  s0 += s1;
  float s = (s0[0] + s0[1]) + (s0[2] + s0[3]);
  for (; c < n; ++c) s += x[c];
  return s;
}

struct AttentionShape {
  std::int64_t batch = 0, seq = 0, q_heads = 0, kv_heads = 0, head_dim = 0;
  std::int64_t group() const { return q_heads / kv_heads; }
  // Element offset of row (b, t, head) in a [B, T, heads, D] tensor.
  std::int64_t row(std::int64_t b, std::int64_t t, std::int64_t head, std::int64_t heads) const {
    return math::attention_bshd_row(b, t, head, seq, heads, head_dim);
  }
};

// Shapes and dtypes were checked by ops::attention_* (kernels/op_checks.hpp);
// what is left is the host backend's own: every tensor in host memory.
AttentionShape host_attention(const char* op, std::initializer_list<std::pair<const Tensor*, const char*>> tensors,
                              const Tensor& q, const Tensor& k) {
  spans::require_on_host(op, tensors);
  AttentionShape s;
  s.batch = q.dim(0);
  s.seq = q.dim(1);
  s.q_heads = q.dim(2);
  s.head_dim = q.dim(3);
  s.kv_heads = k.dim(2);
  return s;
}

void check_tiles(const char* op, const detail::AttentionTiles& tiles) {
  FT_CHECK(tiles.query > 0 && tiles.key > 0) << op << ": tile sizes must be positive, got " << tiles.query << " x "
                                             << tiles.key;
}

// Number of keys a query tile [i0, i0 + nq) can see: those its last row sees.
std::int64_t visible_keys(bool causal, std::int64_t i0, std::int64_t nq, std::int64_t seq) {
  return math::attention_key_end(causal, i0 + nq - 1, seq);
}

// The document ids of a packed window (nullptr rows when there are none).
// Ids do not decrease along a row, which math::attention_key_tile_visible
// relies on to skip key tiles wholly outside a query tile's documents (the
// saving of the mask); tiles that straddle a boundary are masked entry-wise.
struct DocumentIds {
  const std::int32_t* ids = nullptr;  // [B, T]
  std::int64_t seq = 0;
  const std::int32_t* row(std::int64_t b) const { return ids == nullptr ? nullptr : ids + b * seq; }
};

DocumentIds document_ids(const char* op, const Tensor* documents, std::int64_t batch, std::int64_t seq) {
  if (documents == nullptr) return {};
  spans::require_on_host(op, {{documents, "documents"}});
  const std::int32_t* ids = documents->data_as<std::int32_t>();
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t t = 1; t < seq; ++t)
      FT_CHECK(ids[b * seq + t] >= ids[b * seq + t - 1])
          << op << ": documents " << documents->describe() << " decrease in row " << b << " at token " << t << " ("
          << ids[b * seq + t - 1] << " then " << ids[b * seq + t] << "); a packed window's ids never do";
  return {ids, seq};
}

// Sets S[r][c] to -inf where key j0 + c is not visible to query i0 + r
// (math::attention_key_visible, the rule the CUDA kernels apply too). Tiles
// below the diagonal and inside one document have no such entry.
void mask_invisible(bool causal, const std::int32_t* doc, float* s, std::int64_t lds, std::int64_t i0,
                    std::int64_t nq, std::int64_t j0, std::int64_t nk) {
  if (math::attention_key_tile_all_visible(causal, i0, nq, j0, nk, doc)) return;
  for (std::int64_t r = 0; r < nq; ++r) {
    float* row = s + r * lds;
    for (std::int64_t c = 0; c < nk; ++c)
      if (!math::attention_key_visible(causal, i0 + r, j0 + c, doc)) row[c] = kMinusInfinity;
  }
}

}  // namespace

namespace detail {

void attention_forward_tiled(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, const Tensor* documents,
                             float softmax_scale, Tensor& out, Tensor& lse, AttentionTiles tiles) {
  constexpr const char* op = "attention_forward";
  const AttentionShape s =
      host_attention(op, {{&q, "q"}, {&k, "k"}, {&v, "v"}, {&out, "out"}, {&lse, "lse"}}, q, k);
  check_tiles(op, tiles);
  if (s.batch == 0 || s.seq == 0 || s.q_heads == 0) return;
  const DocumentIds docs = document_ids(op, documents, s.batch, s.seq);

  const std::int64_t D = s.head_dim, T = s.seq, Hq = s.q_heads, Hkv = s.kv_heads;
  const std::int64_t BQ = tiles.query, BK = tiles.key;
  const std::int64_t q_tiles = (T + BQ - 1) / BQ;
  const void* q_data = q.data();
  const void* k_data = k.data();
  const void* v_data = v.data();
  void* out_data = out.data();
  float* lse_data = lse.data_as<float>();
  const DType q_type = q.dtype(), k_type = k.dtype(), v_type = v.dtype(), out_type = out.dtype();

  Kokkos::parallel_for(
      "ftrain::attention::forward", HostRange(0, s.batch * Hq * q_tiles), [=](const std::int64_t task) {
        const std::int64_t qt = task % q_tiles;
        const std::int64_t h = (task / q_tiles) % Hq;
        const std::int64_t b = task / (q_tiles * Hq);
        const std::int64_t g = math::attention_kv_head(h, Hq, Hkv);
        const std::int64_t i0 = qt * BQ;
        const std::int64_t nq = std::min(BQ, T - i0);
        const std::int32_t* doc = docs.row(b);

        std::vector<float> q_tile(static_cast<std::size_t>(BQ * D)), k_tile(static_cast<std::size_t>(BK * D)),
            v_tile(static_cast<std::size_t>(BK * D)), acc(static_cast<std::size_t>(BQ * D), 0.0f),
            scores(static_cast<std::size_t>(BQ * BK)), row_max(static_cast<std::size_t>(BQ), kMinusInfinity),
            row_sum(static_cast<std::size_t>(BQ), 0.0f);

        // Folding the scale into Q makes S the softmax argument directly.
        for (std::int64_t r = 0; r < nq; ++r)
          load_row(q_data, q_type, s.row(b, i0 + r, h, Hq), D, softmax_scale, &q_tile[r * D]);

        const std::int64_t key_end = visible_keys(causal, i0, nq, T);
        for (std::int64_t j0 = 0; j0 < key_end; j0 += BK) {
          const std::int64_t nk = std::min(BK, key_end - j0);
          if (!math::attention_key_tile_visible(causal, i0, nq, j0, nk, doc)) continue;
          for (std::int64_t c = 0; c < nk; ++c) {
            load_row(k_data, k_type, s.row(b, j0 + c, g, Hkv), D, 1.0f, &k_tile[c * D]);
            load_row(v_data, v_type, s.row(b, j0 + c, g, Hkv), D, 1.0f, &v_tile[c * D]);
          }
          gemm(false, true, nq, nk, D, 1.0f, q_tile.data(), D, k_tile.data(), D, 0.0f, scores.data(), BK);
          mask_invisible(causal, doc, scores.data(), BK, i0, nq, j0, nk);

          for (std::int64_t r = 0; r < nq; ++r) {
            float* srow = &scores[r * BK];
            const float tile_max = max_of(srow, nk);
            const float new_max = std::max(row_max[r], tile_max);
            if (new_max == kMinusInfinity) {
              // Nothing visible yet in this row: contribute nothing.
              for (std::int64_t c = 0; c < nk; ++c) srow[c] = 0.0f;
              continue;
            }
            const float correction = std::exp(row_max[r] - new_max);
            exp_shifted(srow, nk, new_max);
            row_sum[r] = row_sum[r] * correction + sum_of(srow, nk);
            row_max[r] = new_max;
            if (correction != 1.0f) {
              float* arow = &acc[r * D];
              for (std::int64_t d = 0; d < D; ++d) arow[d] *= correction;
            }
          }
          gemm(false, false, nq, D, nk, 1.0f, scores.data(), BK, v_tile.data(), D, 1.0f, acc.data(), D);
        }

        float* lse_row = lse_data + math::attention_lse_index(b, h, i0, T, Hq);
        for (std::int64_t r = 0; r < nq; ++r) {
          const bool empty = row_sum[r] == 0.0f;
          store_row(out_data, out_type, s.row(b, i0 + r, h, Hq), D, &acc[r * D], empty ? 0.0f : 1.0f / row_sum[r]);
          lse_row[r] = empty ? kMinusInfinity : row_max[r] + std::log(row_sum[r]);
        }
      });
}

void attention_backward_tiled(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& lse, const Tensor& dout, bool causal, const Tensor* documents,
                              float softmax_scale, Tensor& dq, Tensor& dk, Tensor& dv, AttentionTiles tiles) {
  constexpr const char* op = "attention_backward";
  const AttentionShape s = host_attention(op,
                                          {{&q, "q"},
                                           {&k, "k"},
                                           {&v, "v"},
                                           {&out, "out"},
                                           {&lse, "lse"},
                                           {&dout, "dout"},
                                           {&dq, "dq"},
                                           {&dk, "dk"},
                                           {&dv, "dv"}},
                                          q, k);
  check_tiles(op, tiles);
  if (s.batch == 0 || s.seq == 0 || s.q_heads == 0) return;
  const DocumentIds docs = document_ids(op, documents, s.batch, s.seq);

  const std::int64_t D = s.head_dim, T = s.seq, Hq = s.q_heads, Hkv = s.kv_heads, group = s.group();
  const std::int64_t BQ = tiles.query, BK = tiles.key;
  const void* q_data = q.data();
  const void* k_data = k.data();
  const void* v_data = v.data();
  const void* out_data = out.data();
  const void* dout_data = dout.data();
  const float* lse_data = lse.data_as<float>();
  void* dq_data = dq.data();
  void* dk_data = dk.data();
  void* dv_data = dv.data();
  const DType q_type = q.dtype(), k_type = k.dtype(), v_type = v.dtype(), out_type = out.dtype(),
              dout_type = dout.dtype(), dq_type = dq.dtype(), dk_type = dk.dtype(), dv_type = dv.dtype();

  Kokkos::parallel_for(
      "ftrain::attention::backward", HostRange(0, s.batch * Hkv), [=](const std::int64_t task) {
        const std::int64_t g = task % Hkv;
        const std::int64_t b = task / Hkv;
        const std::int32_t* doc = docs.row(b);
        const auto TD = static_cast<std::size_t>(T * D);

        // The whole K and V of this kv head, widened once: every query head
        // of the group and every query tile reads them.
        std::vector<float> k_all(TD), v_all(TD), dk_acc(TD, 0.0f), dv_acc(TD, 0.0f);
        for (std::int64_t t = 0; t < T; ++t) {
          load_row(k_data, k_type, s.row(b, t, g, Hkv), D, 1.0f, &k_all[t * D]);
          load_row(v_data, v_type, s.row(b, t, g, Hkv), D, 1.0f, &v_all[t * D]);
        }
        std::vector<float> q_tile(static_cast<std::size_t>(BQ * D)), dout_tile(static_cast<std::size_t>(BQ * D)),
            o_row(static_cast<std::size_t>(D)), dq_acc(static_cast<std::size_t>(BQ * D)),
            probs(static_cast<std::size_t>(BQ * BK)), dprobs(static_cast<std::size_t>(BQ * BK)),
            row_lse(static_cast<std::size_t>(BQ)), row_delta(static_cast<std::size_t>(BQ));

        for (std::int64_t h = g * group; h < (g + 1) * group; ++h) {
          const float* lse_head = lse_data + math::attention_lse_index(b, h, 0, T, Hq);
          for (std::int64_t i0 = 0; i0 < T; i0 += BQ) {
            const std::int64_t nq = std::min(BQ, T - i0);
            for (std::int64_t r = 0; r < nq; ++r) {
              const std::int64_t row = s.row(b, i0 + r, h, Hq);
              load_row(q_data, q_type, row, D, 1.0f, &q_tile[r * D]);
              load_row(dout_data, dout_type, row, D, 1.0f, &dout_tile[r * D]);
              load_row(out_data, out_type, row, D, 1.0f, o_row.data());
              float delta = 0.0f;
              for (std::int64_t d = 0; d < D; ++d) delta += dout_tile[r * D + d] * o_row[d];
              row_delta[r] = delta;
              row_lse[r] = lse_head[i0 + r];
            }
            std::fill(dq_acc.begin(), dq_acc.end(), 0.0f);

            const std::int64_t key_end = visible_keys(causal, i0, nq, T);
            for (std::int64_t j0 = 0; j0 < key_end; j0 += BK) {
              const std::int64_t nk = std::min(BK, key_end - j0);
              if (!math::attention_key_tile_visible(causal, i0, nq, j0, nk, doc)) continue;
              const float* k_tile = &k_all[j0 * D];
              const float* v_tile = &v_all[j0 * D];

              gemm(false, true, nq, nk, D, softmax_scale, q_tile.data(), D, k_tile, D, 0.0f, probs.data(), BK);
              mask_invisible(causal, doc, probs.data(), BK, i0, nq, j0, nk);
              for (std::int64_t r = 0; r < nq; ++r) {
                float* prow = &probs[r * BK];
                const float l = row_lse[r];
                if (l == kMinusInfinity) {
                  for (std::int64_t c = 0; c < nk; ++c) prow[c] = 0.0f;
                } else {
                  exp_shifted(prow, nk, l);
                }
              }
              // dV_j += P^T dO
              gemm(true, false, nk, D, nq, 1.0f, probs.data(), BK, dout_tile.data(), D, 1.0f, &dv_acc[j0 * D], D);
              // dP = dO V_j^T, then dS = scale * P * (dP - delta) in place
              gemm(false, true, nq, nk, D, 1.0f, dout_tile.data(), D, v_tile, D, 0.0f, dprobs.data(), BK);
              for (std::int64_t r = 0; r < nq; ++r) {
                const float* prow = &probs[r * BK];
                float* dsrow = &dprobs[r * BK];
                const float delta = row_delta[r];
                for (std::int64_t c = 0; c < nk; ++c) dsrow[c] = softmax_scale * prow[c] * (dsrow[c] - delta);
              }
              // dQ_i += dS K_j ; dK_j += dS^T Q_i
              gemm(false, false, nq, D, nk, 1.0f, dprobs.data(), BK, k_tile, D, 1.0f, dq_acc.data(), D);
              gemm(true, false, nk, D, nq, 1.0f, dprobs.data(), BK, q_tile.data(), D, 1.0f, &dk_acc[j0 * D], D);
            }
            for (std::int64_t r = 0; r < nq; ++r)
              store_row(dq_data, dq_type, s.row(b, i0 + r, h, Hq), D, &dq_acc[r * D], 1.0f);
          }
        }
        for (std::int64_t t = 0; t < T; ++t) {
          store_row(dk_data, dk_type, s.row(b, t, g, Hkv), D, &dk_acc[t * D], 1.0f);
          store_row(dv_data, dv_type, s.row(b, t, g, Hkv), D, &dv_acc[t * D], 1.0f);
        }
      });
}

}  // namespace detail

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, const Tensor* documents,
                       float softmax_scale, Tensor& out, Tensor& lse) {
  detail::attention_forward_tiled(q, k, v, causal, documents, softmax_scale, out, lse,
                                  detail::AttentionTiles{});
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                        const Tensor& dout, bool causal, const Tensor* documents, float softmax_scale, Tensor& dq,
                        Tensor& dk, Tensor& dv) {
  detail::attention_backward_tiled(q, k, v, out, lse, dout, causal, documents, softmax_scale, dq, dk, dv,
                                   detail::AttentionTiles{});
}

}  // namespace ftrain::host
