// The CUDA fused linear head + softmax cross entropy (op_list.hpp's
// cross_entropy_forward / cross_entropy_backward and their vocabulary-parallel
// slices), chunked over the
// vocabulary: cross_entropy_head.cpp. Kept apart from cuda_ops.cpp because
// it is a small pipeline of its own (cuBLASLt plans + the row kernels of
// cross_entropy.cu), not one launch.
#pragma once

#include <cstdint>

#include "core/tensor.hpp"

namespace ftrain {
class ExecutionContext;
}

namespace ftrain::cuda {

void cross_entropy_head_forward(ExecutionContext& ctx, const Tensor& h, const Tensor& w, const Tensor* bias,
                                const Tensor& targets, std::int64_t vocab_chunk, Tensor& losses, Tensor& lse);
void cross_entropy_head_backward(ExecutionContext& ctx, const Tensor& h, const Tensor& w, const Tensor* bias,
                                 const Tensor& targets, const Tensor& lse, const Tensor& loss_scale,
                                 std::int64_t vocab_chunk, Tensor& dh, Tensor& dw, Tensor* dbias);
// The vocabulary-parallel slice ops (op_list.hpp's cross_entropy_slice_forward
// and cross_entropy_slice_backward): the same pipeline over w's rows
// [first_row, first_row + w.dim(0)) of a vocabulary of `vocab` rows.
void cross_entropy_slice_head_forward(ExecutionContext& ctx, const Tensor& h, const Tensor& w, const Tensor& targets,
                                      std::int64_t first_row, std::int64_t vocab, std::int64_t vocab_chunk,
                                      Tensor& local_lse, Tensor& target_logit);
void cross_entropy_slice_head_backward(ExecutionContext& ctx, const Tensor& h, const Tensor& w, const Tensor& targets,
                                       std::int64_t first_row, std::int64_t vocab, const Tensor& lse,
                                       const Tensor& loss_scale, std::int64_t vocab_chunk, Tensor& dh, Tensor& dw);

}  // namespace ftrain::cuda
