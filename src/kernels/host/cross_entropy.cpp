// Host fused linear head + softmax cross entropy, chunked over the vocabulary.
//
// logits = h[N,C] . w[V,C]^T (+ bias[V]) are only ever computed one vocab
// chunk at a time into an f32 scratch [N, vocab_chunk], so the
// [N, V] logits of a 128k-token vocabulary never exist. Forward keeps an
// online logsumexp per row (running max and running sum, rescaled when the
// max grows) and picks the target logit out of the chunk that holds it:
// losses[i] = lse[i] - logit[i][target_i]. Backward recomputes each chunk,
// turns it into dlogit = loss_scale * (softmax - onehot) using the saved lse,
// and applies the linear layer's backward chunk by chunk:
// dh (=) accumulates dlogit . w[chunk] over chunks; dw[chunk] += dlogit^T h;
// dbias[chunk] += colsum(dlogit).
//
// Rows whose target is kIgnoreIndex have loss 0 and zero gradient; any other
// target outside [0, V) is an error naming the row and the value. h and w may
// be f32 or bf16; dw and dbias may be f32 or bf16 (bf16 accumulates in f32 and
// rounds once per chunk). The GEMMs go through the host GEMM providers
// (gemm.hpp): when h and w are both bf16 and the CPU multiplies BF16
// natively, they are consumed as stored and the backward GEMMs take dlogit
// rounded to bf16 (what autocast and a BF16 GPU GEMM do: the gradient of
// bf16 logits is bf16); otherwise bf16 chunks are widened into f32 scratch.
#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "base/error.hpp"
#include "kernels/host/float_spans.hpp"
#include "kernels/host/gemm.hpp"
#include "kernels/host/host_ops.hpp"
#include "kernels/math/cross_entropy.hpp"

namespace ftrain::host {

static_assert(math::kCrossEntropyIgnoreIndex == kIgnoreIndex, "one ignore index for both backends");

namespace {

using HostRange = Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>;
constexpr float kMinusInfinity = -std::numeric_limits<float>::infinity();

struct HeadShape {
  std::int64_t rows = 0, channels = 0, vocab = 0;
};

// Shapes and dtypes: checked by ops::cross_entropy_* (kernels/op_checks.hpp).
// Here: the tensors are in host memory, and each target, read on the host,
// is a vocabulary row or the ignore index.
// vocab: the whole vocabulary's rows (w's own, or more for a slice).
HeadShape check_head(const char* op, const Tensor& h, const Tensor& w, const Tensor* bias, const Tensor& targets,
                     std::int64_t vocab) {
  spans::require_on_host(op, {{&h, "h"}, {&w, "w"}, {bias, "bias"}, {&targets, "targets"}});
  const HeadShape s{h.dim(0), h.dim(1), w.dim(0)};
  const std::int32_t* t = targets.data_as<std::int32_t>();
  for (std::int64_t i = 0; i < s.rows; ++i) {
    FT_CHECK(math::cross_entropy_target_valid(t[i], vocab))
        << op << ": target " << t[i] << " at row " << i << " of " << targets.describe() << " is outside [0, "
        << vocab << ") and is not the ignore index " << kIgnoreIndex;
  }
  return s;
}

// Rows [first, first + count) of a [*, C] f32/bf16 tensor as f32: the tensor
// itself when it is f32, else widened into `scratch`.
const float* rows_as_f32(const Tensor& t, std::int64_t first, std::int64_t count, std::vector<float>& scratch) {
  const std::int64_t C = t.dim(-1);
  if (t.dtype() == DType::f32) return t.data_as<float>() + first * C;
  scratch.resize(static_cast<std::size_t>(count * C));
  const bf16* src = t.data_as<bf16>() + first * C;
  float* dst = scratch.data();
  Kokkos::parallel_for("ftrain::cross_entropy::widen", HostRange(0, count), [=](const std::int64_t r) {
    for (std::int64_t c = 0; c < C; ++c) dst[r * C + c] = to_float(src[r * C + c]);
  });
  return scratch.data();
}

float load(const void* base, DType dtype, std::int64_t i) {
  return dtype == DType::f32 ? static_cast<const float*>(base)[i] : to_float(static_cast<const bf16*>(base)[i]);
}

void store(void* base, DType dtype, std::int64_t i, float value) {
  if (dtype == DType::f32) {
    static_cast<float*>(base)[i] = value;
  } else {
    static_cast<bf16*>(base)[i] = to_bf16(value);
  }
}

// The head's operands as the GEMMs read them: bf16 as stored (native route)
// or f32 (in place, or chunks widened into scratch).
struct HeadOperands {
  bool native_bf16 = false;
  const float* h32 = nullptr;  // f32 route
  const bf16* h16 = nullptr;   // native route
  std::vector<float> h_scratch, w_scratch;

