// Host data-movement ops over rows of [B, T, C] activations and image
// patches (op_list.hpp): patchify_forward/backward (im2col of a
// kernel = stride convolution), prepend_rows_forward/backward (the class
// token), broadcast_add_forward/backward (the position embedding),
// slice_rows_forward/backward (picking the class token back out).
//
// They exist so that a model assembles its token sequence with ops instead
// of host loops (ViT, issue 12 item 4): on a device backend the same calls
// run where the tensors live.
//
// Conventions: every tensor is f32 or bf16 and may differ from the others;
// rows are widened to f32 and rounded back on store (float_spans.hpp), so a
// same-dtype copy is exact. Reductions over the batch (the prefix and bias
// gradients) sum in f32 in batch order, one element per iteration: no races
// and results independent of the thread count.
//
// The index math (which source row or pixel each output element copies) and
// the batch-order sum step are kernels/math/token_rows.hpp's, the functions
// the CUDA kernels (kernels/cuda/token_rows.cu) call too.
#include <Kokkos_Core.hpp>
#include <algorithm>
#include <type_traits>

#include "base/error.hpp"
#include "kernels/host/float_spans.hpp"
#include "kernels/host/host_ops.hpp"
#include "kernels/math/token_rows.hpp"
#include "kernels/op_checks.hpp"

