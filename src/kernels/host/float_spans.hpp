// Shared plumbing of the host element/row kernels: argument checks, f32 views
// of f32/bf16 storage, thread-local scratch and deterministic column sums.
//
// How host kernels handle dtypes: the dtype of each tensor is looked at once
// per chunk or row (never per element). A span of an f32 tensor is used in
// place; a span of a bf16 tensor is widened into thread-local f32 scratch,
// computed on, and rounded back (nearest even) when written. The arithmetic
// loops therefore always run on plain contiguous float arrays, which the
// compiler vectorises, and every tensor of an op may independently be f32 or
// bf16.
//
// Parameter gradients summed over rows are computed per block of
// kRowsPerBlock rows into a private partial row, then the partials are added
// in block order: no races under a threaded Kokkos, and results that do not
// depend on the number of threads (reruns must be bit-identical).
//
// Names live in ftrain::host::spans so they cannot clash with other host
// kernel helpers (ODR).
#pragma once

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "base/dtype.hpp"
#include "base/error.hpp"
#include "core/tensor.hpp"
#include "kernels/fp8_tensor.hpp"
#include "kernels/math/column_sums.hpp"
#include "kernels/tensor_checks.hpp"

namespace ftrain::host::spans {

using HostPolicy = Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>;

// Elements per chunk of element-wise kernels: a few chunk buffers fit in L1/L2.
inline constexpr std::int64_t kChunk = 4096;
// Rows per private partial in row reductions over parameter gradients: the
// norms' dw / db order the CUDA kernels follow too (kernels/math/column_sums.hpp).
inline constexpr std::int64_t kRowsPerBlock = math::kColumnSumRows;

// ---- argument checks ---------------------------------------------------------

inline void require_defined_host(const char* op, const Tensor& t, const char* role) {
  checks::require_defined(op, t, role);
  FT_CHECK(t.device() == Device::host) << op << ": " << role << " " << t.describe()
                                       << " is not on the host (host backend)";
}

// Each of `tensors` (a null entry is an absent optional one) defined and in
// host memory: the host backend's own check, once ops::<op> checked shapes
// and dtypes (kernels/op_checks.hpp).
inline void require_on_host(const char* op, std::initializer_list<std::pair<const Tensor*, const char*>> tensors) {
  for (const auto& [t, role] : tensors)
    if (t != nullptr) require_defined_host(op, *t, role);
}

// Each defined tensor of an FP8 descriptor in host memory, named
// <role>.data, <role>.scale, ...: the host backend's own check of it.
inline void require_on_host(const char* op, const Fp8Tensor& t, const std::string& role) {
  for (const auto& [part, name] : {std::pair<const Tensor*, const char*>{&t.data, ".data"}, {&t.scale, ".scale"},
                                   {&t.scale_inv, ".scale_inv"}, {&t.amax, ".amax"}, {&t.data_t, ".data_t"}})
    if (part->defined()) require_defined_host(op, *part, (role + name).c_str());
}

// f32 or bf16 storage on the host.
inline void require_float_storage(const char* op, const Tensor& t, const char* role) {
  require_defined_host(op, t, role);
  checks::require_float(op, t, role);
}

inline void require_dtype(const char* op, const Tensor& t, const char* role, DType dtype) {
  require_defined_host(op, t, role);
  checks::require_dtype(op, t, role, dtype);
}

using checks::require_numel;
using checks::require_same_shape;

// A device scalar of the clipping / guarded-optimizer ops: one element of `dtype` on the host.
inline void require_scalar(const char* op, const Tensor& t, const char* role, DType dtype) {
  require_dtype(op, t, role, dtype);
  require_numel(op, t, role, 1, "one element");
}

using checks::row_width;

// ---- scratch -------------------------------------------------------------------

// A per-thread buffer of at least n floats. Each call site within one kernel
// uses its own slot so buffers of one iteration never overlap.
inline float* thread_scratch(int slot, std::int64_t n) {
  constexpr int kSlots = 8;
  thread_local std::vector<float> buffers[kSlots];
  std::vector<float>& b = buffers[slot];
  if (b.size() < static_cast<std::size_t>(n)) b.resize(static_cast<std::size_t>(n));
  return b.data();
}

// ---- f32 views of f32/bf16 storage --------------------------------------------

inline void widen(const bf16* src, float* dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = to_float(src[i]);
}
inline void narrow(const float* src, bf16* dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = to_bf16(src[i]);
}

// n elements of t from element `offset` as f32: in place for f32, else
// widened into `scratch`.
inline const float* read_f32(const Tensor& t, std::int64_t offset, std::int64_t n, float* scratch) {
  if (t.dtype() == DType::f32) return static_cast<const float*>(t.data()) + offset;
  widen(static_cast<const bf16*>(t.data()) + offset, scratch, n);
  return scratch;
}

// Where to compute n output elements of t: in place for f32, else `scratch`
// (then write_f32_end rounds it into t).
inline float* write_f32_begin(const Tensor& t, std::int64_t offset, float* scratch) {
  if (t.dtype() == DType::f32) return static_cast<float*>(t.data()) + offset;
  return scratch;
}
inline void write_f32_end(const Tensor& t, std::int64_t offset, std::int64_t n, const float* computed) {
  if (t.dtype() == DType::bf16) narrow(computed, static_cast<bf16*>(t.data()) + offset, n);
}

// t[offset + i] += add[i] (bf16: rounded once per call).
inline void accumulate_f32(const Tensor& t, std::int64_t offset, std::int64_t n, const float* add) {
  if (t.dtype() == DType::f32) {
    float* p = static_cast<float*>(t.data()) + offset;
    for (std::int64_t i = 0; i < n; ++i) p[i] += add[i];
  } else {
    bf16* p = static_cast<bf16*>(t.data()) + offset;
    for (std::int64_t i = 0; i < n; ++i) p[i] = to_bf16(to_float(p[i]) + add[i]);
  }
}

// The whole tensor as a contiguous f32 array: its own data for f32, else a
// widened copy kept in `storage` (GEMM operands).
inline const float* whole_as_f32(const char* kernel_name, const Tensor& t, std::vector<float>& storage) {
  if (t.dtype() == DType::f32) return static_cast<const float*>(t.data());
  storage.resize(static_cast<std::size_t>(t.numel()));
  const bf16* src = static_cast<const bf16*>(t.data());
  float* dst = storage.data();
  const std::int64_t n = t.numel();
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
  Kokkos::parallel_for(kernel_name, HostPolicy(0, chunks), [=](std::int64_t c) {
    const std::int64_t begin = c * kChunk;
    widen(src + begin, dst + begin, std::min(kChunk, n - begin));
  });
  return storage.data();
}

// Rounds a contiguous f32 array into a bf16 tensor (or copies into f32).
inline void store_whole_from_f32(const char* kernel_name, const float* src, const Tensor& t) {
  const std::int64_t n = t.numel();
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
  Kokkos::parallel_for(kernel_name, HostPolicy(0, chunks), [=](std::int64_t c) {
    const std::int64_t begin = c * kChunk;
    const std::int64_t len = std::min(kChunk, n - begin);
    if (t.dtype() == DType::f32) {
      std::copy(src + begin, src + begin + len, static_cast<float*>(t.data()) + begin);
    } else {
      narrow(src + begin, static_cast<bf16*>(t.data()) + begin, len);
    }
  });
}

// ---- row reductions ------------------------------------------------------------
// Sixteen independent accumulators: without -ffast-math the compiler may not
// reorder a single running sum, so this is how a reduction gets vectorised.

inline constexpr int kLanes = 16;

inline float lane_total(const float* acc) {
  float s = 0.0f;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  return s;
}

inline float sum_f32(const float* a, std::int64_t n) {
  float acc[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += a[i + l];
  for (; i < n; ++i) acc[0] += a[i];
  return lane_total(acc);
}

inline float dot_f32(const float* a, const float* b, std::int64_t n) {
  float acc[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += a[i + l] * b[i + l];
  for (; i < n; ++i) acc[0] += a[i] * b[i];
  return lane_total(acc);
}

// ---- element-wise and row-reduction drivers ------------------------------------

// Calls body(begin, length) for consecutive chunks of [0, n) in parallel.
template <class Body>
void for_each_chunk(const char* kernel_name, std::int64_t n, Body body) {
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
  Kokkos::parallel_for(kernel_name, HostPolicy(0, chunks), [=](std::int64_t c) {
    const std::int64_t begin = c * kChunk;
    body(begin, std::min(kChunk, n - begin));
  });
}

inline std::int64_t row_blocks(std::int64_t rows) { return (rows + kRowsPerBlock - 1) / kRowsPerBlock; }

// Partial sums of `count` parameter-gradient rows of width `cols` per block
// of rows; zero-initialised. Block b's partial k is at
// data[(b * count + k) * cols].
struct BlockPartials {
  BlockPartials(std::int64_t rows, std::int64_t count, std::int64_t cols)
      : blocks(row_blocks(rows)),
        count(count),
        cols(cols),
        data(static_cast<std::size_t>(blocks * count * cols), 0.0f) {}
  float* partial(std::int64_t block, std::int64_t k) { return data.data() + (block * count + k) * cols; }

  // dst += sum over blocks of partial k, summed in block order.
  void add_into(const char* kernel_name, std::int64_t k, const Tensor& dst) {
    const float* base = data.data();
    const std::int64_t nb = blocks, nc = count, w = cols;
    for_each_chunk(kernel_name, w, [=](std::int64_t begin, std::int64_t len) {
      float* sum = thread_scratch(7, len);
      std::fill(sum, sum + len, 0.0f);
      for (std::int64_t b = 0; b < nb; ++b) {
        const float* p = base + (b * nc + k) * w + begin;
        for (std::int64_t i = 0; i < len; ++i) sum[i] += p[i];
      }
      accumulate_f32(dst, begin, len, sum);
    });
  }

  std::int64_t blocks, count, cols;
  std::vector<float> data;
};

// Calls row_body(row, block) for every row, rows of a block in order on one
// thread, blocks in parallel.
template <class RowBody>
void for_each_row_in_blocks(const char* kernel_name, std::int64_t rows, RowBody row_body) {
  Kokkos::parallel_for(kernel_name, HostPolicy(0, row_blocks(rows)), [=](std::int64_t b) {
    const std::int64_t end = std::min(rows, (b + 1) * kRowsPerBlock);
    for (std::int64_t r = b * kRowsPerBlock; r < end; ++r) row_body(r, b);
  });
}

}  // namespace ftrain::host::spans
