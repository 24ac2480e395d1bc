// CUDA element-wise ops and reductions: add, add_inplace, scale_inplace,
// fill, cast, sum, sum_squares(_accumulate), column sums (kernels.hpp). The
// arithmetic is kernels/math/pointwise.hpp's (and f16.hpp's for casts), as
// on the host; the whole-tensor sums follow kernels/math/reduction.hpp's
// order in two passes, so they equal the host's bit for bit.
#include "kernels/cuda/launch.cuh"
#include "kernels/math/f16.hpp"
#include "kernels/math/fp8.hpp"
#include "kernels/math/pointwise.hpp"
#include "kernels/math/reduction.hpp"

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

// Pass 1 of a whole-tensor reduction (kernels/math/reduction.hpp): thread
// group g of kReduceLanes consecutive threads owns chunk g, thread l of it
// computes lane l; the group's first thread gathers the lanes by shuffles
// and stores the chunk's partial. The loop over chunk groups is uniform over
// the block (every thread of a warp reaches the shuffles).
__global__ void reduce_partials_kernel(FloatSpan x, std::int64_t n, math::ReduceTerm term, std::int64_t chunks,
                                       double* partials) {
  const int lane = static_cast<int>(threadIdx.x) % math::kReduceLanes;
  const std::int64_t chunks_per_block = blockDim.x / math::kReduceLanes;
  const unsigned group_base = (threadIdx.x & 31u) & ~static_cast<unsigned>(math::kReduceLanes - 1);
  for (std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * chunks_per_block; first < chunks;
       first += static_cast<std::int64_t>(gridDim.x) * chunks_per_block) {
    const std::int64_t chunk = first + threadIdx.x / math::kReduceLanes;
    double acc = 0.0;
    if (chunk < chunks) {
      const std::int64_t begin = chunk * math::kReduceChunk;
      acc = math::reduce_lane([=](std::int64_t i) { return load_f32(x, begin + i); },
                              math::reduce_chunk_length(n, chunk), lane, term);
    }
    double lanes[math::kReduceLanes];
    for (int l = 0; l < math::kReduceLanes; ++l) lanes[l] = __shfl_sync(0xffffffffu, acc, group_base + l);
    if (lane == 0 && chunk < chunks) partials[chunk] = math::reduce_combine_lanes(lanes);
  }
}

// Pass 2: the partials in chunk order, on one thread (exactly the host's
// order; n / 4096 doubles). `accumulate`: *out_f64 += total
// (sum_squares_accumulate) instead of =.
__global__ void reduce_total_kernel(const double* partials, std::int64_t chunks, float* out_f32, double* out_f64,
                                    bool accumulate) {
  const double total = math::reduce_combine_partials(partials, chunks);
  if (out_f32 != nullptr) *out_f32 = static_cast<float>(total);
  if (out_f64 != nullptr) *out_f64 = accumulate ? *out_f64 + total : total;
}

void launch_reduction(const char* what, FloatSpan x, std::int64_t n, math::ReduceTerm term, double* partials,
                      float* out_f32, double* out_f64, bool accumulate, cudaStream_t stream) {
  const ReductionLaunch r = reduction_launch(n);
  if (r.chunks > 0) {
    reduce_partials_kernel<<<static_cast<unsigned>(r.partials.grid_x), static_cast<unsigned>(r.partials.block), 0,
                             stream>>>(x, n, term, r.chunks, partials);
    FTRAIN_CUDA_CHECK_LAUNCH(what);
  }
  reduce_total_kernel<<<1, 1, 0, stream>>>(partials, r.chunks, out_f32, out_f64, accumulate);
  FTRAIN_CUDA_CHECK_LAUNCH(what);
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

std::int64_t reduction_partials(std::int64_t n) { return reduction_launch(n).chunks; }

void launch_sum(FloatSpan x, std::int64_t n, double* partials, float* out, cudaStream_t stream) {
  launch_reduction("ftrain::sum", x, n, math::ReduceTerm::value, partials, out, nullptr, false, stream);
}

void launch_sum_squares(FloatSpan x, std::int64_t n, double* partials, double* out, cudaStream_t stream) {
  launch_reduction("ftrain::sum_squares", x, n, math::ReduceTerm::square, partials, nullptr, out, false, stream);
}

void launch_sum_squares_accumulate(FloatSpan x, std::int64_t n, double* partials, double* acc, cudaStream_t stream) {
  launch_reduction("ftrain::sum_squares_accumulate", x, n, math::ReduceTerm::square, partials, nullptr, acc, true,
                   stream);
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