namespace ftrain::host {

using spans::HostPolicy;

namespace {

struct Dims3 {
  std::int64_t batch, rows, cols;
};

// Shapes and dtypes were checked by ops::<op> (kernels/op_checks.hpp).
Dims3 dims3(const Tensor& t) { return {t.dim(0), t.dim(1), t.dim(2)}; }

// dst row (element offset dst_at) = src row (element offset src_at), width n.
void copy_row(const Tensor& src, std::int64_t src_at, const Tensor& dst, std::int64_t dst_at, std::int64_t n) {
  const float* in = spans::read_f32(src, src_at, n, spans::thread_scratch(0, n));
  float* out = spans::write_f32_begin(dst, dst_at, spans::thread_scratch(1, n));
  if (out != in) std::copy(in, in + n, out);
  spans::write_f32_end(dst, dst_at, n, out);
}

void zero_row(const Tensor& dst, std::int64_t dst_at, std::int64_t n) {
  float* out = spans::write_f32_begin(dst, dst_at, spans::thread_scratch(1, n));
  std::fill(out, out + n, 0.0f);
  spans::write_f32_end(dst, dst_at, n, out);
}

// dst[e] += sum over b of src[b * stride + offset + e] for e in [0, n), in
// batch order (f32).
void accumulate_batch_sum(const char* kernel, const Tensor& src, std::int64_t batch, std::int64_t stride,
                          std::int64_t offset, const Tensor& dst, std::int64_t n) {
  const Tensor tsrc = src, tdst = dst;
  spans::for_each_chunk(kernel, n, [=](std::int64_t begin, std::int64_t len) {
    float* sum = spans::thread_scratch(2, len);
    std::fill(sum, sum + len, 0.0f);
    for (std::int64_t b = 0; b < batch; ++b) {
      const float* row = spans::read_f32(tsrc, b * stride + offset + begin, len, spans::thread_scratch(0, len));
      for (std::int64_t i = 0; i < len; ++i) sum[i] = math::batch_sum_step(sum[i], row[i]);
    }
    spans::accumulate_f32(tdst, begin, len, sum);
  });
}

// ---- patches ---------------------------------------------------------------------

using PatchDims = math::PatchGeometry;

template <class T>
float load(const void* base, std::int64_t i) {
  if constexpr (std::is_same_v<T, float>) {
    return static_cast<const float*>(base)[i];
  } else {
    return to_float(static_cast<const bf16*>(base)[i]);
  }
}

template <class T>
void store(void* base, std::int64_t i, float v) {
  if constexpr (std::is_same_v<T, float>) {
    static_cast<float*>(base)[i] = v;
  } else {
    static_cast<bf16*>(base)[i] = to_bf16(v);
  }
}

template <class Image>
void patchify_rows(const PatchDims d, const Tensor& images, const Tensor& patches) {
  const void* img = images.data();
  const Tensor tpatches = patches;
  const std::int64_t cols = d.cols();
  Kokkos::parallel_for("ftrain::patchify_forward", HostPolicy(0, d.rows()), [=](std::int64_t r) {
    float* row = spans::write_f32_begin(tpatches, r * cols, spans::thread_scratch(1, cols));
    for (std::int64_t k = 0; k < cols; ++k) row[k] = load<Image>(img, math::patch_pixel_offset(d, r, k));
    spans::write_f32_end(tpatches, r * cols, cols, row);
  });
}

}  // namespace

void patchify_forward(const Tensor& images, std::int64_t patch_size, Tensor& patches) {
  spans::require_on_host("patchify_forward", {{&images, "images"}, {&patches, "patches"}});
  const PatchDims d = op_checks::patch_geometry(images, patch_size);
  if (images.dtype() == DType::f32) return patchify_rows<float>(d, images, patches);
  patchify_rows<bf16>(d, images, patches);
}

// ---- prefix rows (class token) -------------------------------------------------------

void prepend_rows_forward(const Tensor& prefix, const Tensor& x, Tensor& out) {
  constexpr const char* op = "prepend_rows_forward";
  spans::require_on_host(op, {{&prefix, "prefix"}, {&x, "x"}, {&out, "out"}});
  const Dims3 dx = dims3(x);
  const std::int64_t R = prefix.dim(0), N = dx.rows, C = dx.cols;
  const Tensor tprefix = prefix, tx = x, tout = out;
  Kokkos::parallel_for("ftrain::prepend_rows_forward", HostPolicy(0, dx.batch * (R + N)), [=](std::int64_t r) {
    const math::RowSource src = math::prepend_rows_source(r, R, N);
    copy_row(src.from_prefix ? tprefix : tx, src.row * C, tout, r * C, C);
  });
}

void prepend_rows_backward(const Tensor& dout, Tensor& dprefix, Tensor& dx) {
  constexpr const char* op = "prepend_rows_backward";
  spans::require_on_host(op, {{&dout, "dout"}, {&dprefix, "dprefix"}, {&dx, "dx"}});
  const Dims3 dd = dims3(dout), dxd = dims3(dx);
  const std::int64_t R = dd.rows - dxd.rows, C = dd.cols;
  const std::int64_t T = dd.rows, N = dxd.rows;  // T = R + N
  // Row t < R of every image feeds the same prefix row: dprefix[t] += sum_b dout[b, t].
  if (R > 0) accumulate_batch_sum("ftrain::prepend_rows_backward::prefix", dout, dd.batch, T * C, 0, dprefix, R * C);
  const Tensor tdout = dout, tdx = dx;
  Kokkos::parallel_for("ftrain::prepend_rows_backward::rows", HostPolicy(0, dd.batch * N), [=](std::int64_t r) {
    copy_row(tdout, math::prepend_rows_dx_source(r, R, N) * C, tdx, r * C, C);
  });
}

// ---- broadcast add (position embedding) ------------------------------------------------

void broadcast_add_forward(const Tensor& x, const Tensor& bias, Tensor& out) {
  constexpr const char* op = "broadcast_add_forward";
  spans::require_on_host(op, {{&x, "x"}, {&bias, "bias"}, {&out, "out"}});
  const Dims3 dx = dims3(x);
  const std::int64_t R = dx.rows, C = dx.cols;
  const Tensor tx = x, tbias = bias, tout = out;
  Kokkos::parallel_for("ftrain::broadcast_add_forward", HostPolicy(0, dx.batch * R), [=](std::int64_t r) {
    const float* a = spans::read_f32(tx, r * C, C, spans::thread_scratch(0, C));
    const float* b = spans::read_f32(tbias, math::broadcast_bias_row(r, R) * C, C, spans::thread_scratch(2, C));
    float* o = spans::write_f32_begin(tout, r * C, spans::thread_scratch(1, C));
    for (std::int64_t i = 0; i < C; ++i) o[i] = math::add_value(a[i], b[i]);
    spans::write_f32_end(tout, r * C, C, o);
  });
}

void broadcast_add_backward(const Tensor& dout, Tensor& dbias) {
  constexpr const char* op = "broadcast_add_backward";
  spans::require_on_host(op, {{&dout, "dout"}, {&dbias, "dbias"}});
  const Dims3 d = dims3(dout);
  accumulate_batch_sum("ftrain::broadcast_add_backward", dout, d.batch, d.rows * d.cols, 0, dbias, d.rows * d.cols);
}

// ---- row slices (class token back out) -------------------------------------------------

void slice_rows_forward(const Tensor& x, std::int64_t first, Tensor& out) {
  constexpr const char* op = "slice_rows_forward";
  spans::require_on_host(op, {{&x, "x"}, {&out, "out"}});
  const Dims3 d = dims3(x);
  const std::int64_t R = out.dim(1), T = d.rows, C = d.cols;
  const Tensor tx = x, tout = out;
  Kokkos::parallel_for("ftrain::slice_rows_forward", HostPolicy(0, d.batch * R), [=](std::int64_t r) {
    copy_row(tx, math::slice_rows_source(r, first, R, T) * C, tout, r * C, C);
  });
}

void slice_rows_backward(const Tensor& dout, std::int64_t first, Tensor& dx) {
  constexpr const char* op = "slice_rows_backward";
  spans::require_on_host(op, {{&dout, "dout"}, {&dx, "dx"}});
  const Dims3 d = dims3(dx);
  const std::int64_t R = dout.dim(1), T = d.rows, C = d.cols;
  const Tensor tdout = dout, tdx = dx;
  Kokkos::parallel_for("ftrain::slice_rows_backward", HostPolicy(0, d.batch * T), [=](std::int64_t r) {
    const std::int64_t src = math::slice_rows_dx_source(r, first, R, T);
    if (src >= 0) {
      copy_row(tdout, src * C, tdx, r * C, C);
    } else {
      zero_row(tdx, r * C, C);
    }
  });
}

}  // namespace ftrain::host
