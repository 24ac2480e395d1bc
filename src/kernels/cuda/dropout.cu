// CUDA dropout (op_list.hpp; LoRA's input dropout): y = x * mask, one thread
// per element. The mask index (global row and column: first_row * C + e)
// and the product are kernels/math/dropout.hpp's, the functions the host
// kernel and layers/lora.cpp call, so every backend and rank draws the same
// mask and the output has the host's bits.
#include "kernels/cuda/launch.cuh"
#include "kernels/math/dropout.hpp"

namespace ftrain::cuda {

void launch_dropout(FloatSpan x, float p, std::uint64_t seed, std::uint64_t mask_stream, std::int64_t first_row,
                    std::int64_t width, FloatSpan y, std::int64_t n, cudaStream_t stream) {
  launch_grid_stride("ftrain::dropout", row_copy_launch(n / width, width), n, stream, [=] __device__(std::int64_t i) {
    const std::uint64_t index = math::dropout_mask_index(first_row, width, i);
    store_f32(y, i, math::dropout_value(load_f32(x, i), seed, mask_stream, index, p));
  });
}

}  // namespace ftrain::cuda
