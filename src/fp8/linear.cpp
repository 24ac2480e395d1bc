// FP8 linear emulation; see linear.hpp.
#include "fp8/linear.hpp"

#include <Kokkos_Core.hpp>
#include <cmath>

#include "core/error.hpp"
#include "kernels/ops.hpp"

namespace ftrain::fp8 {

namespace {

using HostPolicy = Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>;

// The emulation mixes ops and host loops over the same buffers, so its own
// ops run on the synchronous host context; the caller's stream is waited for
// on entry, and everything is complete on return (issue 12 item 5 moves FP8
// into kernels/ and onto the caller's stream).
ExecutionContext& emulation() { return host_context(); }

Tensor as_f32(const Tensor& t) {
  if (t.dtype() == DType::f32) return t;
  Tensor out = Tensor::empty(t.shape(), DType::f32, t.device());
  ops::cast(emulation(), t, out);
  return out;
}

void require_host(const char* op, const Tensor& t, const char* role) {
  FT_CHECK(t.defined() && t.device() == Device::host)
      << op << ": " << role << " " << t.describe() << " must be a host tensor (FP8 GEMMs on CUDA are not built yet)";
}

// out (any float dtype) = acc * factor
void scale_into(const char* kernel, const Tensor& acc, float factor, Tensor& out) {
  const float* a = acc.data_as<float>();
  if (out.dtype() == DType::f32) {
    float* o = out.data_as<float>();
    Kokkos::parallel_for(kernel, HostPolicy(0, acc.numel()), [=](std::int64_t i) { o[i] = a[i] * factor; });
    return;
  }
  Tensor scaled = Tensor::empty(acc.shape(), DType::f32);
  float* o = scaled.data_as<float>();
  Kokkos::parallel_for(kernel, HostPolicy(0, acc.numel()), [=](std::int64_t i) { o[i] = a[i] * factor; });
  ops::cast(emulation(), scaled, out);
}

}  // namespace

float quantize(const Tensor& src, float scale, DType fp8, Tensor& dst) {
  require_host("fp8::quantize", src, "src");
  FT_CHECK(dst.dtype() == DType::f32 && dst.numel() == src.numel())
      << "fp8::quantize: dst " << dst.describe() << " must be f32 with the numel of " << src.describe();
  FT_CHECK(fp8 == DType::fp8_e4m3 || fp8 == DType::fp8_e5m2) << "fp8::quantize to " << dtype_name(fp8);
  const Tensor s = as_f32(src);
  const float* in = s.data_as<float>();
  float* out = dst.data_as<float>();
  const bool e4m3 = fp8 == DType::fp8_e4m3;
  Kokkos::parallel_for("ftrain::fp8::quantize", HostPolicy(0, s.numel()), [=](std::int64_t i) {
    const float v = in[i] * scale;
    out[i] = e4m3 ? to_float(to_fp8_e4m3(v)) : to_float(to_fp8_e5m2(v));
  });
  // Max is order-independent: the same amax for any thread count. A NaN
  // anywhere makes the result NaN (fmax would hide it).
  float amax = 0.0f;
  Kokkos::parallel_reduce(
      "ftrain::fp8::amax", HostPolicy(0, s.numel()),
      [=](std::int64_t i, float& m) {
        const float a = std::fabs(in[i]);
        if (std::isnan(a) || a > m) m = a;
      },
      Kokkos::Max<float>(amax));
  bool has_nan = false;
  for (std::int64_t i = 0; i < s.numel() && !has_nan; ++i) has_nan = std::isnan(in[i]);
  return has_nan ? NAN : amax;
}

void linear_forward(ExecutionContext& exec, const Recipe& recipe, LinearState& state, bool record, const Tensor& x,
                    const Tensor& w, const Tensor* b, Tensor& y) {
  constexpr const char* op = "fp8::linear_forward";
  exec.compute().synchronize();  // x and w may still be being written
  require_host(op, x, "x");
  require_host(op, w, "w");
  FT_CHECK(state.defined()) << op << ": no FP8 state for this layer";
  FT_CHECK(w.ndim() == 2 && x.numel() % w.dim(1) == 0 && y.numel() == x.numel() / w.dim(1) * w.dim(0))
      << op << ": x " << x.describe() << ", w " << w.describe() << ", y " << y.describe();
  const float sx = state.scale_of(kInput), sw = state.scale_of(kWeight);
  Tensor xq = Tensor::empty(x.shape(), DType::f32), wq = Tensor::empty(w.shape(), DType::f32);
  const float amax_x = quantize(x, sx, recipe.forward_dtype(), xq);
  const float amax_w = quantize(w, sw, recipe.forward_dtype(), wq);
  if (record) {
    state.record(kInput, amax_x);
    state.record(kWeight, amax_w);
  }
  Tensor acc = Tensor::empty(y.shape(), DType::f32);
  ops::linear_forward(emulation(), xq, wq, nullptr, acc);
  const float unscale = 1.0f / (sx * sw);
  if (b == nullptr) {
    scale_into("ftrain::fp8::linear::forward::unscale", acc, unscale, y);
    return;
  }
  const Tensor b32 = as_f32(*b);
  const float* bf = b32.data_as<float>();
  float* a = acc.data_as<float>();
  const std::int64_t out = w.dim(0);
  Kokkos::parallel_for("ftrain::fp8::linear::forward::bias", HostPolicy(0, acc.numel() / out), [=](std::int64_t r) {
    for (std::int64_t j = 0; j < out; ++j) a[r * out + j] = a[r * out + j] * unscale + bf[j];
  });
  if (y.dtype() == DType::f32) {
    scale_into("ftrain::fp8::linear::forward::store", acc, 1.0f, y);
  } else {
    ops::cast(emulation(), acc, y);
  }
}

void linear_backward(ExecutionContext& exec, const Recipe& recipe, LinearState& state, bool record, const Tensor& x,
                     const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw, Tensor* db) {
  constexpr const char* op = "fp8::linear_backward";
  exec.compute().synchronize();  // x, w, dy and dw may still be in use by queued ops
  require_host(op, x, "x");
  require_host(op, w, "w");
  require_host(op, dy, "dy");
  require_host(op, dw, "dw");
  FT_CHECK(state.defined()) << op << ": no FP8 state for this layer";
  FT_CHECK(dw.dtype() == DType::f32 && dw.shape() == w.shape())
      << op << ": dw " << dw.describe() << " must be f32 shaped like w " << w.describe();
  const float sx = state.scale_of(kInput), sw = state.scale_of(kWeight), sdy = state.scale_of(kGradOutput);
  Tensor xq = Tensor::empty(x.shape(), DType::f32), wq = Tensor::empty(w.shape(), DType::f32);
  Tensor dyq = Tensor::empty(dy.shape(), DType::f32);
  quantize(x, sx, recipe.forward_dtype(), xq);
  quantize(w, sw, recipe.forward_dtype(), wq);
  const float amax_dy = quantize(dy, sdy, recipe.backward_dtype(), dyq);
  if (record) state.record(kGradOutput, amax_dy);

  const std::int64_t out = w.dim(0), rows = dy.numel() / out;
  // Both GEMMs from one call of the f32 op: dx_acc = dyq . wq, dw_acc = dyq^T . xq.
  Tensor dw_acc = Tensor::zeros(w.shape(), DType::f32);
  Tensor dx_acc;
  if (dx != nullptr) dx_acc = Tensor::empty(x.shape(), DType::f32);
  ops::linear_backward(emulation(), xq, wq, dyq, dx != nullptr ? &dx_acc : nullptr, dw_acc, nullptr);
  if (dx != nullptr) scale_into("ftrain::fp8::linear::backward::unscale_dx", dx_acc, 1.0f / (sdy * sw), *dx);
  {
    const float unscale = 1.0f / (sdy * sx);
    const float* a = dw_acc.data_as<float>();
    float* g = dw.data_as<float>();
    Kokkos::parallel_for("ftrain::fp8::linear::backward::accumulate_dw", HostPolicy(0, dw.numel()),
                         [=](std::int64_t i) { g[i] += a[i] * unscale; });
  }
  if (db != nullptr) {
    FT_CHECK(db->dtype() == DType::f32 && db->numel() == out) << op << ": db " << db->describe();
    const Tensor dy32 = as_f32(dy);
    const float* d = dy32.data_as<float>();
    float* gb = db->data_as<float>();
    // One column per iteration, rows summed in order: deterministic.
    Kokkos::parallel_for("ftrain::fp8::linear::backward::bias", HostPolicy(0, out), [=](std::int64_t j) {
      float s = 0.0f;
      for (std::int64_t r = 0; r < rows; ++r) s += d[r * out + j];
      gb[j] += s;
    });
  }
}

}  // namespace ftrain::fp8