  HeadOperands(const Tensor& h, const Tensor& w) {
    native_bf16 = h.dtype() == DType::bf16 && w.dtype() == DType::bf16 && gemm::bf16_native();
    if (native_bf16) {
      h16 = h.data_as<bf16>();
    } else {
      h32 = rows_as_f32(h, 0, h.dim(0), h_scratch);
    }
  }
};

// logits[N, cs] = h . w[v0 : v0 + cs]^T (+ bias[v0 : v0 + cs]). Returns the
// f32 rows of w it read (f32 route; nullptr on the native route), which the
// backward reuses.
const float* chunk_logits(HeadOperands& ops, const Tensor& w, const Tensor* bias, const HeadShape& s, std::int64_t v0,
                  std::int64_t cs, float* logits) {
  const gemm::Dims dims{gemm::Op::none, gemm::Op::transpose, s.rows, cs, s.channels, s.channels, s.channels, cs};
  const float* w32 = nullptr;
  if (ops.native_bf16) {
    gemm::bf16(dims, ops.h16, w.data_as<bf16>() + v0 * s.channels, 0.0f, logits);
  } else {
    w32 = rows_as_f32(w, v0, cs, ops.w_scratch);
    gemm::f32(dims, ops.h32, w32, 0.0f, logits);
  }
  if (bias == nullptr) return w32;
  const void* b = bias->data();
  const DType bt = bias->dtype();
  Kokkos::parallel_for("ftrain::cross_entropy::bias", HostRange(0, s.rows), [=](const std::int64_t i) {
    for (std::int64_t c = 0; c < cs; ++c) logits[i * cs + c] += load(b, bt, v0 + c);
  });
  return w32;
}

// The chunk's max and its sum of softmax terms, each over kLanes
// interleaved partial results folded in a fixed order: a loop the compiler
// vectorises (a single running sum or max is a serial chain it may not
// reorder), with the same result for every instruction set and thread count.
constexpr std::int64_t kLanes = 16;

float lane_max(const float* row, std::int64_t n) {
  float lanes[kLanes];
  for (float& lane : lanes) lane = kMinusInfinity;
  std::int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes)
    for (std::int64_t l = 0; l < kLanes; ++l) lanes[l] = math::running_max(lanes[l], row[c + l]);
  for (; c < n; ++c) lanes[c % kLanes] = math::running_max(lanes[c % kLanes], row[c]);
  float result = kMinusInfinity;
  for (const float lane : lanes) result = math::running_max(result, lane);
  return result;
}

float lane_sum_of_softmax_terms(const float* row, std::int64_t n, float row_max) {
  float lanes[kLanes] = {};
  std::int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes)
    for (std::int64_t l = 0; l < kLanes; ++l) lanes[l] += math::softmax_term(row[c + l], row_max);
  for (; c < n; ++c) lanes[c % kLanes] += math::softmax_term(row[c], row_max);
  float result = 0.0f;
  for (const float lane : lanes) result += lane;
  return result;
}

