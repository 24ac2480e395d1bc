// CUDA element-wise ops and reductions: add, add_inplace, scale_inplace,
// fill, cast, sum, sum_squares(_accumulate), column sums (kernels.hpp). The
// arithmetic is kernels/math/pointwise.hpp's (and f16.hpp's for casts), as
// on the host.
#include "kernels/cuda/launch.cuh"
#include "kernels/math/f16.hpp"
#include "kernels/math/fp8.hpp"
#include "kernels/math/pointwise.hpp"

namespace ftrain::cuda {

void launch_add(FloatSpan a, FloatSpan b, FloatSpan out, std::int64_t n, cudaStream_t stream) {
  launch_elementwise("ftrain::add", n, stream, [=] __device__(std::int64_t i) {
    store_f32(out, i, math::add_value(load_f32(a, i), load_f32(b, i)));
  });
}

void launch_add_inplace(FloatSpan acc, FloatSpan x, std::int64_t n, cudaStream_t stream) {
  launch_elementwise("ftrain::add_inplace", n, stream, [=] __device__(std::int64_t i) {
    store_f32(acc, i, math::add_value(load_f32(acc, i), load_f32(x, i)));
  });
}

void launch_scale_inplace(FloatSpan x, float factor, std::int64_t n, cudaStream_t stream) {
  launch_elementwise("ftrain::scale_inplace", n, stream, [=] __device__(std::int64_t i) {
    store_f32(x, i, math::scale_value(load_f32(x, i), factor));
  });
}

void launch_fill_pattern(void* data, int element_bytes, std::uint64_t pattern, std::int64_t n, cudaStream_t stream) {
  switch (element_bytes) {
    case 1: {
      auto* p = static_cast<std::uint8_t*>(data);
      const auto v = static_cast<std::uint8_t>(pattern);
      return launch_elementwise("ftrain::fill", n, stream, [=] __device__(std::int64_t i) { p[i] = v; });
    }
    case 2: {
      auto* p = static_cast<std::uint16_t*>(data);
      const auto v = static_cast<std::uint16_t>(pattern);
      return launch_elementwise("ftrain::fill", n, stream, [=] __device__(std::int64_t i) { p[i] = v; });
    }
    case 4: {
      auto* p = static_cast<std::uint32_t*>(data);
      const auto v = static_cast<std::uint32_t>(pattern);
      return launch_elementwise("ftrain::fill", n, stream, [=] __device__(std::int64_t i) { p[i] = v; });
    }
    case 8: {
      auto* p = static_cast<std::uint64_t*>(data);
      return launch_elementwise("ftrain::fill", n, stream, [=] __device__(std::int64_t i) { p[i] = pattern; });
    }
    default: FT_THROW() << "ftrain::fill: element size " << element_bytes << " bytes is not 1, 2, 4 or 8";
  }
}

void launch_cast(FloatSpan src, FloatSpan dst, std::int64_t n, cudaStream_t stream) {
  launch_elementwise("ftrain::cast", n, stream,
                     [=] __device__(std::int64_t i) { store_f32(dst, i, load_f32(src, i)); });
}

namespace {

__device__ __forceinline__ float load_element(const void* p, CastElement t, std::int64_t i) {
  switch (t) {
    case CastElement::f32: return static_cast<const float*>(p)[i];
    case CastElement::bf16: return math::bf16_bits_to_float(static_cast<const std::uint16_t*>(p)[i]);
    case CastElement::f16: return math::f16_bits_to_float(static_cast<const std::uint16_t*>(p)[i]);
    case CastElement::fp8_e4m3: return math::fp8_decode(static_cast<const std::uint8_t*>(p)[i], math::kFp8E4m3);
    case CastElement::fp8_e5m2: return math::fp8_decode(static_cast<const std::uint8_t*>(p)[i], math::kFp8E5m2);
  }
  return 0.0f;
}

__device__ __forceinline__ void store_element(void* p, CastElement t, std::int64_t i, float v) {
  switch (t) {
    case CastElement::f32: static_cast<float*>(p)[i] = v; return;
    case CastElement::bf16: static_cast<std::uint16_t*>(p)[i] = math::float_to_bf16_bits(v); return;
    case CastElement::f16: static_cast<std::uint16_t*>(p)[i] = math::float_to_f16_bits(v); return;
    // Unscaled and saturating, as the host cast (dtype.hpp; the same encoder: unit_kernels_test_fp8_math).
    case CastElement::fp8_e4m3: static_cast<std::uint8_t*>(p)[i] = math::fp8_e4m3_bits(v); return;
    case CastElement::fp8_e5m2: static_cast<std::uint8_t*>(p)[i] = math::fp8_e5m2_bits(v); return;
  }
}

}  // namespace

void launch_cast_elements(const void* src, CastElement src_type, void* dst, CastElement dst_type, std::int64_t n,
                          cudaStream_t stream) {
  launch_elementwise("ftrain::cast", n, stream, [=] __device__(std::int64_t i) {
    store_element(dst, dst_type, i, load_element(src, src_type, i));
  });
}

namespace {

constexpr int kReduceThreads = 1024;

__device__ double block_sum_double(double value, double* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_xor_sync(0xffffffffu, value, offset);
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  double total = lane < warps ? scratch[lane] : 0.0;
  for (int offset = 16; offset > 0; offset >>= 1) total += __shfl_xor_sync(0xffffffffu, total, offset);
  return total;
}

// One block: thread t sums elements t, t + 1024, ... in order, then a fixed
// tree: deterministic. Squares when `squares`.
// `accumulate`: *out_f64 += total (sum_squares_accumulate) instead of =.
__global__ void sum_kernel(FloatSpan x, std::int64_t n, bool squares, float* out_f32, double* out_f64,
                           bool accumulate) {
  __shared__ double scratch[32];
  double acc = 0.0;
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = load_f32(x, i);
    acc += squares ? math::square_in_double(v) : static_cast<double>(v);
  }
  const double total = block_sum_double(acc, scratch);
  if (threadIdx.x == 0) {
    if (out_f32 != nullptr) *out_f32 = static_cast<float>(total);
    if (out_f64 != nullptr) *out_f64 = accumulate ? *out_f64 + total : total;
  }
}

// acc[c] += sum over rows r (in order) of data[r, c].
__global__ void column_sum_kernel(FloatSpan data, std::int64_t rows, std::int64_t cols, FloatSpan acc) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < cols; c += stride) {
    float sum = 0.0f;
    for (std::int64_t r = 0; r < rows; ++r) sum += load_f32(data, r * cols + c);
    store_f32(acc, c, load_f32(acc, c) + sum);
  }
}

}  // namespace

