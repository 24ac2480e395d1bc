// Host rotary position embedding, Hugging Face rotate-half convention
// (ops.hpp): for each head vector x of length D and i < D/2, with
// angle = (position_offset + t) * inv_freq[i] (position_offset + positions[b, t]
// when the op is given per-token positions),
//   y[i]       = x[i] * cos - x[i + D/2] * sin
//   y[i + D/2] = x[i + D/2] * cos + x[i] * sin
// Backward applies the transpose (inverse) rotation.
//
// Conventions: x, y, dy, dx are [B, T, H, D]; inv_freq is f32 [D/2]. The angle
// is the f32 product position * inv_freq[i], as HF computes it, and its
// cos/sin are tabulated for the T positions (for positions 0..max of the
// given ones) and kept per thread for reuse: a position's row is the same
// with or without per-token positions, so a document packed with restarted
// positions is rotated bit for bit as it is alone. Each pair (i, i+D/2)
// is read before either element is written, so y may alias x (dx may alias dy).
#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/error.hpp"
#include "kernels/host/float_spans.hpp"
#include "kernels/host/host_ops.hpp"
#include "kernels/math/rope.hpp"

namespace ftrain::host {

namespace {

struct RopeDims {
  std::int64_t batch, time, heads, head_dim;
};

// Shapes and dtypes were checked by ops::rope_* (kernels/op_checks.hpp).
RopeDims host_rope(const char* op, const Tensor& in, const char* in_role, const Tensor& inv_freq, const Tensor& out,
                   const char* out_role) {
  spans::require_on_host(op, {{&in, in_role}, {&out, out_role}, {&inv_freq, "inv_freq"}});
  return {in.dim(0), in.dim(1), in.dim(2), in.dim(3)};
}

// cos/sin tables [T, D/2] for positions position_offset + t.
struct RopeTables {
  std::vector<float> inv_freq;  // the key: the frequencies' values, the offset, the length
  std::int64_t position_offset = 0, time = 0;
  std::vector<float> cos_table, sin_table;
};

void fill_rope_tables(RopeTables& tables) {
  const std::int64_t half = static_cast<std::int64_t>(tables.inv_freq.size()), time = tables.time;
  const std::int64_t position_offset = tables.position_offset;
  tables.cos_table.resize(static_cast<std::size_t>(time * half));
  tables.sin_table.resize(static_cast<std::size_t>(time * half));
  const float* freq = tables.inv_freq.data();
  float* c = tables.cos_table.data();
  float* s = tables.sin_table.data();
  Kokkos::parallel_for("ftrain::rope::tables", spans::HostPolicy(0, time), [=](std::int64_t t) {
    for (std::int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(math::rope_angle(position_offset + t, freq[i]));
      c[t * half + i] = static_cast<float>(std::cos(angle));
      s[t * half + i] = static_cast<float>(std::sin(angle));
    }
  });
}

// The tables of the last few (frequencies, offset, length) this thread used:
// every layer's forward and backward at one sequence length asks for the same
// ones, and libm's cos/sin for them cost more than the rotation itself. Keyed
// by the frequencies' values, not their address, so a freed and reused
// buffer cannot return stale tables. Per thread: asynchronous host streams
// run ops on worker threads, and a table is read while its op runs.
const RopeTables& rope_tables(const Tensor& inv_freq, std::int64_t position_offset, std::int64_t time,
                              std::int64_t half) {
  constexpr std::size_t kCachedShapes = 4;
  thread_local std::vector<RopeTables> cache;  // most recently used last
  const float* freq = static_cast<const float*>(inv_freq.data());
  for (std::size_t k = cache.size(); k-- > 0;) {
    const RopeTables& entry = cache[k];
    if (entry.position_offset == position_offset && entry.time == time &&
        static_cast<std::int64_t>(entry.inv_freq.size()) == half &&
        std::equal(entry.inv_freq.begin(), entry.inv_freq.end(), freq,
                   [](float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; })) {
      if (k + 1 != cache.size()) std::rotate(cache.begin() + static_cast<std::ptrdiff_t>(k),
                                             cache.begin() + static_cast<std::ptrdiff_t>(k) + 1, cache.end());
      return cache.back();
    }
  }
  if (cache.size() == kCachedShapes) cache.erase(cache.begin());
  RopeTables fresh;
  fresh.inv_freq.assign(freq, freq + half);
  fresh.position_offset = position_offset;
  fresh.time = time;
  fill_rope_tables(fresh);
  cache.push_back(std::move(fresh));
  return cache.back();
}

// The rows of the tables for each token: t, or positions[b, t] (checked
// non-negative) when given. time_rows is the tables' length: at least T, so
// packed windows (whose restarted positions stay below T) share the tables
// of the window's length instead of tabulating a new length per batch.
struct TokenRows {
  const std::int32_t* positions = nullptr;  // null: row t
  std::int64_t time_rows = 0;
};

TokenRows token_rows(const char* op, const Tensor* positions, const RopeDims& d) {
  if (positions == nullptr) return {nullptr, d.time};
  spans::require_on_host(op, {{positions, "positions"}});
  const auto* p = positions->data_as<std::int32_t>();
  std::int64_t most = 0;
  for (std::int64_t k = 0; k < d.batch * d.time; ++k) {
    FT_CHECK(p[k] >= 0) << op << ": positions[" << k / d.time << ", " << k % d.time << "] = " << p[k]
                        << " is negative (positions " << positions->describe() << ")";
    most = std::max<std::int64_t>(most, p[k]);
  }
  return {p, std::max<std::int64_t>(d.time, most + 1)};
}

// out = R(direction * angle) in: direction +1 forward, -1 backward.
void rope_apply(const char* kernel_name, const Tensor& in, const Tensor& inv_freq, std::int64_t position_offset,
                const TokenRows& rows, const Tensor& out, float direction, const RopeDims& d) {
  const std::int64_t half = d.head_dim / 2;
  const RopeTables& tables = rope_tables(inv_freq, position_offset, rows.time_rows, half);
  const float* cos_base = tables.cos_table.data();
  const float* sin_base = tables.sin_table.data();
  const std::int32_t* positions = rows.positions;
  const std::int64_t row = d.heads * d.head_dim, time = d.time, heads = d.heads, head_dim = d.head_dim;
  Kokkos::parallel_for(kernel_name, spans::HostPolicy(0, d.batch * d.time), [=](std::int64_t bt) {
    const std::int64_t t = positions != nullptr ? positions[bt] : bt % time, offset = bt * row;
    const float* xr = spans::read_f32(in, offset, row, spans::thread_scratch(0, row));
    float* yr = spans::write_f32_begin(out, offset, spans::thread_scratch(1, row));
    const float* c = cos_base + t * half;
    const float* s = sin_base + t * half;
    for (std::int64_t h = 0; h < heads; ++h) {
      const float* x = xr + h * head_dim;
      float* y = yr + h * head_dim;
      for (std::int64_t i = 0; i < half; ++i) {
        const math::RotatedPair r = math::rope_rotate(x[i], x[i + half], c[i], s[i], direction);
        y[i] = r.first;
        y[i + half] = r.second;
      }
    }
    spans::write_f32_end(out, offset, row, yr);
  });
}

}  // namespace

void rope_forward(const Tensor& x, const Tensor& inv_freq, std::int64_t position_offset, const Tensor* positions,
                  Tensor& y) {
  const RopeDims d = host_rope("rope_forward", x, "x", inv_freq, y, "y");
  rope_apply("ftrain::rope::forward", x, inv_freq, position_offset, token_rows("rope_forward", positions, d), y,
             1.0f, d);
}

void rope_backward(const Tensor& dy, const Tensor& inv_freq, std::int64_t position_offset, const Tensor* positions,
                   Tensor& dx) {
  const RopeDims d = host_rope("rope_backward", dy, "dy", inv_freq, dx, "dx");
  rope_apply("ftrain::rope::backward", dy, inv_freq, position_offset, token_rows("rope_backward", positions, d), dx,
             -1.0f, d);
}

}  // namespace ftrain::host