// The online log-sum-exp of w's rows (rows [first_row, first_row + V) of
// the vocabulary) per row of h, and the target's logit where w holds it
// (0 elsewhere): the whole head's forward when first_row = 0 and w is all
// of it, a vocabulary-parallel slice's otherwise.
void lse_and_target_logit(const HeadShape& s, const Tensor& h, const Tensor& w, const Tensor* bias,
                          const Tensor& targets, std::int64_t first_row, std::int64_t vocab_chunk, float* lse_out,
                          float* picked) {
  const std::int64_t N = s.rows, chunk = std::min(vocab_chunk, s.vocab);
  std::vector<float> logits(static_cast<std::size_t>(N * chunk));
  std::vector<float> running_max(static_cast<std::size_t>(N), kMinusInfinity),
      running_sum(static_cast<std::size_t>(N), 0.0f);
  std::fill(picked, picked + N, 0.0f);
  HeadOperands operands(h, w);
  const std::int32_t* tgt = targets.data_as<std::int32_t>();
  float* row_max = running_max.data();
  float* row_sum = running_sum.data();
  float* chunk_data = logits.data();

  for (std::int64_t v0 = 0; v0 < s.vocab; v0 += chunk) {
    const std::int64_t cs = std::min(chunk, s.vocab - v0);
    chunk_logits(operands, w, bias, s, v0, cs, chunk_data);
    Kokkos::parallel_for("ftrain::cross_entropy::forward_chunk", HostRange(0, N), [=](const std::int64_t i) {
      const float* row = chunk_data + i * cs;
      const float new_max = math::running_max(row_max[i], lane_max(row, cs));
      const float sum = lane_sum_of_softmax_terms(row, cs, new_max);
      row_sum[i] = math::rescaled_running_sum(row_sum[i], row_max[i], new_max, sum);
      row_max[i] = new_max;
      const std::int64_t t = math::cross_entropy_local_target(tgt[i], first_row);
      if (t >= v0 && t < v0 + cs) picked[i] = row[t - v0];
    });
  }
  Kokkos::parallel_for("ftrain::cross_entropy::forward_lse", HostRange(0, N), [=](const std::int64_t i) {
    lse_out[i] = math::log_sum_exp(row_max[i], row_sum[i]);
  });
}

}  // namespace

void cross_entropy_forward(const Tensor& h, const Tensor& w, const Tensor* bias, const Tensor& targets,
                           std::int64_t vocab_chunk, Tensor& losses, Tensor& lse) {
  constexpr const char* op = "cross_entropy_forward";
  const HeadShape s = check_head(op, h, w, bias, targets, w.dim(0));
  spans::require_on_host(op, {{&losses, "losses"}, {&lse, "lse"}});
  if (s.rows == 0) return;
  std::vector<float> target_logit(static_cast<std::size_t>(s.rows));
  float* lse_out = lse.data_as<float>();
  lse_and_target_logit(s, h, w, bias, targets, 0, vocab_chunk, lse_out, target_logit.data());
  const float* picked = target_logit.data();
  const std::int32_t* tgt = targets.data_as<std::int32_t>();
  float* loss_out = losses.data_as<float>();
  Kokkos::parallel_for("ftrain::cross_entropy::forward_loss", HostRange(0, s.rows), [=](const std::int64_t i) {
    loss_out[i] = math::cross_entropy_loss(lse_out[i], picked[i], tgt[i] == kIgnoreIndex);
  });
}

void cross_entropy_slice_forward(const Tensor& h, const Tensor& w, const Tensor& targets, std::int64_t first_row,
                                 std::int64_t vocab, std::int64_t vocab_chunk, Tensor& local_lse, Tensor& target_logit) {
  constexpr const char* op = "cross_entropy_slice_forward";
  const HeadShape s = check_head(op, h, w, nullptr, targets, vocab);
  spans::require_on_host(op, {{&local_lse, "local_lse"}, {&target_logit, "target_logit"}});
  if (s.rows == 0) return;
  lse_and_target_logit(s, h, w, nullptr, targets, first_row, vocab_chunk, local_lse.data_as<float>(),
                       target_logit.data_as<float>());
}

void cross_entropy_slice_sum_exp(const Tensor& local_lse, const Tensor& row_max, Tensor& sum_exp) {
  spans::require_on_host("cross_entropy_slice_sum_exp",
                         {{&local_lse, "local_lse"}, {&row_max, "row_max"}, {&sum_exp, "sum_exp"}});
  const float* lse = local_lse.data_as<float>();
  const float* m = row_max.data_as<float>();
  float* out = sum_exp.data_as<float>();
  Kokkos::parallel_for("ftrain::cross_entropy::slice_sum_exp", HostRange(0, local_lse.numel()),
                       [=](const std::int64_t i) { out[i] = math::cross_entropy_slice_sum_exp(lse[i], m[i]); });
}

