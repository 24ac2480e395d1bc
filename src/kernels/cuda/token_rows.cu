// CUDA kernels of the ViT row ops (op_list.hpp): patchify, prepend_rows,
// broadcast_add, slice_rows, forward and backward (kernels.hpp). The index
// math and the batch-order sum step are kernels/math/token_rows.hpp's, the
// functions kernels/host/token_rows.cpp calls: every output element gets the
// same bits as on the host. Each element is loaded as f32 and rounded to
// its tensor's storage on store (a same-dtype copy is exact), as the host's
// float_spans do. No atomics: the batch sums of the backward passes run one
// thread per column over the batch in order.
#include "kernels/cuda/launch.cuh"
#include "kernels/math/pointwise.hpp"
#include "kernels/math/token_rows.hpp"

namespace ftrain::cuda {

void launch_patchify_forward(FloatSpan images, math::PatchGeometry g, FloatSpan patches, cudaStream_t stream) {
  const std::int64_t rows = g.rows(), cols = g.cols();
  launch_grid_stride("ftrain::patchify_forward", row_copy_launch(rows, cols), rows * cols, stream,
                     [=] __device__(std::int64_t i) {
                       store_f32(patches, i, load_f32(images, math::patch_pixel_offset(g, i / cols, i % cols)));
                     });
}

void launch_prepend_rows_forward(FloatSpan prefix, FloatSpan x, FloatSpan out, std::int64_t batch,
                                 std::int64_t prefix_rows, std::int64_t rows, std::int64_t width,
                                 cudaStream_t stream) {
  const std::int64_t out_rows = batch * (prefix_rows + rows);
  launch_grid_stride("ftrain::prepend_rows_forward", row_copy_launch(out_rows, width), out_rows * width, stream,
                     [=] __device__(std::int64_t i) {
                       const math::RowSource src = math::prepend_rows_source(i / width, prefix_rows, rows);
                       store_f32(out, i, load_f32(src.from_prefix ? prefix : x, src.row * width + i % width));
                     });
}

void launch_prepend_rows_dx(FloatSpan dout, FloatSpan dx, std::int64_t batch, std::int64_t prefix_rows,
                            std::int64_t rows, std::int64_t width, cudaStream_t stream) {
  launch_grid_stride("ftrain::prepend_rows_backward::rows", row_copy_launch(batch * rows, width),
                     batch * rows * width, stream, [=] __device__(std::int64_t i) {
                       const std::int64_t src = math::prepend_rows_dx_source(i / width, prefix_rows, rows);
                       store_f32(dx, i, load_f32(dout, src * width + i % width));
                     });
}

void launch_broadcast_add_forward(FloatSpan x, FloatSpan bias, FloatSpan out, std::int64_t batch, std::int64_t rows,
                                  std::int64_t width, cudaStream_t stream) {
  launch_grid_stride("ftrain::broadcast_add_forward", row_copy_launch(batch * rows, width), batch * rows * width,
                     stream, [=] __device__(std::int64_t i) {
                       const std::int64_t b = math::broadcast_bias_row(i / width, rows) * width + i % width;
                       store_f32(out, i, math::add_value(load_f32(x, i), load_f32(bias, b)));
                     });
}

void launch_batch_sum_accumulate(FloatSpan src, std::int64_t batch, std::int64_t stride, FloatSpan acc,
                                 std::int64_t n, cudaStream_t stream) {
  launch_grid_stride("ftrain::batch_sum_accumulate", batch_sum_launch(n), n, stream, [=] __device__(std::int64_t e) {
    float sum = 0.0f;
    for (std::int64_t b = 0; b < batch; ++b) sum = math::batch_sum_step(sum, load_f32(src, b * stride + e));
    store_f32(acc, e, math::add_value(load_f32(acc, e), sum));
  });
}

void launch_slice_rows_forward(FloatSpan x, std::int64_t first, FloatSpan out, std::int64_t batch,
                               std::int64_t count, std::int64_t total, std::int64_t width, cudaStream_t stream) {
  launch_grid_stride("ftrain::slice_rows_forward", row_copy_launch(batch * count, width), batch * count * width,
                     stream, [=] __device__(std::int64_t i) {
                       const std::int64_t src = math::slice_rows_source(i / width, first, count, total);
                       store_f32(out, i, load_f32(x, src * width + i % width));
                     });
}

void launch_slice_rows_backward(FloatSpan dout, std::int64_t first, FloatSpan dx, std::int64_t batch,
                                std::int64_t count, std::int64_t total, std::int64_t width, cudaStream_t stream) {
  launch_grid_stride("ftrain::slice_rows_backward", row_copy_launch(batch * total, width), batch * total * width,
                     stream, [=] __device__(std::int64_t i) {
                       const std::int64_t src = math::slice_rows_dx_source(i / width, first, count, total);
                       store_f32(dx, i, src >= 0 ? load_f32(dout, src * width + i % width) : 0.0f);
                     });
}

}  // namespace ftrain::cuda
