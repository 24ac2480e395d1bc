// The CUDA kernels' launchers: raw device pointers, element counts and a
// stream, no Tensor (so nvcc never sees the engine's headers). The op table
// (cuda_ops.cpp) checks tensors exactly as the host kernels do, then calls
// these. Each launcher is defined in the .cu file named in its comment and
// computes with the kernels/math/ function named there, the one the host
// kernel calls too.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/input_check_record.hpp"
#include "kernels/math/adamw.hpp"
#include "kernels/math/token_rows.hpp"

namespace ftrain::cuda {

// Storage element type of a float tensor as the kernels see it.
enum class Storage : std::uint8_t { f32, bf16 };

struct FloatSpan {
  void* data;
  Storage storage;
};

// elementwise.cu: math::add_value, math::scale_value
void launch_add(FloatSpan a, FloatSpan b, FloatSpan out, std::int64_t n, cudaStream_t stream);
void launch_add_inplace(FloatSpan acc, FloatSpan x, std::int64_t n, cudaStream_t stream);
void launch_scale_inplace(FloatSpan x, float factor, std::int64_t n, cudaStream_t stream);
// Fills n elements of `element_bytes` (1, 2, 4 or 8) with one encoded bit pattern.
void launch_fill_pattern(void* data, int element_bytes, std::uint64_t pattern, std::int64_t n, cudaStream_t stream);
// f32 <-> bf16 (same storage: a copy)
void launch_cast(FloatSpan src, FloatSpan dst, std::int64_t n, cudaStream_t stream);
// Casts between f32, bf16 and f16 (math/f16.hpp for f16, base/hd.hpp for
// bf16): widen to f32, round to the destination, as the host cast.
enum class CastElement : std::uint8_t { f32, bf16, f16, fp8_e4m3, fp8_e5m2 };
void launch_cast_elements(const void* src, CastElement src_type, void* dst, CastElement dst_type, std::int64_t n,
                          cudaStream_t stream);
// sum into f32[1] in double; sum of squares (math::square_in_double) into a
// device double. Two passes in kernels/math/reduction.hpp's order (the
// host's): the same bits every run, on any device, as the host. `partials`:
// device scratch of reduction_partials(n) doubles (at least one), free
// for reuse once the launch's work has run (stream order).
std::int64_t reduction_partials(std::int64_t n);
void launch_sum(FloatSpan x, std::int64_t n, double* partials, float* out, cudaStream_t stream);
void launch_sum_squares(FloatSpan x, std::int64_t n, double* partials, double* out, cudaStream_t stream);
// *acc += the same f64 sum of squares (sum_squares_accumulate).
void launch_sum_squares_accumulate(FloatSpan x, std::int64_t n, double* partials, double* acc, cudaStream_t stream);

// clipping.cu: math::norm_from_sum_squares, math::clip_scale,
// math::diverged_step_after, on one thread (scalars that stay on the device).
void launch_clip_coefficient(const double* sum_sq, double max_norm, std::int64_t step, double* norm, float* scale,
                             std::int64_t* diverged_step, cudaStream_t stream);
// Column sums of [rows, cols] added (+=) into acc[cols], rows in order.
void launch_column_sum_accumulate(FloatSpan rows_data, std::int64_t rows, std::int64_t cols, FloatSpan acc,
                                  cudaStream_t stream);

// activations.cu: math::GeluExact / GeluTanh, math::swiglu_value / swiglu_grads
void launch_gelu_forward(FloatSpan x, bool tanh_form, FloatSpan y, std::int64_t n, cudaStream_t stream);
void launch_gelu_backward(FloatSpan x, FloatSpan dy, bool tanh_form, FloatSpan dx, std::int64_t n,
                          cudaStream_t stream);
void launch_swiglu_forward(FloatSpan gate, FloatSpan up, FloatSpan out, std::int64_t n, cudaStream_t stream);
void launch_swiglu_backward(FloatSpan gate, FloatSpan up, FloatSpan dout, FloatSpan dgate, FloatSpan dup,
                            std::int64_t n, cudaStream_t stream);

// norms.cu: math::rmsnorm_* / layernorm_*; dw/db by column sums in row order.
void launch_rmsnorm_forward(FloatSpan x, FloatSpan w, float eps, FloatSpan y, float* rstd, std::int64_t rows,
                            std::int64_t width, cudaStream_t stream);
// The backward's dw (and LayerNorm's db) in kernels/math/column_sums.hpp's
// order, the host's: `partials` is device scratch of
// norm_backward_partials(rows, width, count) floats, count 1 (dw) or 2
// (dw and db), free for reuse once the launch's work has run.
std::int64_t norm_backward_partials(std::int64_t rows, std::int64_t width, int count);
void launch_rmsnorm_backward(FloatSpan x, FloatSpan w, const float* rstd, FloatSpan dy, FloatSpan dx, FloatSpan dw,
                             float* partials, std::int64_t rows, std::int64_t width, cudaStream_t stream);
void launch_layernorm_forward(FloatSpan x, FloatSpan w, FloatSpan b, float eps, FloatSpan y, float* mean,
                              float* rstd, std::int64_t rows, std::int64_t width, cudaStream_t stream);
// db.data may be null.
void launch_layernorm_backward(FloatSpan x, FloatSpan w, const float* mean, const float* rstd, FloatSpan dy,
                               FloatSpan dx, FloatSpan dw, FloatSpan db, float* partials, std::int64_t rows,
                               std::int64_t width, cudaStream_t stream);

// rope.cu: math::rope_angle, math::rope_rotate. positions: i32 [batch, time]
// or null (position_offset + t).
void launch_rope(FloatSpan in, const float* inv_freq, std::int64_t position_offset, const std::int32_t* positions,
                 FloatSpan out, float direction, std::int64_t batch, std::int64_t time, std::int64_t heads, std::int64_t head_dim,
                 cudaStream_t stream);

// adamw.cu: math::adamw_step
void launch_adamw(float* param, const float* grad, float* m, float* v, const math::AdamwConstants& k,
                  std::int64_t n, cudaStream_t stream);
// adamw_update_chunks: math::adamw_step over the rows of a device chunk
// table i64[chunks, math::kAdamwChunkColumns] of an n-element shard, each
// row with k's weight decay or none (math::adamw_chunk_constants), in one
// launch (adamw_chunks_launch). Rows are clamped to [0, n): a kernel cannot
// throw, so a bad table must not write outside the shard (the host backend
// checks every row and refuses it).
void launch_adamw_chunks(float* param, const float* grad, float* m, float* v, const std::int64_t* chunks,
                         std::int64_t chunk_count, const math::AdamwConstants& k, std::int64_t n,
                         cudaStream_t stream);
// The guarded form: k.grad_scale replaced by *grad_scale, every element left
// alone while math::adamw_step_skipped(*diverged_step); both read on the
// device, in stream order.
void launch_adamw_chunks_guarded(float* param, const float* grad, float* m, float* v, const std::int64_t* chunks,
                                 std::int64_t chunk_count, const math::AdamwConstants& k, const float* grad_scale,
                                 const std::int64_t* diverged_step, std::int64_t n, cudaStream_t stream);

// attention.cu: math::attention_kv_head / attention_bshd_row /
// attention_key_end / attention_first_query / attention_key_visible /
// attention_key_tile_visible / attention_lse_index. q, out, dq, dout
// [B, T, Hq, D]; k, v, dk, dv [B, T, Hkv, D]; lse f32 [B, Hq, T];
// documents: device i32 [B, T] document ids of packed windows, or null.
// The on-device oracle: one thread per row, f32, no atomics.
constexpr std::int64_t kAttentionReferenceMaxHeadDim = 256;
struct AttentionDims {
  std::int64_t batch, seq, q_heads, kv_heads, head_dim;
};
void launch_attention_reference_forward(FloatSpan q, FloatSpan k, FloatSpan v, bool causal,
                                        const std::int32_t* documents, float scale, FloatSpan out, float* lse,
                                        AttentionDims dims, cudaStream_t stream);
void launch_attention_reference_backward(FloatSpan q, FloatSpan k, FloatSpan v, FloatSpan out, const float* lse,
                                         FloatSpan dout, bool causal, const std::int32_t* documents, float scale,
                                         FloatSpan dq, FloatSpan dk, FloatSpan dv, AttentionDims dims,
                                         cudaStream_t stream);

// attention_block.cu: ring attention's blocks (op_list.hpp, attention_block_*),
// the reference attention's scheme with math::attention_block_key_visible:
// q, out, dq, dout [B, Tq, Hq, D]; k, v, dk, dv [B, Tk, Hkv, D]; lse f32
// [B, Hq, Tq]; positions and documents (null: none) device i32 [B, Tq] and
// [B, Tk]. The backward accumulates (+=) into dq, dk, dv.
struct AttentionBlockDims {
  std::int64_t batch, q_len, k_len, q_heads, kv_heads, head_dim;
};
struct AttentionBlockTokens {
  const std::int32_t* q_positions;
  const std::int32_t* k_positions;
  const std::int32_t* q_documents;
  const std::int32_t* k_documents;
};
void launch_attention_block_forward(FloatSpan q, FloatSpan k, FloatSpan v, AttentionBlockTokens tokens, bool causal,
                                    float scale, FloatSpan out, float* lse, AttentionBlockDims dims,
                                    cudaStream_t stream);
void launch_attention_block_merge(float* out, float* lse, FloatSpan block_out, const float* block_lse,
                                  std::int64_t batch, std::int64_t seq, std::int64_t heads, std::int64_t head_dim,
                                  cudaStream_t stream);
void launch_attention_block_backward(FloatSpan q, FloatSpan k, FloatSpan v, FloatSpan out, const float* lse,
                                     FloatSpan dout, AttentionBlockTokens tokens, bool causal, float scale,
                                     FloatSpan dq, FloatSpan dk, FloatSpan dv, AttentionBlockDims dims,
                                     cudaStream_t stream);

// cross_entropy.cu: the per-row and per-logit steps of the fused, chunked
// cross entropy (cross_entropy_head.cpp runs the GEMMs around them):
// math::running_max, softmax_term, rescaled_running_sum, log_sum_exp,
// cross_entropy_loss, cross_entropy_dlogit, cross_entropy_target_correction,
// cross_entropy_target_valid. logits are the f32 [rows, cs] chunk of
// vocabulary columns [v0, v0 + cs); bias (data may be null) is the whole
// bias[V], its column v0 + c added to logit c first, as the host does.
// Online log-sum-exp state per row: running max -inf, running sum 0, target logit 0.
void launch_cross_entropy_init(float* row_max, float* row_sum, float* target_logit, std::int64_t rows,
                               cudaStream_t stream);
// One block per row: the chunk's max and sum of softmax terms merged into
// the row's state, the target's logit picked when the chunk holds it.
// first_row: the vocabulary row of the logits' column 0 (a slice's, tensor
// parallelism; 0 for the whole head), math::cross_entropy_local_target.
void launch_cross_entropy_forward_chunk(float* logits, FloatSpan bias, const std::int32_t* targets,
                                        std::int64_t first_row, std::int64_t rows, std::int64_t v0, std::int64_t cs,
                                        float* row_max, float* row_sum, float* target_logit, cudaStream_t stream);
// losses[i], lse[i] from the state (ignored rows: loss 0).
void launch_cross_entropy_finish(const float* row_max, const float* row_sum, const float* target_logit,
                                 const std::int32_t* targets, std::int64_t rows, float* losses, float* lse,
                                 cudaStream_t stream);
// A vocabulary slice's forward ends here: lse[i] of its own rows only.
void launch_cross_entropy_row_lse(const float* row_max, const float* row_sum, std::int64_t rows, float* lse,
                                  cudaStream_t stream);
// math::cross_entropy_slice_sum_exp per row.
void launch_cross_entropy_slice_sum_exp(const float* local_lse, const float* row_max, std::int64_t rows,
                                        float* sum_exp, cudaStream_t stream);
// logits -> dlogit = loss_scale (softmax - onehot) in place (0 on ignored
// rows), loss_scale read on the device; dlogit_bf16 (may be null) gets the
// same values rounded to bf16 for bf16 GEMMs. first_row as in the forward.
void launch_cross_entropy_backward_chunk(float* logits, FloatSpan bias, const std::int32_t* targets,
                                         std::int64_t first_row, const float* lse, const float* loss_scale,
                                         std::int64_t rows, std::int64_t v0, std::int64_t cs,
                                         std::uint16_t* dlogit_bf16, cudaStream_t stream);

// input_checks.cu (input_check_record.hpp): enqueues the range check of
// values[0 .. n) against [0, bound) (the cross entropy's: the ignore index
// -100 is valid too) on `stream`, recording the first bad row in the
// device record; nothing is read back here.
void launch_input_range_check(InputCheck check, const std::int32_t* values, std::int64_t n, std::int64_t bound,
                              cudaStream_t stream);
// After `stream` was synchronized: reads the record (a copy in the order of
// `stream`), clears the slots it found set and throws the first one's error
// (describe_bad_input). Nothing when no check ever ran.
void raise_input_check_errors(cudaStream_t stream);

// embedding.cu: math::embedding_token_valid. An invalid token leaves its
// output alone and is recorded by the device range check
// (launch_input_range_check), thrown at the next synchronisation.
void launch_embedding_forward(const std::int32_t* tokens, std::int64_t n_tokens, FloatSpan table,
                              std::int64_t vocab, std::int64_t width, FloatSpan out, cudaStream_t stream);
// Deterministic: the rows grouped by token with a stable device radix sort,
// each token's rows summed in row order (f32) and the sum added once, as
// the host does. `scratch`: device memory of
// embedding_backward_scratch_bytes(n_tokens, vocab) bytes, free for reuse
// once the launch's work has run (stream order).
std::size_t embedding_backward_scratch_bytes(std::int64_t n_tokens, std::int64_t vocab);
void launch_embedding_backward(const std::int32_t* tokens, std::int64_t n_tokens, FloatSpan dout,
                               std::int64_t vocab, std::int64_t width, FloatSpan dtable, void* scratch,
                               cudaStream_t stream);
// The vocabulary-parallel pair (tensor parallelism): table / dtable hold the
// `rows` vocabulary rows from first_row on (math::embedding_slice_row).
// Forward: out is the row for a token the slice holds, 0 for any other;
// tokens are range-checked against the whole `vocab`. Backward: the rows of
// dout whose token the slice holds, added as launch_embedding_backward adds
// them (scratch: embedding_backward_scratch_bytes(n_tokens, rows)); like
// the host op, no range check (the forward made it).
void launch_embedding_forward_rows(const std::int32_t* tokens, std::int64_t n_tokens, FloatSpan table,
                                   std::int64_t first_row, std::int64_t rows, std::int64_t vocab, std::int64_t width,
                                   FloatSpan out, cudaStream_t stream);
void launch_embedding_backward_rows(const std::int32_t* tokens, std::int64_t n_tokens, FloatSpan dout,
                                    std::int64_t first_row, std::int64_t rows, std::int64_t width, FloatSpan dtable,
                                    void* scratch, cudaStream_t stream);

// token_rows.cu: the ViT row ops (kernels/math/token_rows.hpp's index
// math, math::add_value, math::batch_sum_step), each tensor f32 or bf16 on
// its own; one thread per output element (row_copy_launch), batch sums one
// thread per column in batch order (batch_sum_launch).
// patches[g.rows(), g.cols()] from images [B, H, W, C].
void launch_patchify_forward(FloatSpan images, math::PatchGeometry g, FloatSpan patches, cudaStream_t stream);
// out [B, R + N, C] = prefix [R, C] rows then x [B, N, C] rows per item.
void launch_prepend_rows_forward(FloatSpan prefix, FloatSpan x, FloatSpan out, std::int64_t batch,
                                 std::int64_t prefix_rows, std::int64_t rows, std::int64_t width, cudaStream_t stream);
// dx [B, N, C] = rows R.. of dout [B, R + N, C] (dprefix: launch_batch_sum_accumulate).
void launch_prepend_rows_dx(FloatSpan dout, FloatSpan dx, std::int64_t batch, std::int64_t prefix_rows,
                            std::int64_t rows, std::int64_t width, cudaStream_t stream);
// out [B, R, C] = x + bias [R, C] (out may alias x).
void launch_broadcast_add_forward(FloatSpan x, FloatSpan bias, FloatSpan out, std::int64_t batch, std::int64_t rows,
                                  std::int64_t width, cudaStream_t stream);
// acc[e] += sum over b < batch (in order) of src[b * stride + e], e < n.
void launch_batch_sum_accumulate(FloatSpan src, std::int64_t batch, std::int64_t stride, FloatSpan acc,
                                 std::int64_t n, cudaStream_t stream);
// out [B, R, C] = rows first.. of x [B, T, C]; dx = dout there, 0 elsewhere.
void launch_slice_rows_forward(FloatSpan x, std::int64_t first, FloatSpan out, std::int64_t batch,
                               std::int64_t count, std::int64_t total, std::int64_t width, cudaStream_t stream);
void launch_slice_rows_backward(FloatSpan dout, std::int64_t first, FloatSpan dx, std::int64_t batch,
                                std::int64_t count, std::int64_t total, std::int64_t width, cudaStream_t stream);

// dropout.cu: math::dropout_value / dropout_mask_index (y may alias x).
void launch_dropout(FloatSpan x, float p, std::uint64_t seed, std::uint64_t mask_stream, std::int64_t first_row,
                    std::int64_t width, FloatSpan y, std::int64_t n, cudaStream_t stream);

}  // namespace ftrain::cuda
