// One AdamW element step (torch.optim.AdamW), shared by
// kernels/host/adamw.cpp and kernels/cuda/adamw.cu:
//   g = grad * grad_scale;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * p)
// mhat = m / (1 - b1^step), vhat = v / (1 - b2^step): the two corrections are
// computed once per call (in double, by adamw_constants) and passed in.
#pragma once

#include <cmath>
#include <cstdint>

#include "base/hd.hpp"

namespace ftrain::math {

struct AdamwConstants {
  float lr, beta1, beta2, eps, weight_decay, grad_scale;
  float one_minus_beta1, one_minus_beta2;
  float inv_bias1, inv_sqrt_bias2;
};

// Host-side only (std::pow in double): the per-call constants.
inline AdamwConstants adamw_constants(float lr, float beta1, float beta2, float eps, float weight_decay,
                                      std::int64_t step, float grad_scale) {
  const double bias1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(step));
  const double bias2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(step));
  return {lr,
          beta1,
          beta2,
          eps,
          weight_decay,
          grad_scale,
          1.0f - beta1,
          1.0f - beta2,
          static_cast<float>(1.0 / bias1),
          static_cast<float>(1.0 / std::sqrt(bias2))};
}

// adamw_update_chunks_guarded's skip rule: a step flagged diverged (clip_coefficient's
// sticky diverged_step, non-zero) changes no parameter and no moment.
FTRAIN_HD bool adamw_step_skipped(std::int64_t diverged_step) { return diverged_step != 0; }

// Updates p, m, v of one element in place.
FTRAIN_HD void adamw_step(const AdamwConstants& k, float grad, float& p, float& m, float& v) {
  const float g = grad * k.grad_scale;
  const float mi = k.beta1 * m + k.one_minus_beta1 * g;
  const float vi = k.beta2 * v + k.one_minus_beta2 * g * g;
  m = mi;
  v = vi;
  const float mhat = mi * k.inv_bias1;
  const float sqrt_vhat = sqrt_f32(vi) * k.inv_sqrt_bias2;
  p -= k.lr * (mhat / (sqrt_vhat + k.eps) + k.weight_decay * p);
}

// The multi-tensor form (adamw_update_chunks): one launch walks a chunk
// table over a whole flat shard, apex's multi_tensor_apply chunk list. Each
// row is kAdamwChunkColumns i64: the chunk's first element in the shard, its
// element count (at most kAdamwChunkElements) and 1 where weight decay
// applies (0: norms, biases). kernels/adamw_chunks.hpp builds the table.
inline constexpr std::int64_t kAdamwChunkColumns = 3;
inline constexpr std::int64_t kAdamwChunkOffsetColumn = 0;
inline constexpr std::int64_t kAdamwChunkCountColumn = 1;
inline constexpr std::int64_t kAdamwChunkDecayColumn = 2;
// apex's chunk size: a CUDA block's work (a few hundred elements a thread)
// and a host task's, so that one launch over a sharded 7B block still has
// hundreds of chunks to spread.
inline constexpr std::int64_t kAdamwChunkElements = 65536;

struct AdamwChunk {
  std::int64_t offset, count;
  bool weight_decay;
};

FTRAIN_HD AdamwChunk adamw_chunk(const std::int64_t* table, std::int64_t row) {
  const std::int64_t* r = table + row * kAdamwChunkColumns;
  return {r[kAdamwChunkOffsetColumn], r[kAdamwChunkCountColumn], r[kAdamwChunkDecayColumn] != 0};
}

// The constants of one chunk: the call's, with weight decay switched off
// where the chunk's flag is clear. Only the stored weight_decay changes, so
// each element gets the bits adamw_update(weight_decay or 0) would give it.
FTRAIN_HD AdamwConstants adamw_chunk_constants(const AdamwConstants& k, bool weight_decay) {
  AdamwConstants c = k;
  if (!weight_decay) c.weight_decay = 0.0f;
  return c;
}

}  // namespace ftrain::math
