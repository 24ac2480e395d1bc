// The argument checks of each op, made once by ops::<op> (kernels/dispatch.cpp)
// before the backend's entry is called, so every backend refuses bad input
// with the same words (TransformerEngine's CheckInputTensor idea). Shapes,
// dtypes, sizes and the op's own rules live here; a backend checks only what
// is its own (that a tensor is in its memory).
//
// Every op of op_list.hpp has a check declared below. An op added to the list
// without one gets the generated check that accepts anything, and
// test_shared_op_checks fails until it has its own.
#pragma once

#include <cstdint>

#include "core/tensor.hpp"
#include "kernels/fp8_tensor.hpp"
#include "kernels/math/token_rows.hpp"
#include "kernels/op_list.hpp"

namespace ftrain::op_checks {

// The GEMM dimensions of x[..., in] . w[out, in]^T: rows of x, in, out.
struct LinearDims {
  std::int64_t rows, in, out;
};
// Unchecked: what the backends use once linear_forward / linear_backward passed.
LinearDims linear_dims(const Tensor& x, const Tensor& w);

// Each check takes the op's parameters exactly as op_list.hpp declares them,
// so that it, a non-template, wins overload resolution over the fallback
// below (a check declared with other parameter types would silently lose to
// it: test_shared_op_checks lists the ops that take the fallback).
void linear_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y);
void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw, Tensor* db);
void rmsnorm_forward(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd);
void rmsnorm_backward(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dw);
void layernorm_forward(const Tensor& x, const Tensor& w, const Tensor* b, float eps, Tensor& y, Tensor& mean,
                       Tensor& rstd);
void layernorm_backward(const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd, const Tensor& dy,
                        Tensor& dx, Tensor& dw, Tensor* db);
void swiglu_forward(const Tensor& gate, const Tensor& up, Tensor& out);
void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate, Tensor& dup);
void gelu_forward(const Tensor& x, GeluApproximation approximation, Tensor& y);
void gelu_backward(const Tensor& x, const Tensor& dy, GeluApproximation approximation, Tensor& dx);
void embedding_forward(const Tensor& tokens, const Tensor& table, Tensor& out);
void embedding_backward(const Tensor& tokens, const Tensor& dout, Tensor& dtable);
void embedding_forward_rows(const Tensor& tokens, const Tensor& table, std::int64_t first_row, std::int64_t vocab,
                            Tensor& out);
void embedding_backward_rows(const Tensor& tokens, const Tensor& dout, std::int64_t first_row, Tensor& dtable);
void rope_forward(const Tensor& x, const Tensor& inv_freq, std::int64_t position_offset, const Tensor* positions,
                  Tensor& y);
void rope_backward(const Tensor& dy, const Tensor& inv_freq, std::int64_t position_offset, const Tensor* positions,
                   Tensor& dx);
void dropout(const Tensor& x, float p, std::uint64_t seed, std::uint64_t stream, std::int64_t first_row, Tensor& y);

// The patch grid of images [B, H, W, C] cut into patch_size squares.
// Unchecked: what the backends use once patchify_* passed.
math::PatchGeometry patch_geometry(const Tensor& images, std::int64_t patch_size);

void patchify_forward(const Tensor& images, std::int64_t patch_size, Tensor& patches);
void prepend_rows_forward(const Tensor& prefix, const Tensor& x, Tensor& out);
void prepend_rows_backward(const Tensor& dout, Tensor& dprefix, Tensor& dx);
void broadcast_add_forward(const Tensor& x, const Tensor& bias, Tensor& out);
void broadcast_add_backward(const Tensor& dout, Tensor& dbias);
void slice_rows_forward(const Tensor& x, std::int64_t first, Tensor& out);
void slice_rows_backward(const Tensor& dout, std::int64_t first, Tensor& dx);
void add(const Tensor& a, const Tensor& b, Tensor& out);
void add_inplace(Tensor& acc, const Tensor& x);
void scale_inplace(Tensor& x, float factor);
void fill(Tensor& x, float value);
void cast(const Tensor& src, Tensor& dst);
void sum(const Tensor& x, Tensor& out);
void sum_squares(const Tensor& x);  // the op returns the sum; its check nothing
void sum_squares_accumulate(const Tensor& x, Tensor& acc);
void clip_coefficient(const Tensor& sum_sq, double max_norm, std::int64_t step, Tensor& norm, Tensor& scale,
                      Tensor& diverged_step);
