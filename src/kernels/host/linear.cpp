// Host linear layer: y[N,out] = x[N,in] . w[out,in]^T (+ b), and its backward
// (ops.hpp), on the host GEMM providers (gemm.hpp).
//
// Conventions: x, y, dy, dx are [..., in] / [..., out] row-major activations
// with N = numel / last dim rows. When both GEMM operands are bf16 and the CPU
// multiplies BF16 natively, oneDNN consumes them as they are (f32
// accumulation); otherwise bf16 operands are widened into f32 scratch for
// OpenBLAS. Either way results are f32 and rounded back once (bf16 is
// storage, f32 is math); a bf16 y or dx without a bias is rounded by the
// oneDNN matmul itself (gemm::bf16_rounded), bit for bit the same as
// rounding its f32 result here (test_gemm_bf16).
// dw and db ACCUMULATE: for an f32 dw the GEMM adds into it directly
// (beta = 1); for a bf16 dw the GEMM writes f32 scratch which is then added
// with one rounding per element. dx is written (beta = 0).
#include <Kokkos_Core.hpp>
#include <memory>
#include <vector>

#include "base/error.hpp"
#include "kernels/host/float_spans.hpp"
#include "kernels/host/gemm.hpp"
#include "kernels/host/host_ops.hpp"
#include "kernels/op_checks.hpp"

namespace ftrain::host {

using spans::HostPolicy;

namespace {

using op_checks::LinearDims;

// Both operands bf16 on a CPU with native BF16 GEMMs: no widening.
bool native_bf16_pair(const Tensor& a, const Tensor& b) {
  return a.dtype() == DType::bf16 && b.dtype() == DType::bf16 && gemm::bf16_native();
}

const bf16* bf16_data(const Tensor& t) { return t.data_as<bf16>(); }

// f32 staging for a bf16 result that every path overwrites whole (a GEMM
// with beta 0, the bias broadcast, or a fill): not value-initialised, since
// zeroing megabytes that are overwritten next cost as much as the rounding
// pass itself (a std::vector's resize did).
std::unique_ptr<float[]> uninitialised_f32(std::int64_t n) {
  return std::make_unique_for_overwrite<float[]>(static_cast<std::size_t>(n));
}

}  // namespace

void linear_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) {
  constexpr const char* op = "linear_forward";
  spans::require_on_host(op, {{&x, "x"}, {&w, "w"}, {&y, "y"}, {b, "b"}});
  const LinearDims d = op_checks::linear_dims(x, w);
  if (d.rows == 0 || d.out == 0) return;

  if (b == nullptr && d.in > 0 && y.dtype() == DType::bf16 && native_bf16_pair(x, w)) {
    // y = x . w^T rounded to bf16 by the GEMM itself: no f32 staging pass.
    gemm::bf16_rounded({gemm::Op::none, gemm::Op::transpose, d.rows, d.out, d.in, d.in, d.in, d.out}, bf16_data(x),
                       bf16_data(w), y.data_as<bf16>());
    return;
  }
  std::vector<float> x_store, w_store;
  std::unique_ptr<float[]> y_store;
  float* yf = nullptr;
  if (y.dtype() == DType::f32) {
    yf = static_cast<float*>(y.data());
  } else {
    y_store = uninitialised_f32(y.numel());
    yf = y_store.get();
  }

  // With a bias, y starts as broadcast b and the GEMM adds onto it (beta = 1).
  float beta = 0.0f;
  if (b != nullptr) {
    std::vector<float> b_store;
    const float* bf = spans::whole_as_f32("ftrain::linear::forward::widen_b", *b, b_store);
    const std::int64_t out = d.out;
    Kokkos::parallel_for("ftrain::linear::forward::bias", HostPolicy(0, d.rows), [=](std::int64_t r) {
      float* row = yf + r * out;
      for (std::int64_t j = 0; j < out; ++j) row[j] = bf[j];
    });
    beta = 1.0f;
  }
  if (d.in > 0) {
    // y[N,out] (+)= x[N,in] . w[out,in]^T
    const gemm::Dims dims{gemm::Op::none, gemm::Op::transpose, d.rows, d.out, d.in, d.in, d.in, d.out};
    if (native_bf16_pair(x, w)) {
      gemm::bf16(dims, bf16_data(x), bf16_data(w), beta, yf);
    } else {
      const float* xf = spans::whole_as_f32("ftrain::linear::forward::widen_x", x, x_store);
      const float* wf = spans::whole_as_f32("ftrain::linear::forward::widen_w", w, w_store);
      gemm::f32(dims, xf, wf, beta, yf);
    }
  } else if (b == nullptr) {
    std::fill(yf, yf + d.rows * d.out, 0.0f);
  }
  if (y.dtype() != DType::f32) spans::store_whole_from_f32("ftrain::linear::forward::round_y", yf, y);
}

