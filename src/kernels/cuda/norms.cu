// CUDA RMSNorm and LayerNorm (kernels.hpp): a block per row (launch_config's
// per_row_launch), f32 statistics through the shared block_sum, the
// arithmetic around it from kernels/math/norms.hpp. dw / db (+=) are column
// sums over rows in row order (one thread per column): deterministic, no
// atomics.
#include "kernels/cuda/launch.cuh"
#include "kernels/math/norms.hpp"

namespace ftrain::cuda {

namespace {

__global__ void rmsnorm_forward_kernel(FloatSpan x, FloatSpan w, float eps, FloatSpan y, float* rstd,
                                       std::int64_t rows, std::int64_t width) {
  extern __shared__ float scratch[];
  const float inv_width = 1.0f / static_cast<float>(width);
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const std::int64_t base = r * width;
    float sq = 0.0f;
    for (std::int64_t j = threadIdx.x; j < width; j += blockDim.x) {
      const float v = load_f32(x, base + j);
      sq += v * v;
    }
    const float s = math::rmsnorm_rstd(block_sum(sq, scratch), inv_width, eps);
    for (std::int64_t j = threadIdx.x; j < width; j += blockDim.x)
      store_f32(y, base + j, math::rmsnorm_value(load_f32(x, base + j), s, load_f32(w, j)));
    if (threadIdx.x == 0) rstd[r] = s;
  }
}

__global__ void rmsnorm_backward_kernel(FloatSpan x, FloatSpan w, const float* rstd, FloatSpan dy, FloatSpan dx,
                                        std::int64_t rows, std::int64_t width) {
  extern __shared__ float scratch[];
  const float inv_width = 1.0f / static_cast<float>(width);
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const std::int64_t base = r * width;
    const float s = rstd[r];
    float dot = 0.0f;
    for (std::int64_t j = threadIdx.x; j < width; j += blockDim.x)
      dot += math::norm_dxhat(load_f32(dy, base + j), load_f32(w, j)) * load_f32(x, base + j);
    const float c = math::rmsnorm_backward_coefficient(block_sum(dot, scratch), s, inv_width);
    for (std::int64_t j = threadIdx.x; j < width; j += blockDim.x) {
      const float dxhat = math::norm_dxhat(load_f32(dy, base + j), load_f32(w, j));
      store_f32(dx, base + j, math::rmsnorm_dx(dxhat, load_f32(x, base + j), s, c));
    }
  }
}

__global__ void rmsnorm_dw_kernel(FloatSpan x, const float* rstd, FloatSpan dy, FloatSpan dw, std::int64_t rows,
                                  std::int64_t width) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < width; j += stride) {
    float sum = 0.0f;
    for (std::int64_t r = 0; r < rows; ++r)
      sum += math::rmsnorm_dw_term(load_f32(dy, r * width + j), load_f32(x, r * width + j), rstd[r]);
    store_f32(dw, j, load_f32(dw, j) + sum);
  }
}

__global__ void layernorm_forward_kernel(FloatSpan x, FloatSpan w, FloatSpan b, float eps, FloatSpan y, float* mean,
                                         float* rstd, std::int64_t rows, std::int64_t width) {
  extern __shared__ float scratch[];
  const float inv_width = 1.0f / static_cast<float>(width);
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const std::int64_t base = r * width;
    float sum = 0.0f;
    for (std::int64_t j = threadIdx.x; j < width; j += blockDim.x) sum += load_f32(x, base + j);
    const float m = block_sum(sum, scratch) * inv_width;
    float sq = 0.0f;
    for (std::int64_t j = threadIdx.x; j < width; j += blockDim.x)
      sq += math::layernorm_centred_square(load_f32(x, base + j), m);
    const float s = math::layernorm_rstd(block_sum(sq, scratch), inv_width, eps);
    for (std::int64_t j = threadIdx.x; j < width; j += blockDim.x) {
      const float bias = b.data != nullptr ? load_f32(b, j) : 0.0f;
      store_f32(y, base + j, math::layernorm_value(load_f32(x, base + j), m, s, load_f32(w, j), bias));
    }
    if (threadIdx.x == 0) {
      mean[r] = m;
      rstd[r] = s;
    }
  }
}

