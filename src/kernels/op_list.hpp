// The op set of ftrain, listed once. Every other piece is generated from
// this list: the ops:: entry points (ops.hpp), the backend table (OpTable,
// backend_registry.hpp), the host kernels' declarations (host/host_ops.hpp)
// and the host backend's stream adapters (host_backend.cpp).
//
// X(return type, name, (parameters), (arguments), tensor whose device picks the backend)
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
//  * A parameter gradient output (dw, db, dtable) may be an UNDEFINED
//    Tensor (or a pointer to one): the parameter is frozen (LoRA, plugin/
//    lora.hpp) and the op computes only the activation gradient; no weight
//    gradient GEMM runs and nothing is accumulated.
#pragma once

#include <cstdint>

#include "core/tensor.hpp"
#include "kernels/fp8_tensor.hpp"

namespace ftrain {

enum class GeluApproximation : std::uint8_t { none, tanh };

// Ignored target rows in cross entropy (Hugging Face / PyTorch convention).
inline constexpr std::int32_t kIgnoreIndex = -100;

}  // namespace ftrain

// Strips the parentheses of a parameter or argument list.
#define FTRAIN_UNPAREN(...) __VA_ARGS__

#define FTRAIN_OP_LIST(X)                                                                                          \
  /* y[N,out] = x[N,in] . w[out,in]^T (+ b[out]) */                                                               \
  X(void, linear_forward, (const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y), (x, w, b, y), x)        \
  /* dx = dy . w (=); dw += dy^T . x; db += colsum(dy). dw/db f32 or bf16 */                                      \
  X(void, linear_backward, (const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw, Tensor* db), \
    (x, w, dy, dx, dw, db), x)                                                                                    \
  /* out[N,C] = table[tokens[N]]; tokens i32, out-of-range token is an error naming it */                         \
  X(void, embedding_forward, (const Tensor& tokens, const Tensor& table, Tensor& out), (tokens, table, out), table) \
  X(void, embedding_backward, (const Tensor& tokens, const Tensor& dout, Tensor& dtable), (tokens, dout, dtable),   \
    dout)                                                                                                         \
  /* Vocabulary-parallel embedding: table[Vs,C] holds rows [first_row, first_row + Vs) of a table of vocab     \
     rows; out[n] = table[tokens[n] - first_row] for a token in that range, else 0 (the group's sum is the      \
     lookup). A token outside [0, vocab) is an error naming it. */                                               \
  X(void, embedding_forward_rows,                                                                                 \
    (const Tensor& tokens, const Tensor& table, std::int64_t first_row, std::int64_t vocab, Tensor& out),        \
    (tokens, table, first_row, vocab, out), table)                                                               \
  /* dtable += the rows of dout whose token lies in [first_row, first_row + Vs), at token - first_row */         \
  X(void, embedding_backward_rows, (const Tensor& tokens, const Tensor& dout, std::int64_t first_row, Tensor& dtable), \
    (tokens, dout, first_row, dtable), dout)                                                                      \
  /* y = w * x / sqrt(mean(x^2) + eps) per row; rstd[N] f32 saved for backward */                                 \
  X(void, rmsnorm_forward, (const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd),                \
    (x, w, eps, y, rstd), x)                                                                                      \
  X(void, rmsnorm_backward,                                                                                       \
    (const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dw),             \
    (x, w, rstd, dy, dx, dw), x)                                                                                  \
  /* y = (x - mean) * rstd * w + b per row; mean[N], rstd[N] f32; b may be null */                                \
  X(void, layernorm_forward,                                                                                      \
    (const Tensor& x, const Tensor& w, const Tensor* b, float eps, Tensor& y, Tensor& mean, Tensor& rstd),         \
    (x, w, b, eps, y, mean, rstd), x)                                                                             \
  X(void, layernorm_backward,                                                                                     \
    (const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd, const Tensor& dy, Tensor& dx,      \
     Tensor& dw, Tensor* db),                                                                                     \
    (x, w, mean, rstd, dy, dx, dw, db), x)                                                                        \
  /* Rotary embedding, Hugging Face rotate-half: x[B,T,H,D], inv_freq f32[D/2]; position of token (b,t) is      \
     position_offset + t, or position_offset + positions[b,t] when positions (i32[B,T], >= 0, on x's device) is \
     given (a packed window whose positions restart at each document). y = x*cos + rotate_half(x)*sin.          \
     y may alias x. */                                                                                            \
  X(void, rope_forward,                                                                                           \
    (const Tensor& x, const Tensor& inv_freq, std::int64_t position_offset, const Tensor* positions, Tensor& y),  \
    (x, inv_freq, position_offset, positions, y), x)                                                              \
  /* dx = R^T dy; dx may alias dy */                                                                              \
  X(void, rope_backward,                                                                                          \
    (const Tensor& dy, const Tensor& inv_freq, std::int64_t position_offset, const Tensor* positions, Tensor& dx), \
    (dy, inv_freq, position_offset, positions, dx), dy)                                                           \
  /* out = silu(gate) * up, all [N, I] */                                                                         \
  X(void, swiglu_forward, (const Tensor& gate, const Tensor& up, Tensor& out), (gate, up, out), gate)              \
  X(void, swiglu_backward, (const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate, Tensor& dup), \
    (gate, up, dout, dgate, dup), gate)                                                                           \
  X(void, gelu_forward, (const Tensor& x, GeluApproximation approximation, Tensor& y), (x, approximation, y), x)   \
  X(void, gelu_backward, (const Tensor& x, const Tensor& dy, GeluApproximation approximation, Tensor& dx),         \
    (x, dy, approximation, dx), x)                                                                                \
  /* Non-overlapping patches (im2col of a conv with kernel = stride = P, no padding): images[B,H,W,Cin]         \
     (channels last, H and W multiples of P) -> patches[B*(H/P)*(W/P), Cin*P*P]. Row b*G + py*(W/P) + px,      \
     column (c*P + ky)*P + kx = pixel (py*P+ky, px*P+kx) channel c: a conv weight [Cout,Cin,P,P] is then the   \
     matrix [Cout, Cin*P*P] of linear_forward (ViT patch embedding). */                                          \
  X(void, patchify_forward, (const Tensor& images, std::int64_t patch_size, Tensor& patches),                    \
    (images, patch_size, patches), images)                                                                        \
  /* out[b] = rows of prefix, then rows of x[b]: prefix[R,C] shared by the batch (a class token), x[B,N,C],      \
     out[B,R+N,C] */                                                                                              \
  X(void, prepend_rows_forward, (const Tensor& prefix, const Tensor& x, Tensor& out), (prefix, x, out), x)        \
  /* dprefix += sum over b of dout[b, :R] (f32, batch order); dx[b] = dout[b, R:] (=) */                         \
  X(void, prepend_rows_backward, (const Tensor& dout, Tensor& dprefix, Tensor& dx), (dout, dprefix, dx), dout)    \
  /* out[b] = x[b] + bias: bias[R,C] broadcast over the batch of x[B,R,C] (position embedding); out may        \
     alias x */                                                                                                   \
  X(void, broadcast_add_forward, (const Tensor& x, const Tensor& bias, Tensor& out), (x, bias, out), x)          \
  /* dbias += sum over b of dout[b] (f32, batch order); dx is dout itself (no op) */                             \
  X(void, broadcast_add_backward, (const Tensor& dout, Tensor& dbias), (dout, dbias), dout)                       \
  /* out[b] = x[b, first : first+R]: x[B,T,C], out[B,R,C] (the class token of each image) */                     \
  X(void, slice_rows_forward, (const Tensor& x, std::int64_t first, Tensor& out), (x, first, out), x)            \
  /* dx[b, first : first+R] = dout[b], every other row of dx = 0 (=) */                                          \
  X(void, slice_rows_backward, (const Tensor& dout, std::int64_t first, Tensor& dx), (dout, first, dx), dout)    \
  /* Flash attention (tiled, online softmax; never materialises T x T).                                          \
     q[B,T,Hq,D], k,v[B,T,Hkv,D] with Hq % Hkv == 0 (GQA); out[B,T,Hq,D]; lse f32[B,Hq,T] (natural log).         \
     causal: key j visible to query i iff j <= i. documents (nullptr = none): i32[B,T] document id of each       \
     token, non-decreasing along T (a packed window); key j is then visible only if also                         \
     documents[b,j] == documents[b,i]. */                                                                         \
  X(void, attention_forward,                                                                                      \
    (const Tensor& q, const Tensor& k, const Tensor& v, bool causal, const Tensor* documents, float softmax_scale, \
     Tensor& out, Tensor& lse),                                                                                   \
    (q, k, v, causal, documents, softmax_scale, out, lse), q)                                                     \
  /* dq, dk, dv written (=); recomputes probabilities from lse */                                                 \
  X(void, attention_backward,                                                                                     \
    (const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& dout,  \
     bool causal, const Tensor* documents, float softmax_scale, Tensor& dq, Tensor& dk, Tensor& dv),              \
    (q, k, v, out, lse, dout, causal, documents, softmax_scale, dq, dk, dv), q)                                   \
  /* Ring attention's blocks (context parallelism, layers/context_parallel_attention.hpp): queries              \
     q[B,Tq,Hq,D] against one block of keys and values k,v[B,Tk,Hkv,D] of the same samples. q_positions          \
     i32[B,Tq], k_positions i32[B,Tk]: each token's index in its whole sequence; causal: key j visible to query  \
     i iff k_positions[b,j] <= q_positions[b,i]. q_documents i32[B,Tq], k_documents i32[B,Tk] (both nullptr =    \
     none): key j then visible only if also of query i's document. out[B,Tq,Hq,D] = the block's softmax over     \
     its visible keys times v; lse f32[B,Hq,Tq] of the block (-inf, out 0, where no key is visible). */          \
  X(void, attention_block_forward,                                                                                \
    (const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_positions, const Tensor& k_positions,      \
     const Tensor* q_documents, const Tensor* k_documents, bool causal, float softmax_scale, Tensor& out,          \
     Tensor& lse),                                                                                                 \
    (q, k, v, q_positions, k_positions, q_documents, k_documents, causal, softmax_scale, out, lse), q)            \
  /* Online merge of two blocks' results over the same queries: (out, lse) becomes the attention over the union \
     of both blocks' keys (log-sum-exp rescaling), in place. out f32[B,T,H,D], lse f32[B,H,T]; block_out         \
     [B,T,H,D] f32 or bf16, block_lse f32[B,H,T]; rows at -inf on both sides stay 0 and -inf. */                  \
  X(void, attention_block_merge, (Tensor& out, Tensor& lse, const Tensor& block_out, const Tensor& block_lse),    \
    (out, lse, block_out, block_lse), out)                                                                        \
  /* Backward of one block given the FINAL out and lse (merged over every block) and dout[B,Tq,Hq,D]: dq, dk,   \
     dv ACCUMULATE (+=; f32 to keep the sum over blocks exact to rounding), so dq sums over the key blocks and   \
     dk, dv over the query blocks. */                                                                              \
  X(void, attention_block_backward,                                                                               \
    (const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& dout,  \
     const Tensor& q_positions, const Tensor& k_positions, const Tensor* q_documents, const Tensor* k_documents,  \
     bool causal, float softmax_scale, Tensor& dq, Tensor& dk, Tensor& dv),                                       \
    (q, k, v, out, lse, dout, q_positions, k_positions, q_documents, k_documents, causal, softmax_scale, dq, dk,  \
     dv), q)                                                                                                       \
  /* Fused linear head + softmax cross entropy, chunked over the vocabulary so full logits are never            \
     materialised: logits = h[N,C] . w[V,C]^T (+ bias[V]). targets i32[N] (kIgnoreIndex rows give 0 loss).      \
     losses f32[N] = lse - logit[target]; lse f32[N]. */                                                          \
  X(void, cross_entropy_forward,                                                                                  \
    (const Tensor& h, const Tensor& w, const Tensor* bias, const Tensor& targets, std::int64_t vocab_chunk,        \
     Tensor& losses, Tensor& lse),                                                                                \
    (h, w, bias, targets, vocab_chunk, losses, lse), h)                                                           \
  /* Gradient of sum_i loss_scale * losses[i]: dh (=), dw (+=), dbias (+=, may be null). loss_scale is f32[1]   \
     on the op's device (the head's dy), read by the kernel: the scale never visits the host. */                  \
  X(void, cross_entropy_backward,                                                                                 \
    (const Tensor& h, const Tensor& w, const Tensor* bias, const Tensor& targets, const Tensor& lse,              \
     const Tensor& loss_scale, std::int64_t vocab_chunk, Tensor& dh, Tensor& dw, Tensor* dbias),                  \
    (h, w, bias, targets, lse, loss_scale, vocab_chunk, dh, dw, dbias), h)                                        \
  /* Vocabulary-parallel head (tensor parallelism): w[Vs,C] holds rows [first_row, first_row + Vs) of a head of  \
     vocab rows. local_lse f32[N] = log-sum-exp of this slice's logits; target_logit f32[N] = the target's logit  \
     when the target lies in the slice, else 0. Targets outside [0, vocab) and not kIgnoreIndex are an error. */  \
  X(void, cross_entropy_slice_forward,                                                                            \
    (const Tensor& h, const Tensor& w, const Tensor& targets, std::int64_t first_row, std::int64_t vocab,         \
     std::int64_t vocab_chunk, Tensor& local_lse, Tensor& target_logit),                                          \
    (h, w, targets, first_row, vocab, vocab_chunk, local_lse, target_logit), h)                                   \
  /* sum_exp f32[N] = exp(local_lse - row_max): a slice's share of the softmax sum under the group's row max */   \
  X(void, cross_entropy_slice_sum_exp, (const Tensor& local_lse, const Tensor& row_max, Tensor& sum_exp),         \
    (local_lse, row_max, sum_exp), local_lse)                                                                     \
  /* lse f32[N] = row_max + log(sum_exp) (sums over the group); losses f32[N] = lse - target_logit, 0 for       \
     ignored targets. lse may alias row_max. */                                                                   \
  X(void, cross_entropy_slice_loss,                                                                               \
    (const Tensor& row_max, const Tensor& sum_exp, const Tensor& target_logit, const Tensor& targets,             \
     Tensor& losses, Tensor& lse),                                                                                \
    (row_max, sum_exp, target_logit, targets, losses, lse), row_max)                                              \
  /* cross_entropy_backward over a slice with the full lse: dh (=) is this slice's part of the input gradient   \
     (the group's sum is the whole); dw (+=) the slice's weight gradient. */                                      \
  X(void, cross_entropy_slice_backward,                                                                           \
    (const Tensor& h, const Tensor& w, const Tensor& targets, std::int64_t first_row, std::int64_t vocab,         \
     const Tensor& lse, const Tensor& loss_scale, std::int64_t vocab_chunk, Tensor& dh, Tensor& dw),              \
    (h, w, targets, first_row, vocab, lse, loss_scale, vocab_chunk, dh, dw), h)                                   \
  /* Inverted dropout, x[N,C] -> y: y = x * keep / (1 - p), keep iff rng::uniform(seed, stream,                \
     (first_row + i) * C + j) >= p (core/rng.hpp; rows are global, so any slice of rows on any rank draws the     \
     mask one rank would). Its own backward: the same call on dy. p in [0, 1); y may alias x. */                 \
  X(void, dropout,                                                                                                \
    (const Tensor& x, float p, std::uint64_t seed, std::uint64_t stream, std::int64_t first_row, Tensor& y),      \
    (x, p, seed, stream, first_row, y), x)                                                                        \
  /* out = a + b (residual stream); out may alias a or b */                                                       \
  X(void, add, (const Tensor& a, const Tensor& b, Tensor& out), (a, b, out), a)                                   \
  /* acc += x (residual gradients, gradient accumulation) */                                                      \
  X(void, add_inplace, (Tensor& acc, const Tensor& x), (acc, x), acc)                                             \
  X(void, scale_inplace, (Tensor& x, float factor), (x, factor), x)                                               \
  X(void, fill, (Tensor& x, float value), (x, value), x)                                                          \
  /* dst = src converted (float dtypes incl. fp8, saturating); same numel */                                      \
  X(void, cast, (const Tensor& src, Tensor& dst), (src, dst), src)                                                \
  /* out f32[1] = sum of x (float dtypes), accumulated in f64 in index order: a loss sum that stays on the       \
     device (the model heads' f32[1] loss) */                                                                     \
  X(void, sum, (const Tensor& x, Tensor& out), (x, out), x)                                                       \
  /* sum of squares in f64 (global-norm clipping). Returns a host value: waits for the compute stream. */         \
  X(double, sum_squares, (const Tensor& x), (x), x)                                                               \
  /* acc f64[1] += sum of squares of x, the same f64 arithmetic as sum_squares, on the device: the gradient       \
     norm's per-shard partials without a host read */                                                            \
  X(void, sum_squares_accumulate, (const Tensor& x, Tensor& acc), (x, acc), x)                                    \
  /* Global-norm clipping on the device (torch clip_grad_norm_ + AMP's found_inf): norm f64[1] = sqrt(sum_sq      \
     f64[1]); scale f32[1] = float(max_norm / (norm + 1e-6)) when max_norm > 0 and norm > max_norm, else 1 (in   \
     f64, the trainer's former host arithmetic); diverged_step i64[1] = step when norm is not finite and it held  \
     0 (sticky: the first diverged step stays until the host resets it). */                                      \
  X(void, clip_coefficient,                                                                                       \
    (const Tensor& sum_sq, double max_norm, std::int64_t step, Tensor& norm, Tensor& scale, Tensor& diverged_step), \
    (sum_sq, max_norm, step, norm, scale, diverged_step), sum_sq)                                                 \
  /* AdamW on one contiguous f32 range (decoupled decay, bias correction with step >= 1):                        \
     g = grad * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;                                          \
     p -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * p) */                                                  \
  X(void, adamw_update,                                                                                           \
    (Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, float lr, float beta1, float beta2, float eps,      \
     float weight_decay, std::int64_t step, float grad_scale),                                                    \
    (param, grad, m, v, lr, beta1, beta2, eps, weight_decay, step, grad_scale), param)                            \
  /* FP8 (kernels/fp8_tensor.hpp: descriptors; fp8/recipe.hpp: the delayed-scaling recipe).                      \
     out.data = fp8(x * scale) in out.format() (round to nearest even, saturating; NaN stays NaN) with scale     \
     read from out.scale on the device; out.scale_inv = 1 / scale; out.amax (when defined) =                     \
     max(out.amax, max |x|), NaN when x holds a NaN. Nothing is read back to the host. */                       \
  X(void, cast_to_fp8, (const Tensor& x, Fp8Tensor& out), (x, out), x)                                            \
  /* data_t [cols, rows] = the transposed copy of FP8 codes data [..., cols] (math::transposed_index), bytes     \
     moved, nothing cast: the copy a device's TN-only FP8 GEMMs read, for an FP8 weight the engine gathered    \
     as FP8 (fsdp/fp8_all_gather.hpp) instead of casting it here. */                                            \
  X(void, fp8_transpose, (const Tensor& data, Tensor& data_t), (data, data_t), data)                              \
  /* Fused producers of FP8 GEMM inputs (kernels/math/fp8_fusions.hpp): bit for bit the unfused pair, the      \
     activation written (y / out, its dtype's rounding) and then cast_to_fp8 of THAT stored value, so the codes    \
     and amax equal rmsnorm_forward + cast_to_fp8 (one per cast, each with its own scale and amax slot) and      \
     swiglu_forward + cast_to_fp8. The Fp8Tensors' data_t must be undefined (no transposed copy here). */       \
  X(void, rmsnorm_forward_fp8, (const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd,             \
    Fp8Casts& casts), (x, w, eps, y, rstd, casts), x)                                                             \
  X(void, swiglu_forward_fp8, (const Tensor& gate, const Tensor& up, Tensor& out, Fp8Tensor& cast),               \
    (gate, up, out, cast), gate)                                                                                  \
  /* y[N,out] = (x.data . w.data^T) * (scale_inv_x scale_inv_w) (+ b[out]): the FP8 values multiplied exactly,   \
     f32 accumulation, the factor (math::fp8_dequantisation_factor of the descriptors' scale_inv, never their     \
     scale: cuBLASLt's scale pointers) applied to the f32 result (Hopper's FP8 GEMM); b and y any float dtype. */\
  X(void, fp8_linear_forward, (const Fp8Tensor& x, const Fp8Tensor& w, const Tensor* b, Tensor& y), (x, w, b, y),  \
    x.data)                                                                                                       \
  /* dx = (dy.data . w.data) * (scale_inv_dy scale_inv_w) (=, any float dtype); dw f32 += (dy.data^T . x.data)  \
     * (scale_inv_dy scale_inv_x); db f32 += colsum(dy_source), the unquantised gradient dy was cast from (TE's  \
     gradient). dx and db may be null. */                                                                         \
  X(void, fp8_linear_backward,                                                                                    \
    (const Fp8Tensor& x, const Fp8Tensor& w, const Fp8Tensor& dy, const Tensor& dy_source, Tensor* dx, Tensor& dw, \
     Tensor* db),                                                                                                 \
    (x, w, dy, dy_source, dx, dw, db), dy.data)                                                                   \
  /* Delayed-scaling update of one linear layer, entirely on the device: amax_history f32[L, 3] (columns         \
     Fp8Operand; row 0 the iteration just finished), scale f32[3]. Per column: amax = max over the history       \
     (algo max, NaN-propagating) or row 0 (most_recent); scale = fp8_max / amax / 2^margin (fp8_max of           \
     forward_format for input and weight, of backward_format for grad_output), kept when that is not finite      \
     and positive; scale_inv f32[3] = 1 / scale for EVERY column (changed or kept: an FP8 weight gathered as     \
     FP8 is never cast on a rank that owns none of it, and the GEMMs dequantise with scale_inv); then the         \
     history rolls (row 0 moves to row L-1, row 0 = 0: TE's roll). */                                            \
  X(void, fp8_update_scales,                                                                                      \
    (Tensor& amax_history, Tensor& scale, Tensor& scale_inv, DType forward_format, DType backward_format,         \
     std::int64_t margin, Fp8AmaxAlgo algo),                                                                      \
    (amax_history, scale, scale_inv, forward_format, backward_format, margin, algo), amax_history)              \
  /* Multi-tensor AdamW: one launch over a whole flat shard (param, grad, m, v f32 of one size) covering the      \
     ranges of a chunk table, chunks i64[n, 3] (kernels/adamw_chunks.hpp: rows {offset, count, decay},             \
     count <= kAdamwChunkElements, in bounds, decay 0 or 1), each element updated exactly as adamw_update with     \
     weight_decay where its row's decay is 1 and 0 where it is 0. Elements no row covers (padding) are left       \
     alone. Same bits as one adamw_update per range. */                                                          \
  X(void, adamw_update_chunks,                                                                                    \
    (Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const Tensor& chunks, float lr, float beta1,        \
     float beta2, float eps, float weight_decay, std::int64_t step, float grad_scale),                            \
    (param, grad, m, v, chunks, lr, beta1, beta2, eps, weight_decay, step, grad_scale), param)                    \
  /* adamw_update_chunks with grad_scale read from an f32[1] on the device (clip_coefficient's scale), skipped  \
     entirely (param, m, v unchanged) while diverged_step i64[1] is non-zero: a diverged step changes nothing     \
     and nothing is read on the host to decide it */                                                            \
  X(void, adamw_update_chunks_guarded,                                                                            \
    (Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const Tensor& chunks, float lr, float beta1,        \
     float beta2, float eps, float weight_decay, std::int64_t step, const Tensor& grad_scale,                     \
     const Tensor& diverged_step),                                                                                \
    (param, grad, m, v, chunks, lr, beta1, beta2, eps, weight_decay, step, grad_scale, diverged_step), param)
