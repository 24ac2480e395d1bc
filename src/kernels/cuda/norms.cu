// CUDA RMSNorm and LayerNorm (kernels.hpp): a block per row (launch_config's
// per_row_launch), f32 statistics through the shared block_sum, the
// arithmetic around it from kernels/math/norms.hpp. dw / db (+=) are column
// sums over rows in kernels/math/column_sums.hpp's order, the host's: pass 1
// gives every (32-row block, column) a thread and its f32 partial, pass 2
// every column a thread that adds its partials in block order and then adds
// the sum into the gradient once. The same bits as the host, whatever the
// grid; no atomics; the row blocks spread over the GPU instead of one thread
// per column walking every row.
#include "kernels/cuda/launch.cuh"
#include "kernels/math/column_sums.hpp"
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

// Pass 1 of dw: partials[b * width + j] = the block's rmsnorm_dw_terms in row order.
__global__ void rmsnorm_dw_partials_kernel(FloatSpan x, const float* rstd, FloatSpan dy, float* partials,
                                           std::int64_t rows, std::int64_t width, std::int64_t blocks) {
  const std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= width) return;
  for (std::int64_t b = blockIdx.y; b < blocks; b += gridDim.y) {
    const std::int64_t end = min(rows, (b + 1) * math::kColumnSumRows);
    float sum = 0.0f;
    for (std::int64_t r = b * math::kColumnSumRows; r < end; ++r)
      sum += math::rmsnorm_dw_term(load_f32(dy, r * width + j), load_f32(x, r * width + j), rstd[r]);
    partials[b * width + j] = sum;
  }
}

// Pass 1 of LayerNorm's dw and db: two partial rows per block (dw at
// (b * 2) * width, db at (b * 2 + 1) * width), the host's BlockPartials layout.
__global__ void layernorm_dw_db_partials_kernel(FloatSpan x, const float* mean, const float* rstd, FloatSpan dy,
                                                float* partials, bool with_db, std::int64_t rows, std::int64_t width,
                                                std::int64_t blocks) {
  const std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= width) return;
  const std::int64_t count = with_db ? 2 : 1;
  for (std::int64_t b = blockIdx.y; b < blocks; b += gridDim.y) {
    const std::int64_t end = min(rows, (b + 1) * math::kColumnSumRows);
    float sum_w = 0.0f, sum_b = 0.0f;
    for (std::int64_t r = b * math::kColumnSumRows; r < end; ++r) {
      const float g = load_f32(dy, r * width + j);
      sum_w += g * math::layernorm_xhat(load_f32(x, r * width + j), mean[r], rstd[r]);
      sum_b += g;
    }
    partials[(b * count) * width + j] = sum_w;
    if (with_db) partials[(b * count + 1) * width + j] = sum_b;
  }
}

// Pass 2: dst[j] += (0 + partial 0 + partial 1 + ...)[j], partial k of each
// block, blocks in order.
__global__ void column_partials_finish_kernel(const float* partials, std::int64_t blocks, std::int64_t count,
                                              std::int64_t k, std::int64_t width, FloatSpan dst) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < width; j += stride) {
    float sum = 0.0f;
    for (std::int64_t b = 0; b < blocks; ++b) sum += partials[(b * count + k) * width + j];
    store_f32(dst, j, load_f32(dst, j) + sum);
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

template <class Kernel, class... Args>
void launch_per_row(const char* what, Kernel kernel, int reductions, std::int64_t rows, std::int64_t width,
                    cudaStream_t stream, Args... args) {
  if (rows <= 0) return;
  const LaunchConfig c = per_row_launch(rows, width, reductions);
  kernel<<<static_cast<unsigned>(c.grid_x), static_cast<unsigned>(c.block), static_cast<std::size_t>(c.shared_bytes),
           stream>>>(args...);
  FTRAIN_CUDA_CHECK_LAUNCH(what);
}

// Pass 2 of a column sum into dst (partial k of `count` per block).
void finish_columns(const char* what, const float* partials, std::int64_t blocks, std::int64_t count, std::int64_t k,
                    std::int64_t width, FloatSpan dst, cudaStream_t stream) {
  const LaunchConfig c = elementwise_launch(width);
  column_partials_finish_kernel<<<static_cast<unsigned>(c.grid_x), static_cast<unsigned>(c.block), 0, stream>>>(
      partials, blocks, count, k, width, dst);
  FTRAIN_CUDA_CHECK_LAUNCH(what);
}

dim3 grid_of(const LaunchConfig& c) {
  return dim3(static_cast<unsigned>(c.grid_x), static_cast<unsigned>(c.grid_y), static_cast<unsigned>(c.grid_z));
}

}  // namespace

