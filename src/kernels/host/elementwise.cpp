// Host element-wise ops: add, add_inplace, scale_inplace, fill, cast,
// sum, sum_squares (ops.hpp).
//
// Conventions: tensors are processed in chunks of spans::kChunk elements; each
// chunk is viewed as f32 (bf16 widened into scratch, rounded back on store) so
// that the arithmetic loops are plain float loops. cast handles every float
// dtype, fp8 included, converting to the destination with dtype.hpp's
// saturating round-to-nearest-even encoders; its dtype switch runs once per
// chunk. f16 goes through kernels/math/f16.hpp, the CUDA cast's functions.
// sum and sum_squares accumulate in double in kernels/math/reduction.hpp's
// order, the CUDA kernels' (bit for bit the same totals).
#include <Kokkos_Core.hpp>
#include <cstring>
#include <vector>

#include "base/error.hpp"
#include "kernels/host/float_spans.hpp"
#include "kernels/host/host_ops.hpp"
#include "kernels/math/f16.hpp"
#include "kernels/math/pointwise.hpp"
#include "kernels/math/reduction.hpp"

namespace ftrain::host {

using spans::HostPolicy;

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  constexpr const char* op = "add";
  spans::require_on_host(op, {{&a, "a"}, {&b, "b"}, {&out, "out"}});
  const Tensor ta = a, tb = b, tout = out;
  spans::for_each_chunk("ftrain::add", a.numel(), [=](std::int64_t begin, std::int64_t n) {
    const float* x = spans::read_f32(ta, begin, n, spans::thread_scratch(0, n));
    const float* y = spans::read_f32(tb, begin, n, spans::thread_scratch(1, n));
    float* o = spans::write_f32_begin(tout, begin, spans::thread_scratch(2, n));
    for (std::int64_t i = 0; i < n; ++i) o[i] = math::add_value(x[i], y[i]);
    spans::write_f32_end(tout, begin, n, o);
  });
}

void add_inplace(Tensor& acc, const Tensor& x) {
  constexpr const char* op = "add_inplace";
  spans::require_on_host(op, {{&acc, "acc"}, {&x, "x"}});
  const Tensor tacc = acc, tx = x;
  spans::for_each_chunk("ftrain::add_inplace", acc.numel(), [=](std::int64_t begin, std::int64_t n) {
    const float* add = spans::read_f32(tx, begin, n, spans::thread_scratch(0, n));
    spans::accumulate_f32(tacc, begin, n, add);
  });
}

void scale_inplace(Tensor& x, float factor) {
  constexpr const char* op = "scale_inplace";
  spans::require_defined_host(op, x, "x");
  const Tensor tx = x;
  spans::for_each_chunk("ftrain::scale_inplace", x.numel(), [=](std::int64_t begin, std::int64_t n) {
    const float* in = spans::read_f32(tx, begin, n, spans::thread_scratch(0, n));
    float* o = spans::write_f32_begin(tx, begin, spans::thread_scratch(0, n));
    for (std::int64_t i = 0; i < n; ++i) o[i] = math::scale_value(in[i], factor);
    spans::write_f32_end(tx, begin, n, o);
  });
}

namespace {

// The storage bytes of `value` in dtype t (encoded once, then replicated).
template <class T>
void fill_typed(const Tensor& x, T code) {
  T* p = static_cast<T*>(x.data());
  spans::for_each_chunk("ftrain::fill", x.numel(), [=](std::int64_t begin, std::int64_t n) {
    std::fill(p + begin, p + begin + n, code);
  });
}

// Widens n elements of a float buffer of dtype T into dst.
template <class T>
void decode_chunk(const void* src, std::int64_t begin, std::int64_t n, float* dst) {
  const T* p = static_cast<const T*>(src) + begin;
  if constexpr (std::is_same_v<T, float>) {
    std::memcpy(dst, p, static_cast<std::size_t>(n) * sizeof(float));
  } else if constexpr (std::is_same_v<T, f16>) {
    for (std::int64_t i = 0; i < n; ++i) dst[i] = math::f16_bits_to_float(p[i].bits);  // as the CUDA cast
  } else {
    for (std::int64_t i = 0; i < n; ++i) dst[i] = to_float(p[i]);
  }
}

template <class T>
T encode_one(float v) {
  if constexpr (std::is_same_v<T, float>) return v;
  if constexpr (std::is_same_v<T, bf16>) return to_bf16(v);
  if constexpr (std::is_same_v<T, f16>) return f16{math::float_to_f16_bits(v)};  // as the CUDA cast
  if constexpr (std::is_same_v<T, fp8_e4m3>) return to_fp8_e4m3(v);
  if constexpr (std::is_same_v<T, fp8_e5m2>) return to_fp8_e5m2(v);
}

template <class T>
void encode_chunk(const float* src, void* dst, std::int64_t begin, std::int64_t n) {
  T* p = static_cast<T*>(dst) + begin;
  for (std::int64_t i = 0; i < n; ++i) p[i] = encode_one<T>(src[i]);
}

using DecodeFn = void (*)(const void*, std::int64_t, std::int64_t, float*);
using EncodeFn = void (*)(const float*, void*, std::int64_t, std::int64_t);

DecodeFn decoder_for(DType t) {
  switch (t) {
    case DType::f32: return decode_chunk<float>;
    case DType::bf16: return decode_chunk<bf16>;
    case DType::f16: return decode_chunk<f16>;
    case DType::fp8_e4m3: return decode_chunk<fp8_e4m3>;
    case DType::fp8_e5m2: return decode_chunk<fp8_e5m2>;
    default: return nullptr;
  }
}

EncodeFn encoder_for(DType t) {
  switch (t) {
    case DType::f32: return encode_chunk<float>;
    case DType::bf16: return encode_chunk<bf16>;
    case DType::f16: return encode_chunk<f16>;
    case DType::fp8_e4m3: return encode_chunk<fp8_e4m3>;
    case DType::fp8_e5m2: return encode_chunk<fp8_e5m2>;
    default: return nullptr;
  }
}

}  // namespace

