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
//
// Document mask (packed windows): each document of the batch becomes one
// sequence of a ragged batch, as in FlashAttention's varlen. The graphs'
// batch dimension is then the sequence count and their sequence dimension
// the longest document (both rounded up to powers of two, so a few plans
// serve every step); per-sequence lengths (the padding mask's seq_len_q /
// seq_len_kv) and ragged offsets (where each sequence's first row lives,
// in elements) are device arrays filled per call from the document ids
// (sdpa_document_segments, sdpa_ragged_arrays). The sequences stay where
// they are in the BSHD tensors and the [B, Hq, T] statistics: only the
// offsets say where each one starts.
#pragma once

#include <algorithm>
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
  // Document mask: the ragged batch's sequence count and padded length
  // (0 = no mask; `batch` and `seq` stay the window's B and T, which the
  // strides and the scratch sizes follow).
  std::int64_t ragged_sequences = 0, ragged_length = 0;
  bool ragged() const { return ragged_sequences > 0; }
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
  std::int64_t ragged_sequences = 0, ragged_length = 0;  // document mask (SdpaShape)

  auto tie() const {
    return std::tie(batch, seq, q_heads, kv_heads, head_dim, dtype, causal, direction, ragged_sequences,
                    ragged_length);
  }
  bool operator<(const SdpaPlanKey& o) const { return tie() < o.tie(); }
  bool operator==(const SdpaPlanKey& o) const { return tie() == o.tie(); }
  SdpaShape shape() const {
    return {batch, q_heads, kv_heads, seq, head_dim, causal, 0, ragged_sequences, ragged_length};
  }
};

// "attention_forward (B 2, T 4096, Hq 32, Hkv 8, D 64, bf16, causal)": how
// errors and the fallback log name a shape.
inline std::string describe(const SdpaPlanKey& k) {
  std::ostringstream s;
  s << sdpa_op_name(k.direction) << " (B " << k.batch << ", T " << k.seq << ", Hq " << k.q_heads << ", Hkv "
    << k.kv_heads << ", D " << k.head_dim << ", " << dtype_name(k.dtype) << (k.causal ? ", causal" : ", full");
  if (k.ragged_sequences > 0)
    s << ", document mask: " << k.ragged_sequences << " sequences of <= " << k.ragged_length << " tokens";
  s << ")";
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
  // Document mask only:
  seq_len_q, seq_len_kv,  // i32 [S, 1, 1, 1]: each sequence's length (one array serves both)
  q_offsets,              // i32 [S + 1, 1, 1, 1]: ragged offsets of Q, O, dO, dQ, the dQ accumulator
  kv_offsets,             // i32 [S + 1, 1, 1, 1]: ragged offsets of K, V, dK, dV (and dK/dV per query head)
  stats_offsets,          // i32 [S + 1, 1, 1, 1]: ragged offsets of the statistics and the row sums
  dk_full, dv_full,       // backward scratch under GQA: dK, dV per query head before the group sum
};
enum class SdpaElement : std::uint8_t { bf16, f32, i32 };

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
    case SdpaOperand::seq_len_q: return "sequence lengths (queries)";
    case SdpaOperand::seq_len_kv: return "sequence lengths (keys)";
    case SdpaOperand::q_offsets: return "ragged offsets of q/out/dout/dq";
    case SdpaOperand::kv_offsets: return "ragged offsets of k/v/dk/dv";
    case SdpaOperand::stats_offsets: return "ragged offsets of lse";
    case SdpaOperand::dk_full: return "dk per query head (scratch)";
    case SdpaOperand::dv_full: return "dv per query head (scratch)";
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
  std::int64_t ragged_offset_uid = 0;  // the uid of its ragged offsets (document mask), 0 = none
};

