// cuDNN fused attention as plain data (no cuDNN or CUDA header): which
// tensors the SDPA forward and backward graphs read and write, with the
// uid, dims and strides cuDNN is given for each; the per-shape key finalized
// plans are cached under; and the variant pack (uid -> pointer) an execution
// binds. The graph builder (cudnn_sdpa_graph.cpp) creates its non-virtual
// tensors from sdpa_io_tensors() and the executor (cudnn_sdpa_execute.cpp)
// binds pointers with sdpa_variant_pack() from the same table, so the host
// suite checks what a GPU would otherwise be the first to see
// (tests/unit/cuda/test_cudnn_sdpa_plan.cpp): every uid of the graph bound
// exactly once, the strides addressing BSHD memory exactly as the host and
// reference kernels do (kernels/math/attention.hpp), GQA through K/V having
// fewer heads, and the saved statistics in the host's lse layout.
//
// Saved statistics: the graphs compute stats = rowmax + log(rowsum) of the
// scaled, masked scores with CUDNN_POINTWISE_LOG (natural log), stored f32
// [B, Hq, T, 1] with strides [Hq*T, T, 1, 1]: the same numbers in the same
// memory as the host's lse f32[B, Hq, T] (kernels/host/attention.cpp,
// math::attention_lse_index), so the op table passes lse through with no
// conversion; the gpu test compares cuDNN's lse with the host's.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "base/dtype.hpp"
#include "base/error.hpp"

namespace ftrain::cuda {

struct SdpaShape {
  std::int64_t batch = 1, q_heads = 1, kv_heads = 1, seq = 1, head_dim = 64;
  bool causal = true;
  // 0 = head_dim. Another value makes Q.K^T inconsistent: the graph cuDNN
  // must refuse (how the test shows its check can fail).
  std::int64_t key_head_dim = 0;
};

enum class SdpaDirection : std::uint8_t { forward, backward };

inline const char* sdpa_op_name(SdpaDirection d) {
  return d == SdpaDirection::forward ? "attention_forward" : "attention_backward";
}

// What a finalized plan is cached under (one context's cache): everything
// the graph's dims, strides and types depend on.
struct SdpaPlanKey {
  std::int64_t batch = 0, seq = 0, q_heads = 0, kv_heads = 0, head_dim = 0;
  DType dtype = DType::bf16;
  bool causal = true;
  SdpaDirection direction = SdpaDirection::forward;