void fill(Tensor& x, float value) {
  constexpr const char* op = "fill";
  spans::require_defined_host(op, x, "x");
  switch (x.dtype()) {
    case DType::f32: return fill_typed(x, value);
    case DType::bf16: return fill_typed(x, to_bf16(value));
    case DType::f16: return fill_typed(x, to_f16(value));
    case DType::fp8_e4m3: return fill_typed(x, to_fp8_e4m3(value));
    case DType::fp8_e5m2: return fill_typed(x, to_fp8_e5m2(value));
    case DType::f64: return fill_typed(x, static_cast<double>(value));  // accumulators (gradient norm)
    default: FT_THROW() << op << ": x " << x.describe() << " must have a float dtype";
  }
}

void cast(const Tensor& src, Tensor& dst) {
  constexpr const char* op = "cast";
  spans::require_on_host(op, {{&src, "src"}, {&dst, "dst"}});
  if (src.dtype() == dst.dtype()) {
    // Same dtype (float or integer): a bit copy, NaN payloads included.
    if (src.data() != dst.data()) {
      const char* s = static_cast<const char*>(src.data());
      char* d = static_cast<char*>(dst.data());
      const std::int64_t elem = static_cast<std::int64_t>(dtype_size(src.dtype()));
      spans::for_each_chunk("ftrain::cast::copy", src.numel(), [=](std::int64_t begin, std::int64_t n) {
        std::memcpy(d + begin * elem, s + begin * elem, static_cast<std::size_t>(n * elem));
      });
    }
    return;
  }
  const DecodeFn decode = decoder_for(src.dtype());
  const EncodeFn encode = encoder_for(dst.dtype());
  FT_CHECK(decode != nullptr && encode != nullptr)
      << op << ": cannot convert " << src.describe() << " to " << dst.describe() << " (float dtypes only)";
  const void* s = src.data();
  void* d = dst.data();
  // From or to f32 (the engine's master -> bf16 gather copies, every step) the
  // f32 side is used in place: no staging copy through the scratch.
  if (src.dtype() == DType::f32) {
    spans::for_each_chunk("ftrain::cast::from_f32", src.numel(), [=](std::int64_t begin, std::int64_t n) {
      encode(static_cast<const float*>(s) + begin, d, begin, n);
    });
    return;
  }
  if (dst.dtype() == DType::f32) {
    spans::for_each_chunk("ftrain::cast::to_f32", src.numel(), [=](std::int64_t begin, std::int64_t n) {
      decode(s, begin, n, static_cast<float*>(d) + begin);
    });
    return;
  }
  spans::for_each_chunk("ftrain::cast", src.numel(), [=](std::int64_t begin, std::int64_t n) {
    float* f = spans::thread_scratch(0, n);
    decode(s, begin, n, f);
    encode(f, d, begin, n);
  });
}

namespace {

// A whole-tensor f64 reduction in kernels/math/reduction.hpp's order (the
// CUDA kernels' order): chunk partials spread over the host threads, each
// into its own slot, then added in chunk order. The result does not depend
// on the thread count or the Kokkos backend.
double reduce(const char* kernel_name, const Tensor& x, math::ReduceTerm term) {
  const Tensor tx = x;
  const std::int64_t n = x.numel();
  const std::int64_t chunks = math::reduce_chunks(n);
  std::vector<double> partial_store(static_cast<std::size_t>(chunks));
  double* partials = partial_store.data();
  Kokkos::parallel_for(kernel_name, HostPolicy(0, chunks), [=](std::int64_t c) {
    const std::int64_t len = math::reduce_chunk_length(n, c);
    const float* v = spans::read_f32(tx, c * math::kReduceChunk, len, spans::thread_scratch(0, len));
    double lanes[math::kReduceLanes];
    for (int l = 0; l < math::kReduceLanes; ++l)
      lanes[l] = math::reduce_lane([v](std::int64_t i) { return v[i]; }, len, l, term);
    partials[c] = math::reduce_combine_lanes(lanes);
  });
  return math::reduce_combine_partials(partials, chunks);
}

}  // namespace

void sum(const Tensor& x, Tensor& out) {
  constexpr const char* op = "sum";
  spans::require_on_host(op, {{&x, "x"}, {&out, "out"}});
  out.data_as<float>()[0] = static_cast<float>(reduce("ftrain::sum", x, math::ReduceTerm::value));
}

double sum_squares(const Tensor& x) {
  spans::require_defined_host("sum_squares", x, "x");
  return reduce("ftrain::sum_squares", x, math::ReduceTerm::square);
}

}  // namespace ftrain::host
