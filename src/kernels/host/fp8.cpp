// Host FP8 ops (op_list.hpp: cast_to_fp8, fp8_linear_forward,
// fp8_linear_backward, fp8_update_scales): exact emulation of FP8 GEMMs.
//
// The FP8 values are decoded to f32 (exact: every E4M3/E5M2 value is an
// f32) and multiplied by the f32 GEMM (gemm::f32, f32 accumulation); the
// f32 result is multiplied by the dequantisation factor
// math::fp8_dequantisation_factor(a.scale_inv, b.scale_inv), which is the
// arithmetic of Hopper's FP8 tensor cores under cuBLASLt (its scale pointers
// take the operands' scale_inv), so the emulation differs from a GPU only by
// summation order. The GEMMs read scale_inv, never scale: the scale_inv the
// GPU would dequantise with is the one the host does, so a scale_inv left
// behind its scale (fsdp/fp8_all_gather.hpp: a rank that casts no piece of a
// gathered weight) changes the host's numbers as it would the GPU's.
//
// Scales and amaxes are f32[1] tensors on the host here; the kernels read and
// write them as the CUDA kernels do on the device: no value leaves the op.
// The cast, the amax, the transposed copy's indexing and the scale update are
// kernels/math/fp8.hpp's, the functions kernels/cuda/fp8.cu runs.
#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/error.hpp"
#include "kernels/fp8_scaling.hpp"
#include "kernels/math/fp8.hpp"
#include "kernels/host/float_spans.hpp"
#include "kernels/host/gemm.hpp"
#include "kernels/host/host_ops.hpp"

