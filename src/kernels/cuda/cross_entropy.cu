// CUDA steps of the fused, vocabulary-chunked cross entropy (kernels.hpp):
// what happens to one f32 logits chunk [rows, cs] between the cuBLASLt GEMMs
// of kernels/cuda/cross_entropy_head.cpp. The arithmetic is
// kernels/math/cross_entropy.hpp's, the host's (kernels/host/cross_entropy.cpp):
// forward merges the chunk into each row's online log-sum-exp (block per
// row: a block max, then a block sum of softmax terms against the new max);
// backward turns each logit into its gradient element by element. A
// vocabulary-parallel slice (first_row > 0) is the same with its targets'
// columns moved by first_row (math::cross_entropy_local_target). The
// row reductions run in a fixed tree order (deterministic), not the host's
// index order, and expf/logf are CUDA's: a tolerance against the host.
#include "kernels/cuda/launch.cuh"
#include "kernels/math/cross_entropy.hpp"
#include "kernels/math/pointwise.hpp"

namespace ftrain::cuda {

namespace {

__global__ void cross_entropy_forward_chunk_kernel(float* logits, FloatSpan bias, const std::int32_t* targets,
                                                   std::int64_t first_row, std::int64_t rows, std::int64_t v0,
                                                   std::int64_t cs,
                                                   float* row_max, float* row_sum, float* target_logit) {
  extern __shared__ float scratch[];
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float* row = logits + r * cs;
    float local_max = -INFINITY;
    for (std::int64_t c = threadIdx.x; c < cs; c += blockDim.x) {
      float logit = row[c];
      if (bias.data != nullptr) {
        logit = math::add_value(logit, load_f32(bias, v0 + c));
        row[c] = logit;
      }
      local_max = math::running_max(local_max, logit);
    }
    const float new_max = math::running_max(row_max[r], block_max(local_max, scratch));
    float local_sum = 0.0f;
    for (std::int64_t c = threadIdx.x; c < cs; c += blockDim.x) local_sum += math::softmax_term(row[c], new_max);
    const float chunk_sum = block_sum(local_sum, scratch);
    if (threadIdx.x == 0) {
      row_sum[r] = math::rescaled_running_sum(row_sum[r], row_max[r], new_max, chunk_sum);
      row_max[r] = new_max;
      const std::int64_t t = math::cross_entropy_local_target(targets[r], first_row);
      if (t >= v0 && t < v0 + cs) target_logit[r] = row[t - v0];
    }
  }
}

}  // namespace

void launch_cross_entropy_init(float* row_max, float* row_sum, float* target_logit, std::int64_t rows,
                               cudaStream_t stream) {
  launch_elementwise("ftrain::cross_entropy::init", rows, stream, [=] __device__(std::int64_t i) {
    row_max[i] = -INFINITY;
    row_sum[i] = 0.0f;
    target_logit[i] = 0.0f;
  });
}

void launch_cross_entropy_forward_chunk(float* logits, FloatSpan bias, const std::int32_t* targets,
                                        std::int64_t first_row, std::int64_t rows, std::int64_t v0, std::int64_t cs,
                                        float* row_max, float* row_sum, float* target_logit, cudaStream_t stream) {
  if (rows <= 0 || cs <= 0) return;
  const LaunchConfig c = cross_entropy_chunk_launch(rows, cs);
  cross_entropy_forward_chunk_kernel<<<static_cast<unsigned>(c.grid_x), static_cast<unsigned>(c.block),
                                       static_cast<std::size_t>(c.shared_bytes), stream>>>(
      logits, bias, targets, first_row, rows, v0, cs, row_max, row_sum, target_logit);
  FTRAIN_CUDA_CHECK_LAUNCH("ftrain::cross_entropy::forward_chunk");
}

void launch_cross_entropy_finish(const float* row_max, const float* row_sum, const float* target_logit,
                                 const std::int32_t* targets, std::int64_t rows, float* losses, float* lse,
                                 cudaStream_t stream) {
  launch_elementwise("ftrain::cross_entropy::forward_loss", rows, stream, [=] __device__(std::int64_t i) {
    const float row_lse = math::log_sum_exp(row_max[i], row_sum[i]);
    lse[i] = row_lse;
    losses[i] =
        math::cross_entropy_loss(row_lse, target_logit[i], targets[i] == math::kCrossEntropyIgnoreIndex);
  });
}

void launch_cross_entropy_row_lse(const float* row_max, const float* row_sum, std::int64_t rows, float* lse,
                                  cudaStream_t stream) {
  launch_elementwise("ftrain::cross_entropy::row_lse", rows, stream, [=] __device__(std::int64_t i) {
    lse[i] = math::log_sum_exp(row_max[i], row_sum[i]);
  });
}

void launch_cross_entropy_slice_sum_exp(const float* local_lse, const float* row_max, std::int64_t rows,
                                        float* sum_exp, cudaStream_t stream) {
  launch_elementwise("ftrain::cross_entropy::slice_sum_exp", rows, stream, [=] __device__(std::int64_t i) {
    sum_exp[i] = math::cross_entropy_slice_sum_exp(local_lse[i], row_max[i]);
  });
}

void launch_cross_entropy_backward_chunk(float* logits, FloatSpan bias, const std::int32_t* targets,
                                         std::int64_t first_row, const float* lse, const float* loss_scale,
                                         std::int64_t rows, std::int64_t v0, std::int64_t cs,
                                         std::uint16_t* dlogit_bf16, cudaStream_t stream) {
  launch_elementwise("ftrain::cross_entropy::backward_chunk", rows * cs, stream, [=] __device__(std::int64_t e) {
    const std::int64_t i = e / cs, c = e - i * cs;
    const std::int64_t t = math::cross_entropy_local_target(targets[i], first_row);
    float d = 0.0f;
    if (targets[i] != math::kCrossEntropyIgnoreIndex) {
      const float scale = *loss_scale;
      float logit = logits[e];
      if (bias.data != nullptr) logit = math::add_value(logit, load_f32(bias, v0 + c));
      d = math::cross_entropy_dlogit(logit, lse[i], scale);
      if (t == v0 + c) d = math::cross_entropy_target_correction(d, scale);
    }
    logits[e] = d;
    if (dlogit_bf16 != nullptr) dlogit_bf16[e] = math::float_to_bf16_bits(d);
  });
}

}  // namespace ftrain::cuda