void launch_rmsnorm_forward(FloatSpan x, FloatSpan w, float eps, FloatSpan y, float* rstd, std::int64_t rows,
                            std::int64_t width, cudaStream_t stream) {
  launch_per_row("ftrain::rmsnorm::forward", rmsnorm_forward_kernel, 1, rows, width, stream, x, w, eps, y, rstd, rows,
                 width);
}

std::int64_t norm_backward_partials(std::int64_t rows, std::int64_t width, int count) {
  return math::column_sum_blocks(rows) * count * width;
}

void launch_rmsnorm_backward(FloatSpan x, FloatSpan w, const float* rstd, FloatSpan dy, FloatSpan dx, FloatSpan dw,
                             float* partials, std::int64_t rows, std::int64_t width, cudaStream_t stream) {
  // dw first (both passes): dx may alias dy.
  if (dw.data != nullptr && rows > 0 && width > 0) {
    const LaunchConfig c = column_partials_launch(rows, width);
    const std::int64_t blocks = math::column_sum_blocks(rows);
    rmsnorm_dw_partials_kernel<<<grid_of(c), static_cast<unsigned>(c.block), 0, stream>>>(x, rstd, dy, partials, rows,
                                                                                          width, blocks);
    FTRAIN_CUDA_CHECK_LAUNCH("ftrain::rmsnorm::backward::dw_partials");
    finish_columns("ftrain::rmsnorm::backward::dw", partials, blocks, 1, 0, width, dw, stream);
  }
  launch_per_row("ftrain::rmsnorm::backward", rmsnorm_backward_kernel, 1, rows, width, stream, x, w, rstd, dy, dx,
                 rows, width);
}

void launch_layernorm_forward(FloatSpan x, FloatSpan w, FloatSpan b, float eps, FloatSpan y, float* mean,
                              float* rstd, std::int64_t rows, std::int64_t width, cudaStream_t stream) {
  launch_per_row("ftrain::layernorm::forward", layernorm_forward_kernel, 1, rows, width, stream, x, w, b, eps, y, mean,
                 rstd, rows, width);
}

void launch_layernorm_backward(FloatSpan x, FloatSpan w, const float* mean, const float* rstd, FloatSpan dy,
                               FloatSpan dx, FloatSpan dw, FloatSpan db, float* partials, std::int64_t rows,
                               std::int64_t width, cudaStream_t stream) {
  // dw and db first (both passes): dx may alias dy.
  if (dw.data != nullptr && rows > 0 && width > 0) {
    const bool with_db = db.data != nullptr;
    const std::int64_t count = with_db ? 2 : 1, blocks = math::column_sum_blocks(rows);
    const LaunchConfig c = column_partials_launch(rows, width);
    layernorm_dw_db_partials_kernel<<<grid_of(c), static_cast<unsigned>(c.block), 0, stream>>>(
        x, mean, rstd, dy, partials, with_db, rows, width, blocks);
    FTRAIN_CUDA_CHECK_LAUNCH("ftrain::layernorm::backward::dw_db_partials");
    finish_columns("ftrain::layernorm::backward::dw", partials, blocks, count, 0, width, dw, stream);
    if (with_db) finish_columns("ftrain::layernorm::backward::db", partials, blocks, count, 1, width, db, stream);
  }
  launch_per_row("ftrain::layernorm::backward", layernorm_backward_kernel, 1, rows, width, stream, x, w, mean, rstd,
                 dy, dx, rows, width);
}

}  // namespace ftrain::cuda
