// CUDA token embedding (kernels.hpp). Forward: one grid-stride loop over the
// N x C outputs. Backward, deterministic and with the host's rounding: block
// n works only if row n is the first row of its token; it then sums that
// token's rows in row order in f32 (threads over columns) and adds the sum to
// dtable once. Finding "first" and the rows is a scan over the tokens per
// block (O(N^2) comparisons, cheap next to the N x C data for N in the
// thousands; a sort would replace it for very long batches). Invalid tokens
// (math::embedding_token_valid) leave their output alone and report the
// smallest bad row through first_bad_row, which the op reads back.
#include "kernels/cuda/launch.cuh"
#include "kernels/math/embedding.hpp"

namespace ftrain::cuda {

namespace {

__global__ void find_bad_token_kernel(const std::int32_t* tokens, std::int64_t n, std::int64_t vocab,
                                      long long* first_bad_row) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    if (!math::embedding_token_valid(tokens[i], vocab)) atomicMin(first_bad_row, static_cast<long long>(i));
}

__global__ void embedding_backward_kernel(const std::int32_t* tokens, std::int64_t n, FloatSpan dout,
                                          std::int64_t vocab, std::int64_t width, FloatSpan dtable) {
  for (std::int64_t row = blockIdx.x; row < n; row += gridDim.x) {
    const std::int32_t token = tokens[row];
    if (!math::embedding_token_valid(token, vocab)) continue;
    bool first = true;
    for (std::int64_t m = 0; m < row && first; ++m) first = tokens[m] != token;
    if (!first) continue;
    for (std::int64_t c = threadIdx.x; c < width; c += blockDim.x) {
      float sum = 0.0f;
      for (std::int64_t m = row; m < n; ++m)
        if (tokens[m] == token) sum += load_f32(dout, m * width + c);
      const std::int64_t at = static_cast<std::int64_t>(token) * width + c;
      store_f32(dtable, at, load_f32(dtable, at) + sum);
    }
  }
}

void find_bad_tokens(const std::int32_t* tokens, std::int64_t n, std::int64_t vocab, long long* first_bad_row,
                     cudaStream_t stream) {
  const long long none = n;
  FTRAIN_CUDA_CHECK(cudaMemcpyAsync(first_bad_row, &none, sizeof none, cudaMemcpyHostToDevice, stream));
  FTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream));  // `none` lives on this stack frame
  const LaunchConfig c = elementwise_launch(n);
  find_bad_token_kernel<<<static_cast<unsigned>(c.grid_x), static_cast<unsigned>(c.block), 0, stream>>>(
      tokens, n, vocab, first_bad_row);
  FTRAIN_CUDA_CHECK_LAUNCH("ftrain::embedding::check_tokens");
}

}  // namespace

void launch_embedding_forward(const std::int32_t* tokens, std::int64_t n_tokens, FloatSpan table, std::int64_t vocab,
                              std::int64_t width, FloatSpan out, long long* first_bad_row, cudaStream_t stream) {
  if (n_tokens <= 0) return;
  find_bad_tokens(tokens, n_tokens, vocab, first_bad_row, stream);
  launch_elementwise("ftrain::embedding::forward", n_tokens * width, stream, [=] __device__(std::int64_t e) {
    const std::int64_t row = e / width, c = e % width;
    const std::int32_t token = tokens[row];
    if (math::embedding_token_valid(token, vocab))
      store_f32(out, e, load_f32(table, static_cast<std::int64_t>(token) * width + c));
  });
}

void launch_embedding_backward(const std::int32_t* tokens, std::int64_t n_tokens, FloatSpan dout, std::int64_t vocab,
                               std::int64_t width, FloatSpan dtable, long long* first_bad_row, cudaStream_t stream) {
  if (n_tokens <= 0) return;
  find_bad_tokens(tokens, n_tokens, vocab, first_bad_row, stream);
  const LaunchConfig c = embedding_backward_launch(n_tokens, width);
  embedding_backward_kernel<<<static_cast<unsigned>(c.grid_x), static_cast<unsigned>(c.block), 0, stream>>>(
      tokens, n_tokens, dout, vocab, width, dtable);
  FTRAIN_CUDA_CHECK_LAUNCH("ftrain::embedding::backward");
}

}  // namespace ftrain::cuda
