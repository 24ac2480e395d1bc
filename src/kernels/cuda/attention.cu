// CUDA reference attention (kernels.hpp): the on-device oracle the cuDNN
// path is compared with, written to be obviously correct rather than fast.
// One thread per output row, two passes over the keys (max, then exp-sum and
// P.V) in f32, no tiling, no shared memory, no atomics: the backward computes
// dQ per query row and dK/dV per key row, each summing over the other side
// in index order (deterministic). Which KV head a query head reads, which
// keys a query sees (math::attention_key_visible: causal bound and document
// mask) and where rows live come from kernels/math/attention.hpp, the
// functions the host flash attention calls. With document ids a row walks
// the other side in tiles of kTile and skips those
// math::attention_key_tile_visible rules out, so the work follows the
// documents' lengths as on the host.
#include <cfloat>

#include "kernels/cuda/launch.cuh"
#include "kernels/math/attention.hpp"

namespace ftrain::cuda {

namespace {

constexpr std::int64_t kTile = 32;

// Calls visit(j) for each key j < end visible to `query`, in index order,
// skipping key tiles the tile rule rules out.
template <typename Visit>
__device__ __forceinline__ void for_visible_keys(bool causal, std::int64_t query, std::int64_t end,
                                                 const std::int32_t* doc, Visit visit) {
  for (std::int64_t j0 = 0; j0 < end; j0 += kTile) {
    const std::int64_t nk = end - j0 < kTile ? end - j0 : kTile;
    if (!math::attention_key_tile_visible(causal, query, 1, j0, nk, doc)) continue;
    for (std::int64_t j = j0; j < j0 + nk; ++j)
      if (math::attention_key_visible(causal, query, j, doc)) visit(j);
  }
}

// Calls visit(i) for each query i in [first, seq) that sees `key`, in index
// order, skipping query tiles the tile rule rules out.
template <typename Visit>
__device__ __forceinline__ void for_seeing_queries(bool causal, std::int64_t key, std::int64_t first,
                                                   std::int64_t seq, const std::int32_t* doc, Visit visit) {
  for (std::int64_t i0 = first; i0 < seq; i0 += kTile) {
    const std::int64_t nq = seq - i0 < kTile ? seq - i0 : kTile;
    if (!math::attention_key_tile_visible(causal, i0, nq, key, 1, doc)) continue;
    for (std::int64_t i = i0; i < i0 + nq; ++i)
      if (math::attention_key_visible(causal, i, key, doc)) visit(i);
  }
}

__device__ __forceinline__ const std::int32_t* document_row(const std::int32_t* documents, std::int64_t b,
                                                            std::int64_t seq) {
  return documents == nullptr ? nullptr : documents + b * seq;
}

}  // namespace

void launch_attention_reference_forward(FloatSpan q, FloatSpan k, FloatSpan v, bool causal,
                                        const std::int32_t* documents, float scale, FloatSpan out, float* lse,
                                        AttentionDims dims, cudaStream_t stream) {
  const std::int64_t B = dims.batch, T = dims.seq, Hq = dims.q_heads, Hkv = dims.kv_heads, D = dims.head_dim;
  launch_elementwise("ftrain::attention_reference_forward", B * Hq * T, stream, [=] __device__(std::int64_t r) {
    const std::int64_t t = r % T, h = (r / T) % Hq, b = r / (T * Hq);
    const std::int64_t g = math::attention_kv_head(h, Hq, Hkv);
    const std::int64_t q_row = math::attention_bshd_row(b, t, h, T, Hq, D);
    const std::int64_t end = math::attention_key_end(causal, t, T);
    const std::int32_t* doc = document_row(documents, b, T);
    float row_max = -FLT_MAX;
    for_visible_keys(causal, t, end, doc, [&](std::int64_t j) {
      row_max = fmaxf(row_max, scale * row_dot(q, q_row, k, math::attention_bshd_row(b, j, g, T, Hkv, D), D));
    });
    float acc[kAttentionReferenceMaxHeadDim];
    for (std::int64_t d = 0; d < D; ++d) acc[d] = 0.0f;
    float row_sum = 0.0f;
    for_visible_keys(causal, t, end, doc, [&](std::int64_t j) {
      const std::int64_t kv_row = math::attention_bshd_row(b, j, g, T, Hkv, D);
      const float p = expf(scale * row_dot(q, q_row, k, kv_row, D) - row_max);
      row_sum += p;
      for (std::int64_t d = 0; d < D; ++d) acc[d] += p * load_f32(v, kv_row + d);
    });
    for (std::int64_t d = 0; d < D; ++d) store_f32(out, q_row + d, acc[d] / row_sum);
    lse[math::attention_lse_index(b, h, t, T, Hq)] = row_max + logf(row_sum);
  });
}

void launch_attention_reference_backward(FloatSpan q, FloatSpan k, FloatSpan v, FloatSpan out, const float* lse,
                                         FloatSpan dout, bool causal, const std::int32_t* documents, float scale,
                                         FloatSpan dq, FloatSpan dk, FloatSpan dv, AttentionDims dims,
                                         cudaStream_t stream) {
  const std::int64_t B = dims.batch, T = dims.seq, Hq = dims.q_heads, Hkv = dims.kv_heads, D = dims.head_dim;
  // dQ_i = scale * sum_j P_ij (dP_ij - delta_i) K_j, one thread per query row.
  launch_elementwise("ftrain::attention_reference_backward_dq", B * Hq * T, stream, [=] __device__(std::int64_t r) {
    const std::int64_t t = r % T, h = (r / T) % Hq, b = r / (T * Hq);
    const std::int64_t g = math::attention_kv_head(h, Hq, Hkv);
    const std::int64_t q_row = math::attention_bshd_row(b, t, h, T, Hq, D);
    const float row_lse = lse[math::attention_lse_index(b, h, t, T, Hq)];
    const float delta = row_dot(dout, q_row, out, q_row, D);
    float acc[kAttentionReferenceMaxHeadDim];
    for (std::int64_t d = 0; d < D; ++d) acc[d] = 0.0f;
    const std::int64_t end = math::attention_key_end(causal, t, T);
    for_visible_keys(causal, t, end, document_row(documents, b, T), [&](std::int64_t j) {
      const std::int64_t kv_row = math::attention_bshd_row(b, j, g, T, Hkv, D);
      const float p = expf(scale * row_dot(q, q_row, k, kv_row, D) - row_lse);
      const float ds = p * (row_dot(dout, q_row, v, kv_row, D) - delta);
      for (std::int64_t d = 0; d < D; ++d) acc[d] += ds * load_f32(k, kv_row + d);
    });
    for (std::int64_t d = 0; d < D; ++d) store_f32(dq, q_row + d, scale * acc[d]);
  });
  // dV_j = sum_(h in group, i) P_ij dO_i and dK_j = scale * sum P_ij (dP_ij - delta_i) Q_i,
  // one thread per key row of a KV head.
  launch_elementwise("ftrain::attention_reference_backward_dkv", B * Hkv * T, stream, [=] __device__(std::int64_t r) {
    const std::int64_t j = r % T, g = (r / T) % Hkv, b = r / (T * Hkv);
    const std::int64_t kv_row = math::attention_bshd_row(b, j, g, T, Hkv, D);
    float dk_acc[kAttentionReferenceMaxHeadDim], dv_acc[kAttentionReferenceMaxHeadDim];
    for (std::int64_t d = 0; d < D; ++d) dk_acc[d] = dv_acc[d] = 0.0f;
    const std::int32_t* doc = document_row(documents, b, T);
    for (std::int64_t h = 0; h < Hq; ++h) {
      if (math::attention_kv_head(h, Hq, Hkv) != g) continue;
      for_seeing_queries(causal, j, math::attention_first_query(causal, j), T, doc, [&](std::int64_t i) {
        const std::int64_t q_row = math::attention_bshd_row(b, i, h, T, Hq, D);
        const float row_lse = lse[math::attention_lse_index(b, h, i, T, Hq)];
        const float p = expf(scale * row_dot(q, q_row, k, kv_row, D) - row_lse);
        const float ds = p * (row_dot(dout, q_row, v, kv_row, D) - row_dot(dout, q_row, out, q_row, D));
        for (std::int64_t d = 0; d < D; ++d) {
          dv_acc[d] += p * load_f32(dout, q_row + d);
          dk_acc[d] += ds * load_f32(q, q_row + d);
        }
      });
    }
    for (std::int64_t d = 0; d < D; ++d) {
      store_f32(dk, kv_row + d, scale * dk_acc[d]);
      store_f32(dv, kv_row + d, dv_acc[d]);
    }
  });
}

}  // namespace ftrain::cuda
