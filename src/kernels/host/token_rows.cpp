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

#include "core/error.hpp"
#include "kernels/host/float_spans.hpp"
#include "kernels/host/host_ops.hpp"
#include "kernels/math/token_rows.hpp"

namespace ftrain::host {

using spans::HostPolicy;

namespace {

struct Dims3 {
  std::int64_t batch, rows, cols;
};

Dims3 require_3d(const char* op, const Tensor& t, const char* role) {
  spans::require_float_storage(op, t, role);
  FT_CHECK(t.ndim() == 3) << op << ": " << role << " " << t.describe() << " must be [B, rows, C]";
  return {t.dim(0), t.dim(1), t.dim(2)};
}

void require_2d(const char* op, const Tensor& t, const char* role, std::int64_t rows, std::int64_t cols) {
  spans::require_float_storage(op, t, role);
  FT_CHECK(t.ndim() == 2 && t.dim(0) == rows && t.dim(1) == cols)
      << op << ": " << role << " " << t.describe() << " must be [" << rows << ", " << cols << "]";
}

void require_dims(const char* op, const Tensor& t, const char* role, const Dims3& d, const Dims3& want) {
  FT_CHECK(d.batch == want.batch && d.rows == want.rows && d.cols == want.cols)
      << op << ": " << role << " " << t.describe() << " must be [" << want.batch << ", " << want.rows << ", "
      << want.cols << "]";
}

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

PatchDims check_patches(const char* op, const Tensor& images, const char* images_role, std::int64_t patch_size,
                        const Tensor& patches, const char* patches_role) {
  spans::require_float_storage(op, images, images_role);
  spans::require_float_storage(op, patches, patches_role);
  FT_CHECK(images.ndim() == 4) << op << ": " << images_role << " " << images.describe()
                               << " must be [B, H, W, C] (channels last)";
  FT_CHECK(patch_size > 0) << op << ": patch_size " << patch_size << " must be positive";
  const std::int64_t h = images.dim(1), w = images.dim(2), p = patch_size;
  FT_CHECK(h % p == 0 && w % p == 0) << op << ": " << images_role << " " << images.describe()
                                     << " is not a whole number of " << p << "x" << p << " patches";
  const PatchDims d{images.dim(0), h, w, images.dim(3), p, h / p, w / p};
  FT_CHECK(patches.ndim() == 2 && patches.dim(0) == d.rows() && patches.dim(1) == d.cols())
      << op << ": " << patches_role << " " << patches.describe() << " must be [" << d.rows() << ", " << d.cols()
      << "] (B * patches per image, C * P * P) for " << images_role << " " << images.describe();
  return d;
}

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

template <class Image>
void unpatchify_rows(const PatchDims d, const Tensor& dpatches, const Tensor& dimages) {
  void* img = dimages.data();
  const Tensor tpatches = dpatches;
  // Patches do not overlap: each pixel is written by exactly one row.
  const std::int64_t cols = d.cols();
  Kokkos::parallel_for("ftrain::patchify_backward", HostPolicy(0, d.rows()), [=](std::int64_t r) {
    const float* row = spans::read_f32(tpatches, r * cols, cols, spans::thread_scratch(0, cols));
    for (std::int64_t k = 0; k < cols; ++k) store<Image>(img, math::patch_pixel_offset(d, r, k), row[k]);
  });
}

}  // namespace

void patchify_forward(const Tensor& images, std::int64_t patch_size, Tensor& patches) {
  const PatchDims d = check_patches("patchify_forward", images, "images", patch_size, patches, "patches");
  if (images.dtype() == DType::f32) return patchify_rows<float>(d, images, patches);
  patchify_rows<bf16>(d, images, patches);
}

void patchify_backward(const Tensor& dpatches, std::int64_t patch_size, Tensor& dimages) {
  const PatchDims d = check_patches("patchify_backward", dimages, "dimages", patch_size, dpatches, "dpatches");
  if (dimages.dtype() == DType::f32) return unpatchify_rows<float>(d, dpatches, dimages);
  unpatchify_rows<bf16>(d, dpatches, dimages);
}

// ---- prefix rows (class token) -------------------------------------------------------

void prepend_rows_forward(const Tensor& prefix, const Tensor& x, Tensor& out) {
  constexpr const char* op = "prepend_rows_forward";
  const Dims3 dx = require_3d(op, x, "x");
  const Dims3 dout = require_3d(op, out, "out");
  spans::require_float_storage(op, prefix, "prefix");
  FT_CHECK(prefix.ndim() == 2 && prefix.dim(1) == dx.cols)
      << op << ": prefix " << prefix.describe() << " must be [R, " << dx.cols << "] (the width of x " << x.describe()
      << ")";
  const std::int64_t R = prefix.dim(0), N = dx.rows, C = dx.cols;
  require_dims(op, out, "out", dout, {dx.batch, R + N, C});
  const Tensor tprefix = prefix, tx = x, tout = out;
  Kokkos::parallel_for("ftrain::prepend_rows_forward", HostPolicy(0, dx.batch * (R + N)), [=](std::int64_t r) {
    const math::RowSource src = math::prepend_rows_source(r, R, N);
    copy_row(src.from_prefix ? tprefix : tx, src.row * C, tout, r * C, C);
  });
}

void prepend_rows_backward(const Tensor& dout, Tensor& dprefix, Tensor& dx) {
  constexpr const char* op = "prepend_rows_backward";
  const Dims3 dd = require_3d(op, dout, "dout");
  const Dims3 dxd = require_3d(op, dx, "dx");
  const std::int64_t R = dd.rows - dxd.rows, C = dd.cols;
  FT_CHECK(R >= 0) << op << ": dx " << dx.describe() << " has more rows than dout " << dout.describe();
  require_dims(op, dx, "dx", dxd, {dd.batch, dd.rows - R, C});
  require_2d(op, dprefix, "dprefix", R, C);
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
  const Dims3 dx = require_3d(op, x, "x");
  const Dims3 dout = require_3d(op, out, "out");
  require_dims(op, out, "out", dout, dx);
  require_2d(op, bias, "bias", dx.rows, dx.cols);
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
  const Dims3 d = require_3d(op, dout, "dout");
  require_2d(op, dbias, "dbias", d.rows, d.cols);
  accumulate_batch_sum("ftrain::broadcast_add_backward", dout, d.batch, d.rows * d.cols, 0, dbias, d.rows * d.cols);
}

// ---- row slices (class token back out) -------------------------------------------------

namespace {
Dims3 check_slice(const char* op, const Tensor& whole, const char* whole_role, std::int64_t first,
                  const Tensor& part, const char* part_role) {
  const Dims3 dw = require_3d(op, whole, whole_role);
  const Dims3 dp = require_3d(op, part, part_role);
  FT_CHECK(dp.batch == dw.batch && dp.cols == dw.cols && first >= 0 && first + dp.rows <= dw.rows)
      << op << ": " << part_role << " " << part.describe() << " is not rows " << first << " .. " << first + dp.rows
      << " of each batch item of " << whole_role << " " << whole.describe();
  return dw;
}
}  // namespace

void slice_rows_forward(const Tensor& x, std::int64_t first, Tensor& out) {
  constexpr const char* op = "slice_rows_forward";
  const Dims3 d = check_slice(op, x, "x", first, out, "out");
  const std::int64_t R = out.dim(1), T = d.rows, C = d.cols;
  const Tensor tx = x, tout = out;
  Kokkos::parallel_for("ftrain::slice_rows_forward", HostPolicy(0, d.batch * R), [=](std::int64_t r) {
    copy_row(tx, math::slice_rows_source(r, first, R, T) * C, tout, r * C, C);
  });
}

void slice_rows_backward(const Tensor& dout, std::int64_t first, Tensor& dx) {
  constexpr const char* op = "slice_rows_backward";
  const Dims3 d = check_slice(op, dx, "dx", first, dout, "dout");
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