// The graph's input/output tensors in uid order. Forward: 1 Q, 2 K (as K^T),
// 3 V, 4 O, 5 stats, 6 scale, 7 -inf (causal or document mask). Backward:
// 1 Q, 2 K (as K^T), 3 V (as V^T), 4 O, 5 stats, 6 scale, 7 -inf, 8 one,
// 9 dO, 10 dQ, 11 dK, 12 dV, 13 row sums, 14 dQ accumulator. Document mask
// (ragged): 15/16 sequence lengths, 17/18/19 ragged offsets (Q-like, K-like,
// statistics), and under GQA in the backward 20/21 dK/dV per query head:
// each row-holding tensor names its offsets; the f32 scratch then shares
// the layout of the tensor it accumulates (dQ's, the statistics'), so it
// is sized by the window, not by sequences x padded length.
inline std::vector<SdpaTensor> sdpa_io_tensors(const SdpaShape& s, SdpaDirection direction) {
  const bool ragged = s.ragged();
  const std::int64_t h = s.q_heads, hk = s.kv_heads, t = s.seq, d = s.head_dim;
  // The graph's batch and sequence dims: the window's, or the ragged batch's.
  const std::int64_t b = ragged ? s.ragged_sequences : s.batch, n = ragged ? s.ragged_length : s.seq;
  const std::int64_t dk = s.key_head_dim > 0 ? s.key_head_dim : d;
  using A = std::array<std::int64_t, 4>;
  // [B, T, heads, dd] memory seen as [B, heads, T, dd] and as its transpose [B, heads, dd, T].
  const auto bshd = [&](std::int64_t heads, std::int64_t dd) { return A{t * heads * dd, dd, heads * dd, 1}; };
  const auto bshd_t = [&](std::int64_t heads, std::int64_t dd) { return A{t * heads * dd, dd, 1, heads * dd}; };
  const A scalar{1, 1, 1, 1};
  const A rows{b, h, n, 1}, rows_strides{h * t, t, 1, 1};
  const bool fwd = direction == SdpaDirection::forward;
  using E = SdpaElement;
  using O = SdpaOperand;
  const std::int64_t q_off = ragged ? 17 : 0, kv_off = ragged ? 18 : 0, stats_off = ragged ? 19 : 0;
  std::vector<SdpaTensor> io = {
      {1, O::q, E::bf16, {b, h, n, d}, bshd(h, d), false, q_off},
      {2, O::k, E::bf16, {b, hk, dk, n}, bshd_t(hk, dk), false, kv_off},
      fwd ? SdpaTensor{3, O::v, E::bf16, {b, hk, n, d}, bshd(hk, d), false, kv_off}
          : SdpaTensor{3, O::v, E::bf16, {b, hk, d, n}, bshd_t(hk, d), false, kv_off},
      {4, O::out, E::bf16, {b, h, n, d}, bshd(h, d), false, q_off},
      {5, O::stats, E::f32, rows, rows_strides, false, stats_off},
      {6, O::scale, E::f32, scalar, scalar, true},
  };
  if (s.causal || ragged) io.push_back({7, O::neg_inf, E::f32, scalar, scalar, true});
  if (!fwd) {
    io.push_back({8, O::one, E::f32, scalar, scalar, true});
    io.push_back({9, O::dout, E::bf16, {b, h, n, d}, bshd(h, d), false, q_off});
    io.push_back({10, O::dq, E::bf16, {b, h, n, d}, bshd(h, d), false, q_off});
    io.push_back({11, O::dk, E::bf16, {b, hk, n, d}, bshd(hk, d), false, kv_off});
    io.push_back({12, O::dv, E::bf16, {b, hk, n, d}, bshd(hk, d), false, kv_off});
    io.push_back({13, O::row_dot, E::f32, rows, rows_strides, false, stats_off});
    io.push_back(ragged ? SdpaTensor{14, O::dq_accum, E::f32, {b, h, n, d}, bshd(h, d), false, q_off}
                        : SdpaTensor{14, O::dq_accum, E::f32, {b, h, n, d}, {h * n * d, n * d, d, 1}, false});
  }
  if (ragged) {
    const A lengths{b, 1, 1, 1}, offsets{b + 1, 1, 1, 1};
    io.push_back({15, O::seq_len_q, E::i32, lengths, scalar, false});
    io.push_back({16, O::seq_len_kv, E::i32, lengths, scalar, false});
    io.push_back({17, O::q_offsets, E::i32, offsets, scalar, false});
    io.push_back({18, O::kv_offsets, E::i32, offsets, scalar, false});
    io.push_back({19, O::stats_offsets, E::i32, offsets, scalar, false});
    if (!fwd && h != hk) {
      // dK/dV of every query head, in [B, T, Hq, D] memory: K's offsets
      // times Hq / Hkv, which cuDNN applies itself (as cudnn-frontend's
      // ragged GQA backward relies on).
      io.push_back({20, O::dk_full, E::bf16, {b, h, n, d}, bshd(h, d), false, kv_off});
      io.push_back({21, O::dv_full, E::bf16, {b, h, n, d}, bshd(h, d), false, kv_off});
    }
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
// Each of dK/dV per query head (GQA under the document mask): sized in f32
// like cudnn-frontend's, though cuDNN writes bf16 there.
inline std::int64_t sdpa_full_head_bytes(const SdpaShape& s) {
  return s.ragged() && s.q_heads != s.kv_heads ? sdpa_dq_accum_bytes(s) : 0;
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
  // Document mask: the device arrays of sdpa_ragged_arrays, and the GQA scratch.
  const void* seq_len = nullptr;
  const void* q_offsets = nullptr;
  const void* kv_offsets = nullptr;
  const void* stats_offsets = nullptr;
  void* dk_full = nullptr;
  void* dv_full = nullptr;
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
      case SdpaOperand::seq_len_q: p = const_cast<void*>(buffers.seq_len); break;
      case SdpaOperand::seq_len_kv: p = const_cast<void*>(buffers.seq_len); break;
      case SdpaOperand::q_offsets: p = const_cast<void*>(buffers.q_offsets); break;
      case SdpaOperand::kv_offsets: p = const_cast<void*>(buffers.kv_offsets); break;
      case SdpaOperand::stats_offsets: p = const_cast<void*>(buffers.stats_offsets); break;
      case SdpaOperand::dk_full: p = buffers.dk_full; break;
      case SdpaOperand::dv_full: p = buffers.dv_full; break;
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

// ---- document mask: from document ids to the ragged batch -------------------------

// The documents of a batch of packed windows, in row-major order: document
// k is tokens [first[k], first[k] + length[k]) of window row row[k].
struct SdpaDocumentSegments {
  std::int64_t batch = 0, seq = 0;
  std::vector<std::int64_t> row, first, length;
  std::int64_t count() const { return static_cast<std::int64_t>(length.size()); }
  std::int64_t longest() const { return length.empty() ? 0 : *std::max_element(length.begin(), length.end()); }
};

// Splits host document ids i32 [batch, seq] (`what` names the op and the
// tensor in errors) where the id changes. A row's ids start at 0 and never decrease
// (data ... document_mask on makes them so); anything else is refused
// naming the tensor, the row and the token, since a document boundary read
// from such ids would not be the one the host backend applies.
inline SdpaDocumentSegments sdpa_document_segments(const std::int32_t* ids, std::int64_t batch, std::int64_t seq,
                                                   const std::string& what) {
  SdpaDocumentSegments segs;
  segs.batch = batch;
  segs.seq = seq;
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int32_t* row = ids + b * seq;
    if (seq == 0) continue;
    FT_CHECK(row[0] == 0) << what << ": row " << b << " starts at document id " << row[0]
                          << "; a packed window's ids start at 0";
    std::int64_t start = 0;
    for (std::int64_t t = 1; t <= seq; ++t) {
      if (t < seq) {
        FT_CHECK(row[t] >= row[t - 1]) << what << ": row " << b << " decreases at token " << t << " ("
                                       << row[t - 1] << " then " << row[t] << "); a packed window's ids never do";
        if (row[t] == row[t - 1]) continue;
      }
      segs.row.push_back(b);
      segs.first.push_back(start);
      segs.length.push_back(t - start);
      start = t;
    }
  }
  return segs;
}

inline std::int64_t sdpa_power_of_two_at_least(std::int64_t n) {
  std::int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// The ragged batch a plan is built for: the document count and the longest
// document rounded up to powers of two (capped by B * T and T), so that
// windows packed differently from step to step share a few plans.
inline void sdpa_set_ragged_bucket(const SdpaDocumentSegments& segs, std::int64_t& sequences, std::int64_t& length) {
  sequences = std::min(sdpa_power_of_two_at_least(segs.count()), segs.batch * segs.seq);
  length = std::min(sdpa_power_of_two_at_least(segs.longest()), segs.seq);
}

// Why cuDNN's ragged graphs cannot take this shape ("" if they can): the
// ragged offsets are i32 element offsets into the largest tensor.
inline std::string sdpa_ragged_refusal(const SdpaShape& s) {
  if (!s.ragged()) return "";
  const std::int64_t largest = s.batch * s.seq * std::max(s.q_heads, s.kv_heads) * s.head_dim;
  if (largest <= std::numeric_limits<std::int32_t>::max()) return "";
  return "the document mask's ragged offsets are i32 and this window holds " + std::to_string(largest) +
         " elements per tensor";
}

// The device arrays of one call, packed in one i32 buffer (each part starts
// 16-byte aligned, as the graph declares): the sequence lengths (unused
// sequences 0) and the ragged offsets of sequence k (element index of its
// first row; unused ones point at the end):
//   Q/O/dO/dQ: (row * T + first) * Hq * D; K/V/dK/dV: (row * T + first) * Hkv * D;
//   statistics [B, Hq, T]: row * Hq * T + first (heads T apart, tokens 1).
struct SdpaRaggedArrays {
  std::vector<std::int32_t> packed;
  std::int64_t seq_len = 0, q_offsets = 0, kv_offsets = 0, stats_offsets = 0;  // element index of each part
};

inline SdpaRaggedArrays sdpa_ragged_arrays(const SdpaDocumentSegments& segs, const SdpaShape& s) {
  FT_CHECK(s.ragged() && segs.batch == s.batch && segs.seq == s.seq)
      << "ragged SDPA arrays: the documents' batch " << segs.batch << " x " << segs.seq << " is not the shape's "
      << s.batch << " x " << s.seq << (s.ragged() ? "" : " (or the shape has no document mask)");
  FT_CHECK(segs.count() <= s.ragged_sequences && segs.longest() <= s.ragged_length)
      << "ragged SDPA arrays: " << segs.count() << " documents of <= " << segs.longest()
      << " tokens do not fit a plan for " << s.ragged_sequences << " sequences of <= " << s.ragged_length;
  const std::string refusal = sdpa_ragged_refusal(s);
  FT_CHECK(refusal.empty()) << "ragged SDPA arrays: " << refusal;
  const std::int64_t n = s.ragged_sequences;
  const auto aligned = [](std::int64_t elements) { return (elements + 3) / 4 * 4; };
  SdpaRaggedArrays a;
  a.seq_len = 0;
  a.q_offsets = aligned(n);
  a.kv_offsets = a.q_offsets + aligned(n + 1);
  a.stats_offsets = a.kv_offsets + aligned(n + 1);
  a.packed.assign(static_cast<std::size_t>(a.stats_offsets + aligned(n + 1)), 0);
  const auto put = [&](std::int64_t part, std::int64_t k, std::int64_t value) {
    a.packed[static_cast<std::size_t>(part + k)] = static_cast<std::int32_t>(value);
  };
  const std::int64_t tokens = s.batch * s.seq;
  for (std::int64_t k = 0; k <= n; ++k) {
    const bool used = k < segs.count();
    const std::int64_t token = used ? segs.row[k] * s.seq + segs.first[k] : tokens;
    const std::int64_t stats = used ? segs.row[k] * s.q_heads * s.seq + segs.first[k] : tokens * s.q_heads;
    if (k < n) put(a.seq_len, k, used ? segs.length[k] : 0);
    put(a.q_offsets, k, token * s.q_heads * s.head_dim);
    put(a.kv_offsets, k, token * s.kv_heads * s.head_dim);
    put(a.stats_offsets, k, stats);
  }
  return a;
}

}  // namespace ftrain::cuda
