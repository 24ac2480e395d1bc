// The per-row pieces of the fused, vocabulary-chunked cross entropy, shared
// by kernels/host/cross_entropy.cpp and the CUDA head: the online
// log-sum-exp (a running max and a rescaled running sum per row, merged chunk
// by chunk, so [N, V] logits never exist at once), the loss, and the logit
// gradient loss_scale * (softmax - onehot). The GEMMs around them are the
// backend's (OpenBLAS/oneDNN, cuBLASLt).
//
// The per-logit exp is fast_math's (within 1.4 ulp, no libm): it vectorises
// on the host, where libm's scalar expf cost more than the rest of the head
// outside its GEMMs, and both backends compute the same bits for it. The
// per-row exp and log (chunk rescaling, the lse) are libm's, which differs by
// an ulp or two between host and CUDA, so a GPU check of this op uses a
// tolerance.
#pragma once

#include <cstdint>

#include "kernels/math/fast_math.hpp"
#include "base/hd.hpp"

namespace ftrain::math {

// Rows whose target is this index have loss 0 and no gradient (op_list.hpp's
// kIgnoreIndex, the Hugging Face / PyTorch convention; a static_assert in
// the CUDA head keeps the two equal).
inline constexpr std::int32_t kCrossEntropyIgnoreIndex = -100;

// A target the op accepts: the ignore index or a row of the vocabulary.
FTRAIN_HD bool cross_entropy_target_valid(std::int32_t target, std::int64_t vocab) {
  return target == kCrossEntropyIgnoreIndex || (target >= 0 && target < vocab);
}

// A target's column in a head slice holding vocabulary rows [first_row, ..)
// (tensor parallelism; 0 for the whole head): -1 for the ignore index, so
// that an ignored row never picks a logit nor gets the one-hot correction,
// and a column outside the slice for a target another slice holds.
FTRAIN_HD std::int64_t cross_entropy_local_target(std::int32_t target, std::int64_t first_row) {
  return target == kCrossEntropyIgnoreIndex ? -1 : static_cast<std::int64_t>(target) - first_row;
}

// The running max of the online log-sum-exp: std::max's comparison (a NaN
// logit never replaces a number), written once for both backends.
FTRAIN_HD float running_max(float a, float b) { return a < b ? b : a; }

FTRAIN_HD float softmax_term(float logit, float row_max) { return fast_math::exp_keeping_nan(logit - row_max); }

// The running sum after the row's max moved from old_max to new_max and the
// chunk's terms (taken against new_max) were added.
FTRAIN_HD float rescaled_running_sum(float running_sum, float old_max, float new_max, float chunk_sum) {
  return running_sum * libm_exp(old_max - new_max) + chunk_sum;
}

FTRAIN_HD float log_sum_exp(float row_max, float running_sum) { return row_max + libm_log(running_sum); }

// A vocabulary slice's share of the softmax sum under the group's row max
// (its log-sum-exp moved onto the common max), summed over the group.
FTRAIN_HD float cross_entropy_slice_sum_exp(float local_lse, float row_max) { return libm_exp(local_lse - row_max); }

FTRAIN_HD float cross_entropy_loss(float lse, float target_logit, bool ignored) {
  return ignored ? 0.0f : lse - target_logit;
}

// d(loss_scale * loss)/d logit without the one-hot part; the target column
// then subtracts loss_scale (cross_entropy_target_correction).
FTRAIN_HD float cross_entropy_dlogit(float logit, float lse, float loss_scale) {
  return loss_scale * fast_math::exp_keeping_nan(logit - lse);
}
FTRAIN_HD float cross_entropy_target_correction(float dlogit, float loss_scale) { return dlogit - loss_scale; }

}  // namespace ftrain::math