void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, float lr, float beta1, float beta2,
                  float eps, float weight_decay, std::int64_t step, float grad_scale);
void adamw_update_chunks(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const Tensor& chunks, float lr,
                         float beta1, float beta2, float eps, float weight_decay, std::int64_t step,
                         float grad_scale);
void adamw_update_chunks_guarded(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const Tensor& chunks,
                                 float lr, float beta1, float beta2, float eps, float weight_decay,
                                 std::int64_t step, const Tensor& grad_scale, const Tensor& diverged_step);
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, const Tensor* documents,
                       float softmax_scale, Tensor& out, Tensor& lse);
void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                        const Tensor& dout, bool causal, const Tensor* documents, float softmax_scale, Tensor& dq,
                        Tensor& dk, Tensor& dv);
void attention_block_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_positions,
                             const Tensor& k_positions, const Tensor* q_documents, const Tensor* k_documents,
                             bool causal, float softmax_scale, Tensor& out, Tensor& lse);
void attention_block_merge(Tensor& out, Tensor& lse, const Tensor& block_out, const Tensor& block_lse);
void attention_block_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& lse, const Tensor& dout, const Tensor& q_positions,
                              const Tensor& k_positions, const Tensor* q_documents, const Tensor* k_documents,
                              bool causal, float softmax_scale, Tensor& dq, Tensor& dk, Tensor& dv);
void cross_entropy_forward(const Tensor& h, const Tensor& w, const Tensor* bias, const Tensor& targets,
                           std::int64_t vocab_chunk, Tensor& losses, Tensor& lse);
void cross_entropy_backward(const Tensor& h, const Tensor& w, const Tensor* bias, const Tensor& targets,
                            const Tensor& lse, const Tensor& loss_scale, std::int64_t vocab_chunk, Tensor& dh,
                            Tensor& dw, Tensor* dbias);
void cross_entropy_slice_forward(const Tensor& h, const Tensor& w, const Tensor& targets, std::int64_t first_row,
                                 std::int64_t vocab, std::int64_t vocab_chunk, Tensor& local_lse, Tensor& target_logit);
void cross_entropy_slice_sum_exp(const Tensor& local_lse, const Tensor& row_max, Tensor& sum_exp);
void cross_entropy_slice_loss(const Tensor& row_max, const Tensor& sum_exp, const Tensor& target_logit,
                              const Tensor& targets, Tensor& losses, Tensor& lse);
void cross_entropy_slice_backward(const Tensor& h, const Tensor& w, const Tensor& targets, std::int64_t first_row,
                                  std::int64_t vocab, const Tensor& lse, const Tensor& loss_scale,
                                  std::int64_t vocab_chunk, Tensor& dh, Tensor& dw);
void cast_to_fp8(const Tensor& x, Fp8Tensor& out);
void fp8_transpose(const Tensor& data, Tensor& data_t);
void rmsnorm_forward_fp8(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd, Fp8Casts& casts);
void swiglu_forward_fp8(const Tensor& gate, const Tensor& up, Tensor& out, Fp8Tensor& cast);
void fp8_linear_forward(const Fp8Tensor& x, const Fp8Tensor& w, const Tensor* b, Tensor& y);
void fp8_linear_backward(const Fp8Tensor& x, const Fp8Tensor& w, const Fp8Tensor& dy, const Tensor& dy_source,
                         Tensor* dx, Tensor& dw, Tensor* db);
void fp8_update_scales(Tensor& amax_history, Tensor& scale, Tensor& scale_inv, DType forward_format,
                       DType backward_format, std::int64_t margin, Fp8AmaxAlgo algo);

// An op without a shared check above: accepts anything here. Its result
// type names the fallback, so that a test can list which ops take it
// (test_shared_op_checks: none may).
struct NoSharedCheck {};
#define FTRAIN_OP_CHECK_FALLBACK(R, NAME, PARAMS, ARGS, DEVICE_TENSOR) \
  template <class... Args>                                              \
  NoSharedCheck NAME(const Args&...) {                                  \
    return {};                                                          \
  }
FTRAIN_OP_LIST(FTRAIN_OP_CHECK_FALLBACK)
#undef FTRAIN_OP_CHECK_FALLBACK

}  // namespace ftrain::op_checks
