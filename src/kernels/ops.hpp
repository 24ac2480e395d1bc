// The op set of ftrain: one declaration, one dispatch, two backends.
//
// Every op is a free function in ftrain::ops that dispatches on the device of
// its tensors to ftrain::host::<op> (kernels/host/<op>.cpp: Kokkos loops +
// OpenBLAS) or ftrain::cuda::<op> (kernels/cuda/<op>.cu). Both backends have
// exactly the signatures declared here.
//
// Conventions (llm.c's, written down once):
//  * Outputs are allocated by the caller with the documented shape and dtype.
//  * Float tensors may be f32 or bf16 unless stated; host math is always f32
//    (bf16 is a storage format: loads widen, stores round to nearest even).
//  * Activations are row-major [N, C] with N = batch * sequence rows, or
//    [B, T, H, D] for per-head tensors (the layout a linear layer produces,
//    so no transposes are needed).
//  * Backward: parameter gradients ACCUMULATE (+=) so micro-steps add up;
//    activation gradients are WRITTEN (=). Optional outputs are pointers
//    (nullptr = not wanted).
//  * Every op checks shapes, dtypes and devices and throws ftrain::Error
//    naming the op and the offending tensor (Tensor::describe()).
#pragma once

#include <cstdint>

#include "core/tensor.hpp"

namespace ftrain {

enum class GeluApproximation : std::uint8_t { none, tanh };

// Ignored target rows in cross entropy (Hugging Face / PyTorch convention).
inline constexpr std::int32_t kIgnoreIndex = -100;

#define FTRAIN_OP_DECLARATIONS                                                                                      \
  /* y[N,out] = x[N,in] . w[out,in]^T (+ b[out]) */                                                               \
  void linear_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y);                              \
  /* dx = dy . w (=); dw += dy^T . x; db += colsum(dy). dw/db f32 or bf16 */                                      \
  void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw, Tensor* db);   \
  /* out[N,C] = table[tokens[N]]; tokens i32, out-of-range token is an error naming it */                         \
  void embedding_forward(const Tensor& tokens, const Tensor& table, Tensor& out);                                  \
  void embedding_backward(const Tensor& tokens, const Tensor& dout, Tensor& dtable);                              \
  /* y = w * x / sqrt(mean(x^2) + eps) per row; rstd[N] f32 saved for backward */                                 \
  void rmsnorm_forward(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd);                      \
  void rmsnorm_backward(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy, Tensor& dx,        \
                        Tensor& dw);                                                                              \
  /* y = (x - mean) * rstd * w + b per row; mean[N], rstd[N] f32; b may be null */                                \
  void layernorm_forward(const Tensor& x, const Tensor& w, const Tensor* b, float eps, Tensor& y, Tensor& mean,   \
                         Tensor& rstd);                                                                           \
  void layernorm_backward(const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,               \
                          const Tensor& dy, Tensor& dx, Tensor& dw, Tensor* db);                                  \
  /* Rotary embedding, Hugging Face rotate-half: x[B,T,H,D], inv_freq f32[D/2]; position of row t is             \
     position_offset + t. y = x*cos + rotate_half(x)*sin. y may alias x. */                                      \
  void rope_forward(const Tensor& x, const Tensor& inv_freq, std::int64_t position_offset, Tensor& y);            \
  /* dx = R^T dy; dx may alias dy */                                                                              \
  void rope_backward(const Tensor& dy, const Tensor& inv_freq, std::int64_t position_offset, Tensor& dx);         \
  /* out = silu(gate) * up, all [N, I] */                                                                         \
  void swiglu_forward(const Tensor& gate, const Tensor& up, Tensor& out);                                         \
  void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate, Tensor& dup);      \
  void gelu_forward(const Tensor& x, GeluApproximation approximation, Tensor& y);                                 \
  void gelu_backward(const Tensor& x, const Tensor& dy, GeluApproximation approximation, Tensor& dx);             \
  /* Flash attention (tiled, online softmax; never materialises T x T).                                          \
     q[B,T,Hq,D], k,v[B,T,Hkv,D] with Hq % Hkv == 0 (GQA); out[B,T,Hq,D]; lse f32[B,Hq,T] (natural log).         \
     causal: key j visible to query i iff j <= i. */                                                              \
  void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, float softmax_scale,     \
                         Tensor& out, Tensor& lse);                                                               \
  /* dq, dk, dv written (=); recomputes probabilities from lse */                                                 \
  void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,                  \
                          const Tensor& lse, const Tensor& dout, bool causal, float softmax_scale, Tensor& dq,    \
                          Tensor& dk, Tensor& dv);                                                                \
  /* Fused linear head + softmax cross entropy, chunked over the vocabulary so full logits are never            \
     materialised: logits = h[N,C] . w[V,C]^T (+ bias[V]). targets i32[N] (kIgnoreIndex rows give 0 loss).      \
     losses f32[N] = lse - logit[target]; lse f32[N]. */                                                          \
  void cross_entropy_forward(const Tensor& h, const Tensor& w, const Tensor* bias, const Tensor& targets,        \
                             std::int64_t vocab_chunk, Tensor& losses, Tensor& lse);                              \
  /* Gradient of sum_i loss_scale * losses[i]: dh (=), dw (+=), dbias (+=, may be null) */                        \
  void cross_entropy_backward(const Tensor& h, const Tensor& w, const Tensor* bias, const Tensor& targets,       \
                              const Tensor& lse, float loss_scale, std::int64_t vocab_chunk, Tensor& dh,         \
                              Tensor& dw, Tensor* dbias);                                                         \
  /* out = a + b (residual stream); out may alias a or b */                                                       \
  void add(const Tensor& a, const Tensor& b, Tensor& out);                                                        \
  /* acc += x (residual gradients, gradient accumulation) */                                                      \
  void add_inplace(Tensor& acc, const Tensor& x);                                                                 \
  void scale_inplace(Tensor& x, float factor);                                                                    \
  void fill(Tensor& x, float value);                                                                              \
  /* dst = src converted (float dtypes incl. fp8, saturating); same numel */                                      \
  void cast(const Tensor& src, Tensor& dst);                                                                      \
  /* sum of squares in f64 (global-norm clipping) */                                                              \
  double sum_squares(const Tensor& x);                                                                            \
  /* AdamW on one contiguous f32 range (decoupled decay, bias correction with step >= 1):                        \
     g = grad * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;                                          \
     p -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * p) */                                                  \
  void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, float lr, float beta1, float beta2,  \
                    float eps, float weight_decay, std::int64_t step, float grad_scale);

