// Host fused FP8 producers (op_list.hpp: rmsnorm_forward_fp8,
// swiglu_forward_fp8): the norm or the gate, its activation stored, and the
// FP8 cast(s) of the stored value with their amax, in one pass over the
// data. Bit for bit rmsnorm_forward / swiglu_forward followed by
// cast_to_fp8 (kernels/host/{rmsnorm,swiglu,fp8}.cpp): the same row sum
// (spans::dot_f32), the same per-element functions (kernels/math/
// fp8_fusions.hpp, the ones kernels/cuda/fp8_fusions.cu calls), and the
// amax as the integer max of math::amax_key over the STORED values, which is
// order-independent and so equals cast_to_fp8's chunked reduction.
#include <Kokkos_Core.hpp>
#include <algorithm>
#include <string>

#include "base/error.hpp"
#include "kernels/host/float_spans.hpp"
#include "kernels/host/host_ops.hpp"
#include "kernels/math/fp8_fusions.hpp"

namespace ftrain::host {

using spans::HostPolicy;

namespace {

// What the kernels need of one cast, read once before the loops.
struct CastTarget {
  std::uint8_t* codes;
  float scale;
  bool e4m3;
};

CastTarget target_of(const Fp8Tensor& t) {
  return {static_cast<std::uint8_t*>(t.data.data()), *t.scale.data_as<float>(), t.data.dtype() == DType::fp8_e4m3};
}

// After the pass: scale_inv = 1 / scale, and the amax slot max-combined with
// the amax of the stored values (cast_to_fp8's epilogue).
void finish_cast(const Fp8Tensor& t, std::uint32_t amax_key) {
  *t.scale_inv.data_as<float>() = math::fp8_scale_inv(*t.scale.data_as<float>());
  if (t.amax.defined()) {
    float* slot = t.amax.data_as<float>();
    *slot = math::amax_combine(*slot, math::amax_of_key(amax_key));
  }
}

}  // namespace

void rmsnorm_forward_fp8(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd, Fp8Casts& casts) {
  constexpr const char* op = "rmsnorm_forward_fp8";
  // Shapes, dtypes and the descriptors: checked by ops::rmsnorm_forward_fp8 (kernels/op_checks.hpp).
  spans::require_on_host(op, {{&x, "x"}, {&w, "w"}, {&y, "y"}, {&rstd, "rstd"}});
  for (int c = 0; c < casts.count; ++c) spans::require_on_host(op, casts.out[c], "casts.out[" + std::to_string(c) + "]");
  const std::int64_t width = x.dim(-1), rows = x.numel() / width;

  std::vector<float> w_store;
  const float* wf = spans::whole_as_f32("ftrain::rmsnorm_fp8::widen_w", w, w_store);
  float* rstd_out = rstd.data_as<float>();
  CastTarget targets[Fp8Casts::kMax];
  const int count = casts.count;
  for (int c = 0; c < count; ++c) targets[c] = target_of(casts.out[c]);
  const Tensor tx = x, ty = y;
  const bool stored_bf16 = y.dtype() == DType::bf16;
  const float inv_width = 1.0f / static_cast<float>(width);
  std::uint32_t top = 0;
  Kokkos::parallel_reduce(
      "ftrain::rmsnorm_fp8::forward", HostPolicy(0, rows),
      [=](std::int64_t r, std::uint32_t& key) {
        const std::int64_t offset = r * width;
        const float* xr = spans::read_f32(tx, offset, width, spans::thread_scratch(0, width));
        float* yr = spans::thread_scratch(1, width);  // the stored values, rounded to y's dtype
        const float s = math::rmsnorm_rstd(spans::dot_f32(xr, xr, width), inv_width, eps);
        for (std::int64_t j = 0; j < width; ++j) {
          const float v = math::rmsnorm_fp8_stored(xr[j], s, wf[j], stored_bf16);
          yr[j] = v;
          key = std::max(key, math::amax_key(v));
          for (int c = 0; c < count; ++c) targets[c].codes[offset + j] = math::fp8_cast(v, targets[c].scale, targets[c].e4m3);
        }
        // Exact: the values are already on y's grid.
        if (stored_bf16) spans::narrow(yr, static_cast<bf16*>(ty.data()) + offset, width);
        else std::copy(yr, yr + width, static_cast<float*>(ty.data()) + offset);
        rstd_out[r] = s;
      },
      Kokkos::Max<std::uint32_t>(top));
  for (int c = 0; c < count; ++c) finish_cast(casts.out[c], top);
}

void swiglu_forward_fp8(const Tensor& gate, const Tensor& up, Tensor& out, Fp8Tensor& cast) {
  constexpr const char* op = "swiglu_forward_fp8";
  // Shapes, dtypes and the descriptor: checked by ops::swiglu_forward_fp8 (kernels/op_checks.hpp).
  spans::require_on_host(op, {{&gate, "gate"}, {&up, "up"}, {&out, "out"}});
  spans::require_on_host(op, cast, "cast");

  const CastTarget target = target_of(cast);
  const Tensor tg = gate, tu = up, to = out;
  const bool stored_bf16 = out.dtype() == DType::bf16;
  const std::int64_t n = gate.numel();
  const std::int64_t chunks = (n + spans::kChunk - 1) / spans::kChunk;
  std::uint32_t top = 0;
  Kokkos::parallel_reduce(
      "ftrain::swiglu_fp8::forward", HostPolicy(0, chunks),
      [=](std::int64_t chunk, std::uint32_t& key) {
        const std::int64_t begin = chunk * spans::kChunk, len = std::min(spans::kChunk, n - begin);
        const float* g = spans::read_f32(tg, begin, len, spans::thread_scratch(0, len));
        const float* u = spans::read_f32(tu, begin, len, spans::thread_scratch(1, len));
        float* o = spans::thread_scratch(2, len);
        for (std::int64_t i = 0; i < len; ++i) {
          const float v = math::swiglu_fp8_stored(g[i], u[i], stored_bf16);
          o[i] = v;
          key = std::max(key, math::amax_key(v));
          target.codes[begin + i] = math::fp8_cast(v, target.scale, target.e4m3);
        }
        if (stored_bf16) spans::narrow(o, static_cast<bf16*>(to.data()) + begin, len);
        else std::copy(o, o + len, static_cast<float*>(to.data()) + begin);
      },
      Kokkos::Max<std::uint32_t>(top));
  finish_cast(cast, top);
}

}  // namespace ftrain::host