void cross_entropy_slice_loss(const Tensor& row_max, const Tensor& sum_exp, const Tensor& target_logit,
                              const Tensor& targets, Tensor& losses, Tensor& lse) {
  spans::require_on_host("cross_entropy_slice_loss", {{&row_max, "row_max"}, {&sum_exp, "sum_exp"},
                                                      {&target_logit, "target_logit"}, {&targets, "targets"},
                                                      {&losses, "losses"}, {&lse, "lse"}});
  const float* m = row_max.data_as<float>();
  const float* s = sum_exp.data_as<float>();
  const float* picked = target_logit.data_as<float>();
  const std::int32_t* tgt = targets.data_as<std::int32_t>();
  float* loss_out = losses.data_as<float>();
  float* lse_out = lse.data_as<float>();
  Kokkos::parallel_for("ftrain::cross_entropy::slice_loss", HostRange(0, row_max.numel()), [=](const std::int64_t i) {
    const float row_lse = math::log_sum_exp(m[i], s[i]);
    lse_out[i] = row_lse;
    loss_out[i] = math::cross_entropy_loss(row_lse, picked[i], tgt[i] == kIgnoreIndex);
  });
}

namespace {

// The backward over w's rows [first_row, first_row + V) of a vocabulary of
// `vocab` rows, lse the whole row's.
void head_backward(const char* op, const Tensor& h, const Tensor& w, const Tensor* bias, const Tensor& targets,
                   std::int64_t first_row, std::int64_t vocab, const Tensor& lse, const Tensor& loss_scale_tensor,
                   std::int64_t vocab_chunk, Tensor& dh, Tensor& dw, Tensor* dbias) {
  const HeadShape s = check_head(op, h, w, bias, targets, vocab);
  // Undefined dw / dbias: a frozen head (op_list.hpp); only dh is computed.
  const bool want_dw = dw.defined();
  if (dbias != nullptr && !dbias->defined()) dbias = nullptr;
  spans::require_on_host(op, {{&loss_scale_tensor, "loss_scale"}, {&lse, "lse"}, {&dh, "dh"},
                              {want_dw ? &dw : nullptr, "dw"}, {dbias, "dbias"}});
  // Read when the kernel runs (in stream order), never by the caller.
  const float loss_scale = loss_scale_tensor.data_as<float>()[0];
  if (s.rows == 0) return;  // dh is empty; no row contributes to dw or dbias

  const std::int64_t N = s.rows, C = s.channels, chunk = std::min(vocab_chunk, s.vocab);
  std::vector<float> dh_scratch, dw_scratch, logits(static_cast<std::size_t>(N * chunk));
  HeadOperands operands(h, w);
  // Native route: dlogit rounded to bf16 for the two backward GEMMs.
  std::vector<bf16> dlogit_bf16(operands.native_bf16 ? static_cast<std::size_t>(N * chunk) : 0);
  // dh accumulates over chunks in f32: in place when it is f32.
  float* dh32 = nullptr;
  if (dh.dtype() == DType::f32) {
    dh32 = dh.data_as<float>();
  } else {
    dh_scratch.resize(static_cast<std::size_t>(N * C));
    dh32 = dh_scratch.data();
  }
  const std::int32_t* tgt = targets.data_as<std::int32_t>();
  const float* lse_in = lse.data_as<float>();
  float* dlogit = logits.data();
  bf16* dlogit16 = dlogit_bf16.data();
  const bool native = operands.native_bf16;

  for (std::int64_t v0 = 0; v0 < s.vocab; v0 += chunk) {
    const std::int64_t cs = std::min(chunk, s.vocab - v0);
    const float* w32 = chunk_logits(operands, w, bias, s, v0, cs, dlogit);
    Kokkos::parallel_for("ftrain::cross_entropy::backward_chunk", HostRange(0, N), [=](const std::int64_t i) {
      float* row = dlogit + i * cs;
      const std::int64_t t = tgt[i];
      if (t == kIgnoreIndex) {
        for (std::int64_t c = 0; c < cs; ++c) row[c] = 0.0f;
      } else {
        const float row_lse = lse_in[i];
        for (std::int64_t c = 0; c < cs; ++c) row[c] = math::cross_entropy_dlogit(row[c], row_lse, loss_scale);
        const std::int64_t local = math::cross_entropy_local_target(tgt[i], first_row);
        if (local >= v0 && local < v0 + cs)
          row[local - v0] = math::cross_entropy_target_correction(row[local - v0], loss_scale);
      }
      if (native)
        for (std::int64_t c = 0; c < cs; ++c) dlogit16[i * cs + c] = to_bf16(row[c]);
    });

    // dh (+)= dlogit . w[chunk]; the first chunk overwrites (dh is written, =).
    const gemm::Dims dh_dims{gemm::Op::none, gemm::Op::none, N, C, cs, cs, C, C};
    // dw[chunk] += dlogit^T . h
    const gemm::Dims dw_dims{gemm::Op::transpose, gemm::Op::none, cs, C, N, cs, C, C};
    const float dh_beta = v0 == 0 ? 0.0f : 1.0f;
    if (native) {
      gemm::bf16(dh_dims, dlogit16, w.data_as<bf16>() + v0 * C, dh_beta, dh32);
    } else {
      gemm::f32(dh_dims, dlogit, w32, dh_beta, dh32);
    }
    auto dw_gemm = [&](float beta, float* out) {
      if (native) {
        gemm::bf16(dw_dims, dlogit16, operands.h16, beta, out);
      } else {
        gemm::f32(dw_dims, dlogit, operands.h32, beta, out);
      }
    };
    if (!want_dw) {
      // frozen head: no weight gradient
    } else if (dw.dtype() == DType::f32) {
      dw_gemm(1.0f, dw.data_as<float>() + v0 * C);
    } else {
      dw_scratch.resize(static_cast<std::size_t>(cs * C));
      float* partial = dw_scratch.data();
      dw_gemm(0.0f, partial);
      bf16* dst = dw.data_as<bf16>() + v0 * C;
      Kokkos::parallel_for("ftrain::cross_entropy::accumulate_dw", HostRange(0, cs * C), [=](const std::int64_t e) {
        dst[e] = to_bf16(to_float(dst[e]) + partial[e]);
      });
    }

    // dbias[chunk] += colsum(dlogit): one column per work item, no races.
    if (dbias != nullptr) {
      void* db = dbias->data();
      const DType dbt = dbias->dtype();
      Kokkos::parallel_for("ftrain::cross_entropy::accumulate_dbias", HostRange(0, cs), [=](const std::int64_t c) {
        float sum = 0.0f;
        for (std::int64_t i = 0; i < N; ++i) sum += dlogit[i * cs + c];
        store(db, dbt, v0 + c, load(db, dbt, v0 + c) + sum);
      });
    }
  }

  if (dh.dtype() != DType::f32) {
    bf16* dst = dh.data_as<bf16>();
    const float* src = dh32;
    Kokkos::parallel_for("ftrain::cross_entropy::store_dh", HostRange(0, N * C),
                         [=](const std::int64_t e) { dst[e] = to_bf16(src[e]); });
  }
}

}  // namespace

void cross_entropy_backward(const Tensor& h, const Tensor& w, const Tensor* bias, const Tensor& targets,
                            const Tensor& lse, const Tensor& loss_scale, std::int64_t vocab_chunk, Tensor& dh,
                            Tensor& dw, Tensor* dbias) {
  head_backward("cross_entropy_backward", h, w, bias, targets, 0, w.dim(0), lse, loss_scale, vocab_chunk, dh, dw,
                dbias);
}

void cross_entropy_slice_backward(const Tensor& h, const Tensor& w, const Tensor& targets, std::int64_t first_row,
                                  std::int64_t vocab, const Tensor& lse, const Tensor& loss_scale,
                                  std::int64_t vocab_chunk, Tensor& dh, Tensor& dw) {
  head_backward("cross_entropy_slice_backward", h, w, nullptr, targets, first_row, vocab, lse, loss_scale, vocab_chunk,
                dh, dw, nullptr);
}

}  // namespace ftrain::host