namespace host {
FTRAIN_OP_DECLARATIONS
}  // namespace host

#if defined(FTRAIN_HAVE_CUDA_KERNELS)
namespace cuda {
FTRAIN_OP_DECLARATIONS
}  // namespace cuda
#endif

namespace ops {
// Dispatch on the device of the first tensor argument.
#if defined(FTRAIN_HAVE_CUDA_KERNELS)
#define FTRAIN_DISPATCH(first, call) \
  return (first).device() == Device::host ? ::ftrain::host::call : ::ftrain::cuda::call
#else
#define FTRAIN_DISPATCH(first, call)                                                     \
  do {                                                                                   \
    if ((first).device() != Device::host) ::ftrain::ops::throw_no_cuda(#call, (first)); \
    return ::ftrain::host::call;                                                         \
  } while (0)
#endif

[[noreturn]] void throw_no_cuda(const char* op, const Tensor& t);

inline void linear_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) {
  FTRAIN_DISPATCH(x, linear_forward(x, w, b, y));
}
inline void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw, Tensor* db) {
  FTRAIN_DISPATCH(x, linear_backward(x, w, dy, dx, dw, db));
}
inline void embedding_forward(const Tensor& tokens, const Tensor& table, Tensor& out) {
  FTRAIN_DISPATCH(table, embedding_forward(tokens, table, out));
}
inline void embedding_backward(const Tensor& tokens, const Tensor& dout, Tensor& dtable) {
  FTRAIN_DISPATCH(dout, embedding_backward(tokens, dout, dtable));
}
inline void rmsnorm_forward(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd) {
  FTRAIN_DISPATCH(x, rmsnorm_forward(x, w, eps, y, rstd));
}
inline void rmsnorm_backward(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy, Tensor& dx,
                             Tensor& dw) {
  FTRAIN_DISPATCH(x, rmsnorm_backward(x, w, rstd, dy, dx, dw));
}
inline void layernorm_forward(const Tensor& x, const Tensor& w, const Tensor* b, float eps, Tensor& y, Tensor& mean,
                              Tensor& rstd) {
  FTRAIN_DISPATCH(x, layernorm_forward(x, w, b, eps, y, mean, rstd));
}
inline void layernorm_backward(const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                               const Tensor& dy, Tensor& dx, Tensor& dw, Tensor* db) {
  FTRAIN_DISPATCH(x, layernorm_backward(x, w, mean, rstd, dy, dx, dw, db));
}
inline void rope_forward(const Tensor& x, const Tensor& inv_freq, std::int64_t position_offset, Tensor& y) {
  FTRAIN_DISPATCH(x, rope_forward(x, inv_freq, position_offset, y));
}
inline void rope_backward(const Tensor& dy, const Tensor& inv_freq, std::int64_t position_offset, Tensor& dx) {
  FTRAIN_DISPATCH(dy, rope_backward(dy, inv_freq, position_offset, dx));
}
inline void swiglu_forward(const Tensor& gate, const Tensor& up, Tensor& out) {
  FTRAIN_DISPATCH(gate, swiglu_forward(gate, up, out));
}
inline void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate, Tensor& dup) {
  FTRAIN_DISPATCH(gate, swiglu_backward(gate, up, dout, dgate, dup));
}
inline void gelu_forward(const Tensor& x, GeluApproximation approximation, Tensor& y) {
  FTRAIN_DISPATCH(x, gelu_forward(x, approximation, y));
}
inline void gelu_backward(const Tensor& x, const Tensor& dy, GeluApproximation approximation, Tensor& dx) {
  FTRAIN_DISPATCH(x, gelu_backward(x, dy, approximation, dx));
}
inline void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, float softmax_scale,
                              Tensor& out, Tensor& lse) {
  FTRAIN_DISPATCH(q, attention_forward(q, k, v, causal, softmax_scale, out, lse));
}
inline void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                               const Tensor& lse, const Tensor& dout, bool causal, float softmax_scale, Tensor& dq,
                               Tensor& dk, Tensor& dv) {
  FTRAIN_DISPATCH(q, attention_backward(q, k, v, out, lse, dout, causal, softmax_scale, dq, dk, dv));
}
inline void cross_entropy_forward(const Tensor& h, const Tensor& w, const Tensor* bias, const Tensor& targets,
                                  std::int64_t vocab_chunk, Tensor& losses, Tensor& lse) {
  FTRAIN_DISPATCH(h, cross_entropy_forward(h, w, bias, targets, vocab_chunk, losses, lse));
}
inline void cross_entropy_backward(const Tensor& h, const Tensor& w, const Tensor* bias, const Tensor& targets,
                                   const Tensor& lse, float loss_scale, std::int64_t vocab_chunk, Tensor& dh,
                                   Tensor& dw, Tensor* dbias) {
  FTRAIN_DISPATCH(h, cross_entropy_backward(h, w, bias, targets, lse, loss_scale, vocab_chunk, dh, dw, dbias));
}
inline void add(const Tensor& a, const Tensor& b, Tensor& out) { FTRAIN_DISPATCH(a, add(a, b, out)); }
inline void add_inplace(Tensor& acc, const Tensor& x) { FTRAIN_DISPATCH(acc, add_inplace(acc, x)); }
inline void scale_inplace(Tensor& x, float factor) { FTRAIN_DISPATCH(x, scale_inplace(x, factor)); }
inline void fill(Tensor& x, float value) { FTRAIN_DISPATCH(x, fill(x, value)); }
inline void cast(const Tensor& src, Tensor& dst) { FTRAIN_DISPATCH(src, cast(src, dst)); }
inline double sum_squares(const Tensor& x) { FTRAIN_DISPATCH(x, sum_squares(x)); }
inline void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, float lr, float beta1, float beta2,
                         float eps, float weight_decay, std::int64_t step, float grad_scale) {
  FTRAIN_DISPATCH(param, adamw_update(param, grad, m, v, lr, beta1, beta2, eps, weight_decay, step, grad_scale));
}

#undef FTRAIN_DISPATCH
}  // namespace ops

}  // namespace ftrain