namespace ftrain::host {

using spans::HostPolicy;

namespace {

float fp8_max_of(DType t) { return t == DType::fp8_e4m3 ? fp8_scaling::kE4m3Max : fp8_scaling::kE5m2Max; }

float scale_inv_of(const Fp8Tensor& t) { return *t.scale_inv.data_as<float>(); }

// The f32 values an FP8 tensor encodes (exact), decoded into `store`.
const float* decode_fp8(const char* kernel_name, const Tensor& data, std::vector<float>& store) {
  const std::int64_t n = data.numel();
  store.resize(static_cast<std::size_t>(n));
  float* out = store.data();
  const void* src = data.data();
  const bool e4m3 = data.dtype() == DType::fp8_e4m3;
  spans::for_each_chunk(kernel_name, n, [=](std::int64_t begin, std::int64_t len) {
    if (e4m3) {
      const fp8_e4m3* p = static_cast<const fp8_e4m3*>(src) + begin;
      for (std::int64_t i = 0; i < len; ++i) out[begin + i] = to_float(p[i]);
    } else {
      const fp8_e5m2* p = static_cast<const fp8_e5m2*>(src) + begin;
      for (std::int64_t i = 0; i < len; ++i) out[begin + i] = to_float(p[i]);
    }
  });
  return out;
}

// out (f32 or bf16) = acc * factor, element by element (bf16: rounded once).
void store_scaled(const char* kernel_name, float* acc, float factor, Tensor& out) {
  const std::int64_t n = out.numel();
  Kokkos::parallel_for(kernel_name, HostPolicy(0, n), [=](std::int64_t i) { acc[i] = acc[i] * factor; });
  spans::store_whole_from_f32(kernel_name, acc, out);
}

// max |x| over a float tensor, NaN when x holds a NaN, independent of the
// thread count: the integer max of math::amax_key (kernels/math/fp8.hpp).
float amax_of(const Tensor& x) {
  const std::int64_t n = x.numel();
  const std::int64_t chunks = (n + spans::kChunk - 1) / spans::kChunk;
  std::uint32_t top = 0;
  Kokkos::parallel_reduce(
      "ftrain::cast_to_fp8::amax", HostPolicy(0, chunks),
      [=](std::int64_t c, std::uint32_t& m) {
        const std::int64_t begin = c * spans::kChunk, len = std::min(spans::kChunk, n - begin);
        const float* v = spans::read_f32(x, begin, len, spans::thread_scratch(1, len));
        for (std::int64_t i = 0; i < len; ++i) m = std::max(m, math::amax_key(v[i]));
      },
      Kokkos::Max<std::uint32_t>(top));
  return math::amax_of_key(top);
}

// The transposed copy [cols, rows] of a cast's output [rows, cols]
// (math::transposed_index), from the FP8 bytes just written.
void write_transposed(const Tensor& data, Tensor& data_t) {
  const std::int64_t cols = data.ndim() >= 1 ? data.dim(-1) : 1;
  const std::int64_t rows = cols > 0 ? data.numel() / cols : 0;
  const auto* src = static_cast<const std::uint8_t*>(data.data());
  auto* dst = static_cast<std::uint8_t*>(data_t.data());
  Kokkos::parallel_for("ftrain::cast_to_fp8::transpose", HostPolicy(0, rows), [=](std::int64_t r) {
    for (std::int64_t c = 0; c < cols; ++c) dst[math::transposed_index(r, c, rows)] = src[r * cols + c];
  });
}

}  // namespace

void fp8_transpose(const Tensor& data, Tensor& data_t) {
  constexpr const char* op = "fp8_transpose";
  spans::require_on_host(op, {{&data, "data"}, {&data_t, "data_t"}});
  write_transposed(data, data_t);
}

void cast_to_fp8(const Tensor& x, Fp8Tensor& out) {
  constexpr const char* op = "cast_to_fp8";
  spans::require_on_host(op, {{&x, "x"}});
  spans::require_on_host(op, out, "out");

  const float scale = *out.scale.data_as<float>();
  const bool e4m3 = out.data.dtype() == DType::fp8_e4m3;
  const Tensor tx = x;
  void* dst = out.data.data();
  spans::for_each_chunk("ftrain::cast_to_fp8", x.numel(), [=](std::int64_t begin, std::int64_t len) {
    const float* v = spans::read_f32(tx, begin, len, spans::thread_scratch(0, len));
    std::uint8_t* p = static_cast<std::uint8_t*>(dst) + begin;
    for (std::int64_t i = 0; i < len; ++i) p[i] = math::fp8_cast(v[i], scale, e4m3);
  });
  if (out.data_t.defined()) write_transposed(out.data, out.data_t);
  *out.scale_inv.data_as<float>() = math::fp8_scale_inv(scale);
  if (out.amax.defined()) {
    float* slot = out.amax.data_as<float>();
    *slot = fp8_scaling::amax_combine(*slot, amax_of(x));
  }
}

void fp8_linear_forward(const Fp8Tensor& x, const Fp8Tensor& w, const Tensor* b, Tensor& y) {
  constexpr const char* op = "fp8_linear_forward";
  spans::require_on_host(op, x, "x");
  spans::require_on_host(op, w, "w");
  spans::require_on_host(op, {{&y, "y"}, {b, "b"}});
  const std::int64_t in = w.data.dim(1), out = w.data.dim(0);
  const std::int64_t rows = x.data.numel() / std::max<std::int64_t>(in, 1);
  if (rows == 0 || out == 0) return;

  std::vector<float> xs, ws, acc_store(static_cast<std::size_t>(y.numel()), 0.0f);
  const float* xf = decode_fp8("ftrain::fp8_linear::forward::decode_x", x.data, xs);
  const float* wf = decode_fp8("ftrain::fp8_linear::forward::decode_w", w.data, ws);
  float* acc = acc_store.data();
  if (in > 0) gemm::f32({gemm::Op::none, gemm::Op::transpose, rows, out, in, in, in, out}, xf, wf, 0.0f, acc);
  const float unscale = math::fp8_dequantisation_factor(scale_inv_of(x), scale_inv_of(w));
  if (b == nullptr) {
    store_scaled("ftrain::fp8_linear::forward::unscale", acc, unscale, y);
    return;
  }
  std::vector<float> b_store;
  const float* bf = spans::whole_as_f32("ftrain::fp8_linear::forward::widen_b", *b, b_store);
  Kokkos::parallel_for("ftrain::fp8_linear::forward::bias", HostPolicy(0, rows), [=](std::int64_t r) {
    for (std::int64_t j = 0; j < out; ++j) acc[r * out + j] = acc[r * out + j] * unscale + bf[j];
  });
  spans::store_whole_from_f32("ftrain::fp8_linear::forward::store", acc, y);
}

void fp8_linear_backward(const Fp8Tensor& x, const Fp8Tensor& w, const Fp8Tensor& dy, const Tensor& dy_source,
                         Tensor* dx, Tensor& dw, Tensor* db) {
  constexpr const char* op = "fp8_linear_backward";
  spans::require_on_host(op, x, "x");
  spans::require_on_host(op, w, "w");
  spans::require_on_host(op, dy, "dy");
  spans::require_on_host(op, {{&dw, "dw"}, {dx, "dx"}, {db != nullptr ? &dy_source : nullptr, "dy_source"}, {db, "db"}});
  const std::int64_t in = w.data.dim(1), out = w.data.dim(0);
  const std::int64_t rows = x.data.numel() / std::max<std::int64_t>(in, 1);
  const float sx_inv = scale_inv_of(x), sw_inv = scale_inv_of(w), sdy_inv = scale_inv_of(dy);

  std::vector<float> xs, ws, dys;
  const float* xf = decode_fp8("ftrain::fp8_linear::backward::decode_x", x.data, xs);
  const float* wf = decode_fp8("ftrain::fp8_linear::backward::decode_w", w.data, ws);
  const float* dyf = decode_fp8("ftrain::fp8_linear::backward::decode_dy", dy.data, dys);

  if (dx != nullptr) {
    // dx[N,in] = dyq[N,out] . wq[out,in], then the dequantisation factor.
    std::vector<float> dx_acc(static_cast<std::size_t>(dx->numel()), 0.0f);
    if (rows > 0 && in > 0 && out > 0)
      gemm::f32({gemm::Op::none, gemm::Op::none, rows, in, out, out, in, in}, dyf, wf, 0.0f, dx_acc.data());
    store_scaled("ftrain::fp8_linear::backward::unscale_dx", dx_acc.data(),
                 math::fp8_dequantisation_factor(sdy_inv, sw_inv), *dx);
  }
  if (rows > 0 && in > 0 && out > 0) {
    // dw[out,in] += (dyq^T[out,N] . xq[N,in]) * (s_dy^-1 s_x^-1): the GEMM
    // into a zeroed f32 buffer, then one scaled add into the gradient.
    std::vector<float> dw_acc(static_cast<std::size_t>(dw.numel()), 0.0f);
    gemm::f32({gemm::Op::transpose, gemm::Op::none, out, in, rows, out, in, in}, dyf, xf, 1.0f, dw_acc.data());
    const float unscale = math::fp8_dequantisation_factor(sdy_inv, sx_inv);
    const float* a = dw_acc.data();
    float* g = dw.data_as<float>();
    Kokkos::parallel_for("ftrain::fp8_linear::backward::accumulate_dw", HostPolicy(0, dw.numel()),
                         [=](std::int64_t i) { g[i] += a[i] * unscale; });
  }
  if (db != nullptr && out > 0) {
    // Unquantised bias gradient; one column per iteration, rows in order:
    // deterministic for any thread count.
    std::vector<float> src_store;
    const float* d = spans::whole_as_f32("ftrain::fp8_linear::backward::widen_dy", dy_source, src_store);
    float* gb = db->data_as<float>();
    Kokkos::parallel_for("ftrain::fp8_linear::backward::bias", HostPolicy(0, out), [=](std::int64_t j) {
      float s = 0.0f;
      for (std::int64_t r = 0; r < rows; ++r) s += d[r * out + j];
      gb[j] += s;
    });
  }
}

void fp8_update_scales(Tensor& amax_history, Tensor& scale, Tensor& scale_inv, DType forward_format,
                       DType backward_format, std::int64_t margin, Fp8AmaxAlgo algo) {
  constexpr const char* op = "fp8_update_scales";
  spans::require_on_host(op, {{&amax_history, "amax_history"}, {&scale, "scale"}, {&scale_inv, "scale_inv"}});
  const std::int64_t len = amax_history.dim(0);
  float* h = amax_history.data_as<float>();
  float* s = scale.data_as<float>();
  float* s_inv = scale_inv.data_as<float>();
  for (int column = 0; column < kFp8NumOperands; ++column) {
    const DType format = column == kFp8GradOutput ? backward_format : forward_format;
    math::fp8_update_history_column(h, len, kFp8NumOperands, column, s, s_inv, fp8_max_of(format),
                                    static_cast<int>(margin), algo == Fp8AmaxAlgo::most_recent);
  }
}

}  // namespace ftrain::host