__global__ void layernorm_backward_kernel(FloatSpan x, FloatSpan w, const float* mean, const float* rstd,
                                          FloatSpan dy, FloatSpan dx, std::int64_t rows, std::int64_t width) {
  extern __shared__ float scratch[];
  const float inv_width = 1.0f / static_cast<float>(width);
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const std::int64_t base = r * width;
    const float m = mean[r], s = rstd[r];
    float sum_dxhat = 0.0f, dot = 0.0f;
    for (std::int64_t j = threadIdx.x; j < width; j += blockDim.x) {
      const float dxhat = math::norm_dxhat(load_f32(dy, base + j), load_f32(w, j));
      sum_dxhat += dxhat;
      dot += dxhat * math::layernorm_xhat(load_f32(x, base + j), m, s);
    }
    const float a = block_sum(sum_dxhat, scratch) * inv_width;
    const float c = block_sum(dot, scratch) * inv_width;
    for (std::int64_t j = threadIdx.x; j < width; j += blockDim.x) {
      const float dxhat = math::norm_dxhat(load_f32(dy, base + j), load_f32(w, j));
      const float xhat = math::layernorm_xhat(load_f32(x, base + j), m, s);
      store_f32(dx, base + j, math::layernorm_dx(dxhat, xhat, s, a, c));
    }
  }
}

__global__ void layernorm_dw_db_kernel(FloatSpan x, const float* mean, const float* rstd, FloatSpan dy, FloatSpan dw,
                                       FloatSpan db, std::int64_t rows, std::int64_t width) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < width; j += stride) {
    float sum_w = 0.0f, sum_b = 0.0f;
    for (std::int64_t r = 0; r < rows; ++r) {
      const float g = load_f32(dy, r * width + j);
      sum_w += g * math::layernorm_xhat(load_f32(x, r * width + j), mean[r], rstd[r]);
      sum_b += g;
    }
    store_f32(dw, j, load_f32(dw, j) + sum_w);
    if (db.data != nullptr) store_f32(db, j, load_f32(db, j) + sum_b);
  }
}

template <class Kernel, class... Args>
void launch_per_row(const char* what, Kernel kernel, int reductions, std::int64_t rows, std::int64_t width,
                    cudaStream_t stream, Args... args) {
  if (rows <= 0) return;
  const LaunchConfig c = per_row_launch(rows, width, reductions);
  kernel<<<static_cast<unsigned>(c.grid_x), static_cast<unsigned>(c.block), static_cast<std::size_t>(c.shared_bytes),
           stream>>>(args...);
  FTRAIN_CUDA_CHECK_LAUNCH(what);
}

template <class Kernel, class... Args>
void launch_columns(const char* what, Kernel kernel, std::int64_t width, cudaStream_t stream, Args... args) {
  const LaunchConfig c = elementwise_launch(width);
  kernel<<<static_cast<unsigned>(c.grid_x), static_cast<unsigned>(c.block), 0, stream>>>(args...);
  FTRAIN_CUDA_CHECK_LAUNCH(what);
}

}  // namespace

void launch_rmsnorm_forward(FloatSpan x, FloatSpan w, float eps, FloatSpan y, float* rstd, std::int64_t rows,
                            std::int64_t width, cudaStream_t stream) {
  launch_per_row("ftrain::rmsnorm::forward", rmsnorm_forward_kernel, 1, rows, width, stream, x, w, eps, y, rstd, rows,
                 width);
}

void launch_rmsnorm_backward(FloatSpan x, FloatSpan w, const float* rstd, FloatSpan dy, FloatSpan dx, FloatSpan dw,
                             std::int64_t rows, std::int64_t width, cudaStream_t stream) {
  // dw first: dx may alias dy.
  launch_columns("ftrain::rmsnorm::backward::dw", rmsnorm_dw_kernel, width, stream, x, rstd, dy, dw, rows, width);
  launch_per_row("ftrain::rmsnorm::backward", rmsnorm_backward_kernel, 1, rows, width, stream, x, w, rstd, dy, dx,
                 rows, width);
}

void launch_layernorm_forward(FloatSpan x, FloatSpan w, FloatSpan b, float eps, FloatSpan y, float* mean,
                              float* rstd, std::int64_t rows, std::int64_t width, cudaStream_t stream) {
  launch_per_row("ftrain::layernorm::forward", layernorm_forward_kernel, 1, rows, width, stream, x, w, b, eps, y, mean,
                 rstd, rows, width);
}

void launch_layernorm_backward(FloatSpan x, FloatSpan w, const float* mean, const float* rstd, FloatSpan dy,
                               FloatSpan dx, FloatSpan dw, FloatSpan db, std::int64_t rows, std::int64_t width,
                               cudaStream_t stream) {
  launch_columns("ftrain::layernorm::backward::dw_db", layernorm_dw_db_kernel, width, stream, x, mean, rstd, dy, dw,
                 db, rows, width);
  launch_per_row("ftrain::layernorm::backward", layernorm_backward_kernel, 1, rows, width, stream, x, w, mean, rstd,
                 dy, dx, rows, width);
}

}  // namespace ftrain::cuda