void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw, Tensor* db) {
  constexpr const char* op = "linear_backward";
  // Undefined dw / db: a frozen weight (op_list.hpp); only dx is computed.
  const bool want_dw = dw.defined();
  if (db != nullptr && !db->defined()) db = nullptr;
  spans::require_on_host(op,
                         {{&x, "x"}, {&w, "w"}, {&dy, "dy"}, {want_dw ? &dw : nullptr, "dw"}, {dx, "dx"}, {db, "db"}});
  const LinearDims d = op_checks::linear_dims(x, w);
  const std::int64_t n = d.rows, in = d.in, out = d.out;

  std::vector<float> x_store, w_store, dy_store;
  std::unique_ptr<float[]> scratch;
  // dy widened to f32 at most once, and only if a GEMM or db needs it.
  const float* dyf_cache = nullptr;
  auto dyf = [&] {
    if (dyf_cache == nullptr) dyf_cache = spans::whole_as_f32("ftrain::linear::backward::widen_dy", dy, dy_store);
    return dyf_cache;
  };

  if (dx != nullptr && d.in > 0 && d.out > 0 && d.rows > 0 && dx->dtype() == DType::bf16 && native_bf16_pair(dy, w)) {
    // dx = dy . w rounded to bf16 by the GEMM itself (as the forward's y).
    gemm::bf16_rounded({gemm::Op::none, gemm::Op::none, n, in, out, out, in, in}, bf16_data(dy), bf16_data(w),
                       dx->data_as<bf16>());
  } else if (dx != nullptr && d.in > 0) {
    // dx[N,in] = dy[N,out] . w[out,in]
    float* dxf = nullptr;
    if (dx->dtype() == DType::f32) {
      dxf = static_cast<float*>(dx->data());
    } else {
      scratch = uninitialised_f32(dx->numel());
      dxf = scratch.get();
    }
    if (d.out > 0 && d.rows > 0) {
      const gemm::Dims dims{gemm::Op::none, gemm::Op::none, n, in, out, out, in, in};
      if (native_bf16_pair(dy, w)) {
        gemm::bf16(dims, bf16_data(dy), bf16_data(w), 0.0f, dxf);
      } else {
        const float* wf = spans::whole_as_f32("ftrain::linear::backward::widen_w", w, w_store);
        gemm::f32(dims, dyf(), wf, 0.0f, dxf);
      }
    } else {
      std::fill(dxf, dxf + d.rows * d.in, 0.0f);
    }
    if (dx->dtype() != DType::f32) spans::store_whole_from_f32("ftrain::linear::backward::round_dx", dxf, *dx);
  }

  if (want_dw && d.rows > 0 && d.in > 0 && d.out > 0) {
    // dw[out,in] += dy^T[out,N] . x[N,in]
    const gemm::Dims dims{gemm::Op::transpose, gemm::Op::none, out, in, n, out, in, in};
    const bool native = native_bf16_pair(dy, x);
    const float* xf = native ? nullptr : spans::whole_as_f32("ftrain::linear::backward::widen_x", x, x_store);
    auto dw_gemm = [&](float beta, float* c) {
      if (native) {
        gemm::bf16(dims, bf16_data(dy), bf16_data(x), beta, c);
      } else {
        gemm::f32(dims, dyf(), xf, beta, c);
      }
    };
    if (dw.dtype() == DType::f32) {
      dw_gemm(1.0f, static_cast<float*>(dw.data()));
    } else {
      scratch = uninitialised_f32(dw.numel());
      float* g = scratch.get();
      dw_gemm(0.0f, g);
      const Tensor tdw = dw;
      spans::for_each_chunk("ftrain::linear::backward::accumulate_dw", dw.numel(),
                            [=](std::int64_t begin, std::int64_t len) { spans::accumulate_f32(tdw, begin, len, g + begin); });
    }
  }

  if (db != nullptr && d.out > 0) {
    // db += column sums of dy, per block of rows then in block order.
    spans::BlockPartials partials(d.rows, 1, d.out);
    float* base = partials.data.data();
    const float* dy32 = dyf();
    const std::int64_t cols = d.out;
    spans::for_each_row_in_blocks("ftrain::linear::backward::db_partials", d.rows,
                                  [=](std::int64_t r, std::int64_t block) {
                                    float* acc = base + block * cols;
                                    const float* row = dy32 + r * cols;
                                    for (std::int64_t j = 0; j < cols; ++j) acc[j] += row[j];
                                  });
    partials.add_into("ftrain::linear::backward::db", 0, *db);
  }
}

}  // namespace ftrain::host