void launch_sum(FloatSpan x, std::int64_t n, float* out, cudaStream_t stream) {
  sum_kernel<<<1, kReduceThreads, 0, stream>>>(x, n, false, out, nullptr, false);
  FTRAIN_CUDA_CHECK_LAUNCH("ftrain::sum");
}

void launch_sum_squares(FloatSpan x, std::int64_t n, double* out, cudaStream_t stream) {
  sum_kernel<<<1, kReduceThreads, 0, stream>>>(x, n, true, nullptr, out, false);
  FTRAIN_CUDA_CHECK_LAUNCH("ftrain::sum_squares");
}

void launch_sum_squares_accumulate(FloatSpan x, std::int64_t n, double* acc, cudaStream_t stream) {
  sum_kernel<<<1, kReduceThreads, 0, stream>>>(x, n, true, nullptr, acc, true);
  FTRAIN_CUDA_CHECK_LAUNCH("ftrain::sum_squares_accumulate");
}

void launch_column_sum_accumulate(FloatSpan data, std::int64_t rows, std::int64_t cols, FloatSpan acc,
                                  cudaStream_t stream) {
  if (cols <= 0) return;
  const LaunchConfig c = elementwise_launch(cols);
  column_sum_kernel<<<static_cast<unsigned>(c.grid_x), static_cast<unsigned>(c.block), 0, stream>>>(data, rows, cols,
                                                                                                    acc);
  FTRAIN_CUDA_CHECK_LAUNCH("ftrain::column_sum");
}

}  // namespace ftrain::cuda