  auto tie() const { return std::tie(batch, seq, q_heads, kv_heads, head_dim, dtype, causal, direction); }
  bool operator<(const SdpaPlanKey& o) const { return tie() < o.tie(); }
  bool operator==(const SdpaPlanKey& o) const { return tie() == o.tie(); }
  SdpaShape shape() const { return {batch, q_heads, kv_heads, seq, head_dim, causal, 0}; }
};

// "attention_forward (B 2, T 4096, Hq 32, Hkv 8, D 64, bf16, causal)": how
// errors and the fallback log name a shape.
inline std::string describe(const SdpaPlanKey& k) {
  std::ostringstream s;
  s << sdpa_op_name(k.direction) << " (B " << k.batch << ", T " << k.seq << ", Hq " << k.q_heads << ", Hkv "
    << k.kv_heads << ", D " << k.head_dim << ", " << dtype_name(k.dtype) << (k.causal ? ", causal)" : ", full)");
  return s.str();
}

// Why cuDNN's graphs cannot take the key's storage ("" if they can): the
// graphs are built for bf16 Q/K/V/O/dO/dQ/dK/dV (f32 statistics).
inline std::string sdpa_dtype_refusal(const SdpaPlanKey& k) {
  if (k.dtype == DType::bf16) return "";
  return std::string("the cuDNN SDPA graphs take bf16 tensors; this call's are ") + std::string(dtype_name(k.dtype)) +
         " (or mixed)";
}

// The tensors a graph reads or writes (its variant pack), by role.
enum class SdpaOperand : std::uint8_t {
  q, k, v, out, stats, scale, neg_inf, one, dout, dq, dk, dv,
  row_dot,   // backward scratch: f32 sum_d dO.O per row, [B, Hq, T, 1]
  dq_accum,  // backward scratch: dQ accumulated in f32, [B, Hq, T, D] (cuDNN >= 9.6 initialises it)
};
enum class SdpaElement : std::uint8_t { bf16, f32 };

inline const char* sdpa_operand_name(SdpaOperand o) {
  switch (o) {
    case SdpaOperand::q: return "q";
    case SdpaOperand::k: return "k";
    case SdpaOperand::v: return "v";
    case SdpaOperand::out: return "out";
    case SdpaOperand::stats: return "lse";
    case SdpaOperand::scale: return "softmax scale";
    case SdpaOperand::neg_inf: return "-inf (causal mask)";
    case SdpaOperand::one: return "one";
    case SdpaOperand::dout: return "dout";
    case SdpaOperand::dq: return "dq";
    case SdpaOperand::dk: return "dk";
    case SdpaOperand::dv: return "dv";
    case SdpaOperand::row_dot: return "row sums of dO.O (scratch)";
    case SdpaOperand::dq_accum: return "f32 dQ accumulator (scratch)";
  }
  return "?";
}

// One non-virtual graph tensor: logical dims [B, H, rows, cols] over memory
// addressed by `strides` (elements). K and V are given to the matmuls
// transposed (K^T: [B, Hkv, D, T]) by swapping the last two strides.
struct SdpaTensor {
  std::int64_t uid;
  SdpaOperand operand;
  SdpaElement element;
  std::array<std::int64_t, 4> dims, strides;
  bool by_value;  // a host scalar passed by value (scale, -inf, one)
};

// The graph's input/output tensors in uid order. Forward: 1 Q, 2 K (as K^T),
// 3 V, 4 O, 5 stats, 6 scale, 7 -inf (causal only). Backward: 1 Q, 2 K
// (as K^T), 3 V (as V^T), 4 O, 5 stats, 6 scale, 7 -inf (causal only),
// 8 one, 9 dO, 10 dQ, 11 dK, 12 dV, 13 row sums, 14 dQ accumulator.
inline std::vector<SdpaTensor> sdpa_io_tensors(const SdpaShape& s, SdpaDirection direction) {
  const std::int64_t b = s.batch, h = s.q_heads, hk = s.kv_heads, t = s.seq, d = s.head_dim;
  const std::int64_t dk = s.key_head_dim > 0 ? s.key_head_dim : d;
  using A = std::array<std::int64_t, 4>;
  // [B, T, heads, dd] memory seen as [B, heads, T, dd] and as its transpose [B, heads, dd, T].
  const auto bshd = [&](std::int64_t heads, std::int64_t dd) { return A{t * heads * dd, dd, heads * dd, 1}; };
  const auto bshd_t = [&](std::int64_t heads, std::int64_t dd) { return A{t * heads * dd, dd, 1, heads * dd}; };
  const A scalar{1, 1, 1, 1};
  const A rows{b, h, t, 1}, rows_strides{h * t, t, 1, 1};
  const bool fwd = direction == SdpaDirection::forward;
  using E = SdpaElement;
  using O = SdpaOperand;
  std::vector<SdpaTensor> io = {
      {1, O::q, E::bf16, {b, h, t, d}, bshd(h, d), false},
      {2, O::k, E::bf16, {b, hk, dk, t}, bshd_t(hk, dk), false},
      fwd ? SdpaTensor{3, O::v, E::bf16, {b, hk, t, d}, bshd(hk, d), false}
          : SdpaTensor{3, O::v, E::bf16, {b, hk, d, t}, bshd_t(hk, d), false},
      {4, O::out, E::bf16, {b, h, t, d}, bshd(h, d), false},
      {5, O::stats, E::f32, rows, rows_strides, false},
      {6, O::scale, E::f32, scalar, scalar, true},
  };
  if (s.causal) io.push_back({7, O::neg_inf, E::f32, scalar, scalar, true});
  if (!fwd) {
    io.push_back({8, O::one, E::f32, scalar, scalar, true});
    io.push_back({9, O::dout, E::bf16, {b, h, t, d}, bshd(h, d), false});
    io.push_back({10, O::dq, E::bf16, {b, h, t, d}, bshd(h, d), false});
    io.push_back({11, O::dk, E::bf16, {b, hk, t, d}, bshd(hk, d), false});
    io.push_back({12, O::dv, E::bf16, {b, hk, t, d}, bshd(hk, d), false});
    io.push_back({13, O::row_dot, E::f32, rows, rows_strides, false});
    io.push_back({14, O::dq_accum, E::f32, {b, h, t, d}, {h * t * d, t * d, d, 1}, false});
  }
  return io;
}

// The one table entry for `operand`, or nullptr when the graph has none.
inline const SdpaTensor* sdpa_find(const std::vector<SdpaTensor>& io, SdpaOperand operand) {
  for (const SdpaTensor& t : io)
    if (t.operand == operand) return &t;
  return nullptr;
}

// Bytes of the backward's two f32 scratch tensors, each rounded up to 256
// bytes, which the executor places after cuDNN's own workspace.
inline std::int64_t sdpa_round_up(std::int64_t bytes) { return (bytes + 255) / 256 * 256; }
inline std::int64_t sdpa_row_dot_bytes(const SdpaShape& s) {
  return sdpa_round_up(s.batch * s.q_heads * s.seq * std::int64_t(sizeof(float)));
}
inline std::int64_t sdpa_dq_accum_bytes(const SdpaShape& s) {
  return sdpa_round_up(s.batch * s.q_heads * s.seq * s.head_dim * std::int64_t(sizeof(float)));
}

// The device buffers of one attention call (the op's tensors) plus the
// backward's scratch; unused members stay null.
struct SdpaBuffers {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;  // written by the forward, read by the backward
  void* stats = nullptr;
  const void* dout = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  void* row_dot = nullptr;
  void* dq_accum = nullptr;
};

// The by-value scalars: host memory the variant pack points at, read by
// cudnnBackendExecute (keep them alive across that call).
struct SdpaScalars {
  float scale = 1.0f;
  float neg_inf = -std::numeric_limits<float>::infinity();
  float one = 1.0f;
};

struct SdpaVariantPack {
  std::vector<std::int64_t> uids;
  std::vector<void*> pointers;
};

// Binds each of the graph's tensors (sdpa_io_tensors, same order) to its
// buffer. Throws naming the operand when a buffer the graph needs is null,
// or when a device pointer breaks the 16-byte alignment the graph declares.
inline SdpaVariantPack sdpa_variant_pack(const SdpaShape& shape, SdpaDirection direction, const SdpaBuffers& buffers,
                                         SdpaScalars& scalars) {
  SdpaVariantPack pack;
  for (const SdpaTensor& t : sdpa_io_tensors(shape, direction)) {
    void* p = nullptr;
    switch (t.operand) {
      case SdpaOperand::q: p = const_cast<void*>(buffers.q); break;
      case SdpaOperand::k: p = const_cast<void*>(buffers.k); break;
      case SdpaOperand::v: p = const_cast<void*>(buffers.v); break;
      case SdpaOperand::out: p = buffers.out; break;
      case SdpaOperand::stats: p = buffers.stats; break;
      case SdpaOperand::scale: p = &scalars.scale; break;
      case SdpaOperand::neg_inf: p = &scalars.neg_inf; break;
      case SdpaOperand::one: p = &scalars.one; break;
      case SdpaOperand::dout: p = const_cast<void*>(buffers.dout); break;
      case SdpaOperand::dq: p = buffers.dq; break;
      case SdpaOperand::dk: p = buffers.dk; break;
      case SdpaOperand::dv: p = buffers.dv; break;
      case SdpaOperand::row_dot: p = buffers.row_dot; break;
      case SdpaOperand::dq_accum: p = buffers.dq_accum; break;
    }
    FT_CHECK(p != nullptr) << "cuDNN " << sdpa_op_name(direction) << ": no buffer for uid " << t.uid << " ("
                           << sdpa_operand_name(t.operand) << ")";
    FT_CHECK(t.by_value || reinterpret_cast<std::uintptr_t>(p) % 16 == 0)
        << "cuDNN " << sdpa_op_name(direction) << ": " << sdpa_operand_name(t.operand) << " at " << p
        << " is not 16-byte aligned (the graph declares 16)";
    pack.uids.push_back(t.uid);
    pack.pointers.push_back(p);
  }
  return pack;
}

}  // namespace ftrain::cuda
