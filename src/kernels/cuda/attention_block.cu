// Ring attention's block ops on CUDA (op_list.hpp: attention_block_*),
// written like the reference attention (attention.cu): one thread per
// output row, f32, two passes over the other side, no tiling, no atomics.
// Which keys a query sees is math::attention_block_key_visible (the causal
// bound by global position and the document mask), the rule the host block
// kernels apply. Compiled, not yet run on a GPU.
#include <cfloat>
#include <cmath>

#include "kernels/cuda/launch.cuh"
#include "kernels/math/attention.hpp"

namespace ftrain::cuda {

namespace {

struct Tokens {
  const std::int32_t* positions;
  const std::int32_t* documents;  // null: no document mask
  std::int64_t len;
  __device__ std::int32_t position(std::int64_t b, std::int64_t t) const { return positions[b * len + t]; }
  __device__ std::int32_t document(std::int64_t b, std::int64_t t) const {
    return documents == nullptr ? 0 : documents[b * len + t];
  }
};

__device__ __forceinline__ bool visible(bool causal, const Tokens& qs, const Tokens& ks, std::int64_t b,
                                        std::int64_t i, std::int64_t j) {
  return math::attention_block_key_visible(causal, qs.position(b, i), ks.position(b, j), qs.documents != nullptr,
                                           qs.document(b, i), ks.document(b, j));
}

}  // namespace

void launch_attention_block_forward(FloatSpan q, FloatSpan k, FloatSpan v, AttentionBlockTokens tokens, bool causal,
                                    float scale, FloatSpan out, float* lse, AttentionBlockDims dims,
                                    cudaStream_t stream) {
  const std::int64_t B = dims.batch, Tq = dims.q_len, Tk = dims.k_len, Hq = dims.q_heads, Hkv = dims.kv_heads,
                     D = dims.head_dim;
  const Tokens qs{tokens.q_positions, tokens.q_documents, Tq}, ks{tokens.k_positions, tokens.k_documents, Tk};
  launch_elementwise("ftrain::attention_block_forward", B * Hq * Tq, stream, [=] __device__(std::int64_t r) {
    const std::int64_t t = r % Tq, h = (r / Tq) % Hq, b = r / (Tq * Hq);
    const std::int64_t g = math::attention_kv_head(h, Hq, Hkv);
    const std::int64_t q_row = math::attention_bshd_row(b, t, h, Tq, Hq, D);
    float row_max = -FLT_MAX;
    bool any = false;
    for (std::int64_t j = 0; j < Tk; ++j) {
      if (!visible(causal, qs, ks, b, t, j)) continue;
      any = true;
      row_max = fmaxf(row_max, scale * row_dot(q, q_row, k, math::attention_bshd_row(b, j, g, Tk, Hkv, D), D));
    }
    float acc[kAttentionReferenceMaxHeadDim];
    for (std::int64_t d = 0; d < D; ++d) acc[d] = 0.0f;
    float row_sum = 0.0f;
    for (std::int64_t j = 0; any && j < Tk; ++j) {
      if (!visible(causal, qs, ks, b, t, j)) continue;
      const std::int64_t kv_row = math::attention_bshd_row(b, j, g, Tk, Hkv, D);
      const float p = expf(scale * row_dot(q, q_row, k, kv_row, D) - row_max);
      row_sum += p;
      for (std::int64_t d = 0; d < D; ++d) acc[d] += p * load_f32(v, kv_row + d);
    }
    for (std::int64_t d = 0; d < D; ++d) store_f32(out, q_row + d, any ? acc[d] / row_sum : 0.0f);
    lse[math::attention_lse_index(b, h, t, Tq, Hq)] = any ? row_max + logf(row_sum) : -INFINITY;
  });
}

void launch_attention_block_merge(float* out, float* lse, FloatSpan block_out, const float* block_lse,
                                  std::int64_t batch, std::int64_t seq, std::int64_t heads, std::int64_t head_dim,
                                  cudaStream_t stream) {
  const std::int64_t T = seq, H = heads, D = head_dim;
  launch_elementwise("ftrain::attention_block_merge", batch * H * T, stream, [=] __device__(std::int64_t row) {
    const std::int64_t t = row % T, h = (row / T) % H, b = row / (T * H);
    const std::int64_t l = math::attention_lse_index(b, h, t, T, H);
    const float a = lse[l], c = block_lse[l];
    if (c == -INFINITY) return;  // the block adds nothing to this row
    const float m = fmaxf(a, c);
    const float wa = a == -INFINITY ? 0.0f : expf(a - m), wc = expf(c - m);
    const float total = wa + wc;
    const std::int64_t o = math::attention_bshd_row(b, t, h, T, H, D);
    for (std::int64_t d = 0; d < D; ++d) out[o + d] = (wa * out[o + d] + wc * load_f32(block_out, o + d)) / total;
    lse[l] = m + logf(total);
  });
}

void launch_attention_block_backward(FloatSpan q, FloatSpan k, FloatSpan v, FloatSpan out, const float* lse,
                                     FloatSpan dout, AttentionBlockTokens tokens, bool causal, float scale,
                                     FloatSpan dq, FloatSpan dk, FloatSpan dv, AttentionBlockDims dims,
                                     cudaStream_t stream) {
  const std::int64_t B = dims.batch, Tq = dims.q_len, Tk = dims.k_len, Hq = dims.q_heads, Hkv = dims.kv_heads,
                     D = dims.head_dim;
  const Tokens qs{tokens.q_positions, tokens.q_documents, Tq}, ks{tokens.k_positions, tokens.k_documents, Tk};
  // dQ_i += scale * sum_j P_ij (dP_ij - delta_i) K_j, one thread per query row.
  launch_elementwise("ftrain::attention_block_backward_dq", B * Hq * Tq, stream, [=] __device__(std::int64_t r) {
    const std::int64_t t = r % Tq, h = (r / Tq) % Hq, b = r / (Tq * Hq);
    const std::int64_t g = math::attention_kv_head(h, Hq, Hkv);
    const std::int64_t q_row = math::attention_bshd_row(b, t, h, Tq, Hq, D);
    const float row_lse = lse[math::attention_lse_index(b, h, t, Tq, Hq)];
    if (row_lse == -INFINITY) return;
    const float delta = row_dot(dout, q_row, out, q_row, D);
    float acc[kAttentionReferenceMaxHeadDim];
    for (std::int64_t d = 0; d < D; ++d) acc[d] = 0.0f;
    for (std::int64_t j = 0; j < Tk; ++j) {
      if (!visible(causal, qs, ks, b, t, j)) continue;
      const std::int64_t kv_row = math::attention_bshd_row(b, j, g, Tk, Hkv, D);
      const float p = expf(scale * row_dot(q, q_row, k, kv_row, D) - row_lse);
      const float ds = p * (row_dot(dout, q_row, v, kv_row, D) - delta);
      for (std::int64_t d = 0; d < D; ++d) acc[d] += ds * load_f32(k, kv_row + d);
    }
    for (std::int64_t d = 0; d < D; ++d) store_f32(dq, q_row + d, load_f32(dq, q_row + d) + scale * acc[d]);
  });
  // dV_j += sum_(h in group, i) P_ij dO_i, dK_j += scale * sum P_ij (dP_ij - delta_i) Q_i,
  // one thread per key row of a KV head.
  launch_elementwise("ftrain::attention_block_backward_dkv", B * Hkv * Tk, stream, [=] __device__(std::int64_t r) {
    const std::int64_t j = r % Tk, g = (r / Tk) % Hkv, b = r / (Tk * Hkv);
    const std::int64_t kv_row = math::attention_bshd_row(b, j, g, Tk, Hkv, D);
    float dk_acc[kAttentionReferenceMaxHeadDim], dv_acc[kAttentionReferenceMaxHeadDim];
    for (std::int64_t d = 0; d < D; ++d) dk_acc[d] = dv_acc[d] = 0.0f;
    for (std::int64_t h = 0; h < Hq; ++h) {
      if (math::attention_kv_head(h, Hq, Hkv) != g) continue;
      for (std::int64_t i = 0; i < Tq; ++i) {
        if (!visible(causal, qs, ks, b, i, j)) continue;
        const std::int64_t q_row = math::attention_bshd_row(b, i, h, Tq, Hq, D);
        const float row_lse = lse[math::attention_lse_index(b, h, i, Tq, Hq)];
        if (row_lse == -INFINITY) continue;
        const float p = expf(scale * row_dot(q, q_row, k, kv_row, D) - row_lse);
        const float ds = p * (row_dot(dout, q_row, v, kv_row, D) - row_dot(dout, q_row, out, q_row, D));
        for (std::int64_t d = 0; d < D; ++d) {
          dv_acc[d] += p * load_f32(dout, q_row + d);
          dk_acc[d] += ds * load_f32(q, q_row + d);
        }
      }
    }
    for (std::int64_t d = 0; d < D; ++d) {
      store_f32(dk, kv_row + d, load_f32(dk, kv_row + d) + scale * dk_acc[d]);
      store_f32(dv, kv_row + d, load_f32(dv, kv_row + d) + dv_acc[d]);
    }
  });
}

}  // namespace ftrain::cuda
