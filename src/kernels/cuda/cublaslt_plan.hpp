// The row-major -> column-major mapping of ftrain's linear layer onto one
// cuBLASLt matmul, as a pure function into plain data (no CUDA header).
//
// Why a plan: cuBLASLt is column-major and every argument (transposes, m/n/k,
// leading dimensions, which tensor is A or B) is easy to get subtly wrong in
// a way only a GPU would show. Here the mapping is data that the host test
// suite replays through OpenBLAS's column-major cblas_sgemm with exactly
// these parameters and compares with the host linear
// (tests/unit/cuda/test_cublaslt_plan.cpp; a swapped transpose or leading
// dimension fails it). kernels/cuda/linear.cu only executes a plan.
//
// Row-major [R, C] memory read column-major is the [C, R] transpose with
// leading dimension C. With x[N, in], w[out, in], y/dy[N, out]:
//   forward  y  = x . w^T      ->  y^T  (out x N)  = op_T(w) . op_N(x^T)     m=out n=N k=in
//   dgrad    dx = dy . w       ->  dx^T (in x N)   = op_N(w) . op_N(dy^T)    m=in  n=N k=out
//   wgrad    dw += dy^T . x    ->  dw^T (in x out) = op_N(x^T) . op_T(dy^T) m=in  n=out k=N
// The forward is the "TN" form FP8 GEMMs require. The bias is the
// forward's epilogue (one value per m = out); db (+=) is a column sum of dy
// done by the CUDA backend's deterministic reduction, not an epilogue
// (cuBLASLt's BGRAD epilogues overwrite).
#pragma once

#include <vector>

#include <algorithm>
#include <compare>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "base/error.hpp"

namespace ftrain::cuda {

enum class Transpose : std::uint8_t { none, transpose };
enum class GemmElement : std::uint8_t { f32, bf16, fp8_e4m3, fp8_e5m2 };
enum class GemmEpilogue : std::uint8_t { none, bias };
enum class LinearPass : std::uint8_t { forward, dgrad, wgrad };
// How the forward's bias reaches y (non-FP8 plans; FP8 has Fp8BiasStep):
//  epilogue              cuBLASLt's BIAS epilogue reads the bias as stored (its dtype is D's).
//  epilogue_of_converted the bias is first cast (bf16 -> f32, exact) or copied into 256-byte
//                        aligned scratch of D's dtype, which the epilogue reads.
//  add_after             an f32 bias with a bf16 y: the GEMM writes an f32 D (scratch), a kernel
//                        adds the bias and rounds once into y, as the host does.
enum class GemmBiasStep : std::uint8_t { none, epilogue, epilogue_of_converted, add_after };
// Which tensor of the linear op a matmul operand is; x_t, w_t, dy_t are the
// transposed FP8 copies the cast writes (Fp8Tensor::data_t).
enum class LinearOperand : std::uint8_t { x, w, dy, y, dx, dw, x_t, w_t, dy_t };

inline const char* element_name(GemmElement e) {
  switch (e) {
    case GemmElement::f32: return "f32";
    case GemmElement::bf16: return "bf16";
    case GemmElement::fp8_e4m3: return "fp8_e4m3";
    case GemmElement::fp8_e5m2: return "fp8_e5m2";
  }
  return "?";
}
inline bool is_fp8(GemmElement e) { return e == GemmElement::fp8_e4m3 || e == GemmElement::fp8_e5m2; }
inline std::uint32_t element_bytes(GemmElement e) {
  switch (e) {
    case GemmElement::f32: return 4;
    case GemmElement::bf16: return 2;
    case GemmElement::fp8_e4m3:
    case GemmElement::fp8_e5m2: return 1;
  }
  return 0;
}

inline const char* bias_step_name(GemmBiasStep s) {
  switch (s) {
    case GemmBiasStep::none: return "none";
    case GemmBiasStep::epilogue: return "epilogue";
    case GemmBiasStep::epilogue_of_converted: return "epilogue_of_converted";
    case GemmBiasStep::add_after: return "add_after";
  }
  return "?";
}

// ---- operand alignment ----------------------------------------------------------------
//
// cuBLASLt's heuristic assumes 256-byte aligned A, B, C and D unless the
// MIN_ALIGNMENT_{A,B,C,D}_BYTES preferences say less; an algorithm it returns
// may then need loads that a view at a smaller alignment (an FSDP
// flat-parameter view, a row slice, a vocabulary chunk) cannot take, and
// cublasLtMatmul refuses it or worse.
inline constexpr std::uint32_t kMaxGemmAlignment = 256;
// cuBLASLt has no alignment preference for the bias vector: ftrain gives the
// epilogue only a bias aligned to 16 bytes (a full vector load) and copies
// any other into aligned scratch (GemmBiasStep::epilogue_of_converted).
inline constexpr std::uint32_t kBiasEpilogueAlignment = 16;
// FP8 GEMMs want 16-byte aligned A, B, C and D (as their leading dimensions).
inline constexpr std::uint32_t kFp8PointerAlignment = 16;

// The largest power of two <= 256 dividing the address (null: 256).
inline std::uint32_t address_alignment(std::uintptr_t address) {
  if (address == 0) return kMaxGemmAlignment;
  const std::uintptr_t lowest_bit = address & (~address + 1);
  return lowest_bit >= kMaxGemmAlignment ? kMaxGemmAlignment : static_cast<std::uint32_t>(lowest_bit);
}
inline std::uint32_t address_alignment(const void* p) { return address_alignment(reinterpret_cast<std::uintptr_t>(p)); }

// Bytes each operand's address is aligned to; 0 = not placed yet (a plan
// straight from plan_linear), which gemm_plan_problem refuses.
struct GemmOperandAlignment {
  std::uint32_t a = 0, b = 0, c = 0, d = 0, bias = 0;
  auto operator<=>(const GemmOperandAlignment&) const = default;
};

// The alignments of the pointers a GEMM is about to run on (bias: null when
// the plan has no bias epilogue; it then counts as 256).
inline GemmOperandAlignment operand_alignment(const void* a, const void* b, const void* c, const void* d,
                                              const void* bias) {
  return {address_alignment(a), address_alignment(b), address_alignment(c), address_alignment(d),
          address_alignment(bias)};
}

inline const char* pass_name(LinearPass p) {
  switch (p) {
    case LinearPass::forward: return "forward";
    case LinearPass::dgrad: return "dgrad";
    case LinearPass::wgrad: return "wgrad";
  }
  return "?";
}

// D = alpha op(A) op(B) + beta C (C and D are the same tensor), column-major,
// f32 accumulation (CUBLAS_COMPUTE_32F) whatever the storage types.
struct GemmPlan {
  LinearPass pass = LinearPass::forward;
  Transpose transa = Transpose::none, transb = Transpose::none;
  std::int64_t m = 0, n = 0, k = 0;
  LinearOperand a = LinearOperand::x, b = LinearOperand::x, c = LinearOperand::y;
  std::int64_t lda = 0, ldb = 0, ldc = 0;
  // Strided batches (1 for a linear layer over flattened rows).
  std::int64_t batch_count = 1;
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  float alpha = 1.0f, beta = 0.0f;
  GemmEpilogue epilogue = GemmEpilogue::none;
  GemmElement a_type = GemmElement::f32, b_type = GemmElement::f32, c_type = GemmElement::f32;
  // The bias: its tensor's dtype, the dtype the epilogue reads
  // (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE; D's outside FP8) and how it is applied.
  GemmElement bias_stored = GemmElement::f32, bias_type = GemmElement::f32;
  GemmBiasStep bias_step = GemmBiasStep::none;
  // The op's output tensor's dtype: c_type, except under add_after (D is then f32 scratch).
  GemmElement output_type = GemmElement::f32;
  GemmOperandAlignment alignment;
};

// The plan with the alignments of the pointers it runs on.
inline GemmPlan placed(GemmPlan p, const GemmOperandAlignment& alignment) {
  p.alignment = alignment;
  return p;
}

struct LinearShape {
  std::int64_t rows = 0, in = 0, out = 0;
  GemmElement activation = GemmElement::f32;  // x, dy
  GemmElement weight = GemmElement::f32;      // w
  GemmElement output = GemmElement::f32;      // y (forward), dx (dgrad), dw (wgrad)
  bool bias = false;
  GemmElement bias_type = GemmElement::f32;   // the bias tensor's dtype
  std::uint32_t bias_alignment = kMaxGemmAlignment;  // of the bias tensor's address
};

// The plan of one pass. cuBLASLt multiplies A and B of one type: a bf16
// activation with an f32 weight (or the reverse) is refused here, naming the
// pass, rather than converted behind the caller's back.
inline GemmPlan plan_linear(LinearPass pass, const LinearShape& s) {
  FT_CHECK(s.rows >= 0 && s.in > 0 && s.out > 0)
      << "cuBLASLt plan " << pass_name(pass) << ": rows " << s.rows << ", in " << s.in << ", out " << s.out
      << " (in and out must be positive)";
  FT_CHECK(s.activation == s.weight) << "cuBLASLt plan " << pass_name(pass)
                                     << ": activations and weight must have one dtype (both f32 or both bf16)";
  FT_CHECK(!is_fp8(s.activation) && !is_fp8(s.output))
      << "cuBLASLt plan " << pass_name(pass) << ": FP8 operands take plan_fp8_linear";
  GemmPlan p;
  p.pass = pass;
  p.a_type = p.b_type = s.weight;
  p.c_type = p.output_type = s.output;
  switch (pass) {
    case LinearPass::forward:
      p.transa = Transpose::transpose;
      p.transb = Transpose::none;
      p.m = s.out, p.n = s.rows, p.k = s.in;
      p.a = LinearOperand::w, p.lda = s.in;
      p.b = LinearOperand::x, p.ldb = s.in;
      p.c = LinearOperand::y, p.ldc = s.out;
      p.beta = 0.0f;
      if (s.bias) {
        FT_CHECK(s.bias_type == GemmElement::f32 || s.bias_type == GemmElement::bf16)
            << "cuBLASLt plan forward: bias " << element_name(s.bias_type) << " must be f32 or bf16";
        p.bias_stored = s.bias_type;
        if (s.bias_type == s.output && s.bias_alignment >= kBiasEpilogueAlignment) {
          p.bias_step = GemmBiasStep::epilogue;
        } else if (s.bias_type == s.output || s.output == GemmElement::f32) {
          // bf16 -> f32 widens exactly; a same-dtype copy only realigns.
          p.bias_step = GemmBiasStep::epilogue_of_converted;
        } else {
          // An f32 bias with a bf16 y: converting the bias to bf16 would round
          // it before the sum (the host rounds once, after it).
          p.bias_step = GemmBiasStep::add_after;
          p.c_type = GemmElement::f32;
        }
        if (p.bias_step != GemmBiasStep::add_after) {
          p.epilogue = GemmEpilogue::bias;
          p.bias_type = s.output;
        } else {
          p.bias_type = s.bias_type;
        }
      }
      break;
    case LinearPass::dgrad:
      p.transa = Transpose::none;
      p.transb = Transpose::none;
      p.m = s.in, p.n = s.rows, p.k = s.out;
      p.a = LinearOperand::w, p.lda = s.in;
      p.b = LinearOperand::dy, p.ldb = s.out;
      p.c = LinearOperand::dx, p.ldc = s.in;
      p.beta = 0.0f;  // dx is written
      break;
    case LinearPass::wgrad:
      p.transa = Transpose::none;
      p.transb = Transpose::transpose;
      p.m = s.in, p.n = s.out, p.k = s.rows;
      p.a = LinearOperand::x, p.lda = s.in;
      p.b = LinearOperand::dy, p.ldb = s.out;
      p.c = LinearOperand::dw, p.ldc = s.in;
      p.beta = 1.0f;  // dw accumulates
      break;
  }
  return p;
}

// Rows x columns of an operand as stored column-major (before op()).
inline std::int64_t stored_rows(Transpose t, std::int64_t op_rows, std::int64_t op_cols) {
  return t == Transpose::none ? op_rows : op_cols;
}

// Empty when cuBLASLt would take the plan as it stands, else what is wrong:
// a leading dimension below its operand's stored rows (what cuBLASLt refuses
// with CUBLAS_STATUS_INVALID_VALUE), an operand alignment that is not placed
// (the MIN_ALIGNMENT preferences could not be set) or is below its element,
// and, outside FP8, a bias epilogue of another dtype than D.
inline std::string gemm_plan_problem(const GemmPlan& p) {
  auto too_small = [](const char* name, std::int64_t ld, std::int64_t rows) {
    return std::string(name) + " " + std::to_string(ld) + " < " + std::to_string(rows) + " stored rows";
  };
  if (p.m < 0 || p.n < 0 || p.k < 0) return "negative m/n/k";
  if (p.lda < std::max<std::int64_t>(1, stored_rows(p.transa, p.m, p.k))) return too_small("lda", p.lda, stored_rows(p.transa, p.m, p.k));
  if (p.ldb < std::max<std::int64_t>(1, stored_rows(p.transb, p.k, p.n))) return too_small("ldb", p.ldb, stored_rows(p.transb, p.k, p.n));
  if (p.ldc < std::max<std::int64_t>(1, p.m)) return too_small("ldc", p.ldc, p.m);
  if (p.batch_count < 1) return "batch_count < 1";

  const bool has_bias = p.epilogue == GemmEpilogue::bias;
  const std::pair<const char*, std::pair<std::uint32_t, GemmElement>> operands[] = {
      {"A", {p.alignment.a, p.a_type}}, {"B", {p.alignment.b, p.b_type}}, {"C", {p.alignment.c, p.c_type}},
      {"D", {p.alignment.d, p.c_type}}, {"bias", {p.alignment.bias, p.bias_type}}};
  for (const auto& [name, placement] : operands) {
    const auto [alignment, element] = placement;
    if (std::string(name) == "bias" && !has_bias) continue;
    if (alignment == 0)
      return std::string(name) + " alignment not set: the heuristic needs MIN_ALIGNMENT preferences for every operand";
    if ((alignment & (alignment - 1)) != 0 || alignment > kMaxGemmAlignment)
      return std::string(name) + " alignment " + std::to_string(alignment) + " is not a power of two <= 256";
    if (alignment < element_bytes(element))
      return std::string(name) + " alignment " + std::to_string(alignment) + " bytes is below its " +
             element_name(element) + " element";
  }

  if (!is_fp8(p.a_type)) {
    if (has_bias && p.bias_type != p.c_type)
      return std::string("bias ") + element_name(p.bias_type) + " with D " + element_name(p.c_type) +
             ": outside FP8 cuBLASLt's bias epilogue takes D's dtype";
    if (has_bias != (p.bias_step == GemmBiasStep::epilogue || p.bias_step == GemmBiasStep::epilogue_of_converted))
      return std::string("bias step ") + bias_step_name(p.bias_step) + " does not match the epilogue";
    if (p.bias_step == GemmBiasStep::add_after && p.c_type != GemmElement::f32)
      return "a bias added after the GEMM needs an f32 D";
    if (p.bias_step != GemmBiasStep::add_after && p.output_type != p.c_type)
      return std::string("output ") + element_name(p.output_type) + " differs from D " + element_name(p.c_type) +
             " without a step that converts it";
  }
  if (has_bias && p.alignment.bias < kBiasEpilogueAlignment)
    return "bias alignment " + std::to_string(p.alignment.bias) + " bytes: the epilogue takes a bias aligned to " +
           std::to_string(kBiasEpilogueAlignment) + " (copy it to aligned scratch first)";
  return {};
}

// ---- algorithm cache --------------------------------------------------------------------
//
// Everything cuBLASLt's heuristic sees, so that an algorithm is reused only
// for the GEMM it was chosen for: shapes, layouts, dtypes, epilogue, and the
// operand alignments (an algorithm chosen at 256 bytes may not run at 2).
// FP8 plans add their scale/amax attributes (fast_accum, d_amax).
struct GemmAlgorithmKey {
  Transpose transa = Transpose::none, transb = Transpose::none;
  std::int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  std::int64_t batch_count = 1, stride_a = 0, stride_b = 0, stride_c = 0;
  GemmElement a_type = GemmElement::f32, b_type = GemmElement::f32, c_type = GemmElement::f32;
  GemmEpilogue epilogue = GemmEpilogue::none;
  GemmElement bias_type = GemmElement::f32;
  bool beta_zero = true;
  GemmOperandAlignment alignment;
  bool fast_accum = false, d_amax = false;
  auto operator<=>(const GemmAlgorithmKey&) const = default;
};

inline GemmAlgorithmKey gemm_algorithm_key(const GemmPlan& p) {
  GemmAlgorithmKey k;
  k.transa = p.transa, k.transb = p.transb;
  k.m = p.m, k.n = p.n, k.k = p.k, k.lda = p.lda, k.ldb = p.ldb, k.ldc = p.ldc;
  k.batch_count = p.batch_count, k.stride_a = p.stride_a, k.stride_b = p.stride_b, k.stride_c = p.stride_c;
  k.a_type = p.a_type, k.b_type = p.b_type, k.c_type = p.c_type;
  k.epilogue = p.epilogue;
  k.bias_type = p.epilogue == GemmEpilogue::bias ? p.bias_type : GemmElement::f32;
  k.beta_zero = p.beta == 0.0f;
  k.alignment = p.alignment;
  if (p.epilogue != GemmEpilogue::bias) k.alignment.bias = 0;  // no bias: its (null) pointer does not matter
  return k;
}

// Empty when an algorithm the heuristic chose for `queried` may run `now`:
// every operand of `now` at least as aligned as when the algorithm was
// chosen (a weaker alignment is what the MIN_ALIGNMENT preferences exclude).
inline std::string algorithm_reuse_problem(const GemmPlan& queried, const GemmPlan& now) {
  const std::pair<const char*, std::pair<std::uint32_t, std::uint32_t>> operands[] = {
      {"A", {queried.alignment.a, now.alignment.a}},
      {"B", {queried.alignment.b, now.alignment.b}},
      {"C", {queried.alignment.c, now.alignment.c}},
      {"D", {queried.alignment.d, now.alignment.d}},
      {"bias", {queried.epilogue == GemmEpilogue::bias ? queried.alignment.bias : 0u,
                now.epilogue == GemmEpilogue::bias ? now.alignment.bias : 0u}}};
  for (const auto& [name, pair] : operands)
    if (pair.second < pair.first)
      return std::string("an algorithm chosen for ") + name + " aligned to " + std::to_string(pair.first) +
             " bytes reused at " + std::to_string(pair.second);
  return {};
}

// What an executor keeps per GEMM (its descriptors and algorithm: `Entry`),
// by algorithm key. A hit is checked against the plan the entry was made
// for (algorithm_reuse_problem): a key that lost a field cannot make an
// algorithm run at a weaker alignment unnoticed.
template <class Entry>
class GemmPlanCache {
 public:
  // The entry made for `key`, or null.
  Entry* find(const GemmAlgorithmKey& key, const GemmPlan& plan) {
    auto found = slots_.find(key);
    if (found == slots_.end()) return nullptr;
    const std::string problem = algorithm_reuse_problem(found->second.queried, plan);
    FT_CHECK(problem.empty()) << "cuBLASLt " << pass_name(plan.pass) << " GEMM m=" << plan.m << " n=" << plan.n
                              << " k=" << plan.k << ": " << problem;
    return found->second.entry.get();
  }
  Entry& insert(const GemmAlgorithmKey& key, const GemmPlan& plan, std::unique_ptr<Entry> entry) {
    Slot& slot = slots_[key];
    slot.queried = plan;
    slot.entry = std::move(entry);
    return *slot.entry;
  }
  std::size_t size() const { return slots_.size(); }

 private:
  struct Slot {
    GemmPlan queried;
    std::unique_ptr<Entry> entry;
  };
  std::map<GemmAlgorithmKey, Slot> slots_;
};

// The index of the first heuristic result cuBLASLt marks usable (`state`
// equal to `success`, CUBLAS_STATUS_SUCCESS), or -1. Results come best
// first; one that is not usable must be skipped, not run.
template <class Result, class Status>
int first_usable_heuristic(const Result* results, int returned, Status success) {
  for (int i = 0; i < returned; ++i)
    if (results[i].state == success) return i;
  return -1;
}

// Every usable result's index, best first: the candidates a cached matmul
// falls back through (run_first_supported).
template <class Result, class Status>
std::vector<int> usable_heuristics(const Result* results, int returned, Status success) {
  std::vector<int> usable;
  for (int i = 0; i < returned; ++i)
    if (results[i].state == success) usable.push_back(i);
  return usable;
}

// Runs attempt(candidate) from `chosen` on. cuBLASLt checks a call against
// its algorithm before launching anything and answers NOT_SUPPORTED when
// the heuristic's pick cannot run it after all (the first H100 run met this
// with a small FP8 GEMM, m 64 n 128 k 64): that candidate is skipped for
// good (`chosen` moves past it) and the next is tried. Returns the first
// other status, or `not_supported` when every candidate refused.
template <class Status, class Attempt>
Status run_first_supported(std::size_t count, std::size_t& chosen, Status not_supported, Attempt attempt) {
  Status status = not_supported;
  while (chosen < count) {
    status = attempt(chosen);
    if (status != not_supported) return status;
    ++chosen;
  }
  return status;
}

// ---- FP8 plans ----------------------------------------------------------------------
//
// cuBLASLt's FP8 GEMMs (Hopper) take only the "TN" form: transa = T,
// transb = N, i.e. both operands stored K-major (column-major k x m and
// k x n). The forward is TN as it stands; dgrad and wgrad become TN by
// reading the transposed FP8 copies the cast writes (Fp8Tensor::data_t,
// row-major [in, out] for w_t, [in, N] for x_t, [out, N] for dy_t):
//   forward  y^T  (out x N)  = op_T(w:  col-major in x out, ld in)  . op_N(x^T:  in x N, ld in)    m=out n=N k=in
//   dgrad    dx^T (in x N)   = op_T(w_t: col-major out x in, ld out) . op_N(dy^T: out x N, ld out)  m=in  n=N k=out
//   wgrad    dw^T (in x out) = op_T(x_t: col-major N x in, ld N)    . op_N(dy_t: N x out, ld N)    m=in  n=out k=N
// D = (scale_A scale_B) (A . B) + beta C with the scale pointers at the
// operands' DEquantisation factors scale_inv = 1 / scale, f32
// accumulation. Fast accumulation (CUBLASLT_MATMUL_DESC_FAST_ACCUM, fewer
// promotions of the tensor cores' partial sums) only in the forward, as
// Transformer Engine: gradients keep the full accumulation. Formats: the
// forward's E4M3 for x and w, the backward format (E5M2 in hybrid) for dy;
// E5M2 x E5M2 does not exist in cuBLASLt and never arises.
// Bias: cuBLASLt's FP8 bias epilogue takes a bf16 bias; an f32 bias is added
// after the GEMM (bias_step add_after) into an f32 D, then stored in y's
// dtype, which rounds once like the host.
// cuBLASLt also wants every leading dimension, and so in, out and N, a
// multiple of 16 for FP8: plan_fp8_linear refuses other shapes, naming the
// dimension.
//
// tests/unit/cuda/test_cublaslt_fp8_plan.cpp replays every plan the tiny and
// Llama 3.2 1B models produce through cblas_sgemm on the decoded FP8 codes
// (the host cast's data and transposed copies), multiplied by the scale
// pointers' values, against the host fp8_linear ops; wrong operands, leading
// dimensions or scale pointers fail it.

enum class Fp8BiasStep : std::uint8_t { none, epilogue, add_after };

// A cuBLASLt A/B scale pointer as data: the scale_inv (inverse = true) of one
// FP8 operand's descriptor (Fp8Operand: input, weight, grad_output).
struct Fp8ScalePointer {
  int operand = 0;  // Fp8Operand (kernels/fp8_tensor.hpp)
  bool inverse = true;
};

struct Fp8GemmPlan {
  GemmPlan gemm;  // a_type/b_type FP8, c_type the D dtype
  Fp8ScalePointer a_scale, b_scale;
  bool fast_accum = false;
  Fp8BiasStep bias = Fp8BiasStep::none;
};

inline Fp8GemmPlan placed(Fp8GemmPlan f, const GemmOperandAlignment& alignment) {
  f.gemm.alignment = alignment;
  return f;
}

struct Fp8LinearShape {
  std::int64_t rows = 0, in = 0, out = 0;
  GemmElement forward_format = GemmElement::fp8_e4m3;   // x, w
  GemmElement backward_format = GemmElement::fp8_e5m2;  // dy (hybrid; fp8_e4m3 under `fp8_format e4m3`)
  GemmElement output = GemmElement::f32;                // y (forward), dx (dgrad); dw is always f32
  bool bias = false;
  GemmElement bias_type = GemmElement::bf16;
};

// Fp8Operand indices (kernels/fp8_tensor.hpp), without including it here.
inline constexpr int kPlanFp8Input = 0, kPlanFp8Weight = 1, kPlanFp8GradOutput = 2;

// cuBLASLt's FP8 alignment: leading dimensions multiple of 16 elements.
inline constexpr std::int64_t kFp8Alignment = 16;

inline Fp8GemmPlan plan_fp8_linear(LinearPass pass, const Fp8LinearShape& s) {
  const char* p_name = pass_name(pass);
  FT_CHECK(s.rows > 0 && s.in > 0 && s.out > 0)
      << "cuBLASLt FP8 plan " << p_name << ": rows " << s.rows << ", in " << s.in << ", out " << s.out
      << " must be positive";
  const std::pair<const char*, std::int64_t> dims[] = {{"rows (batch x sequence)", s.rows}, {"in", s.in}, {"out", s.out}};
  for (const auto& [name, value] : dims)
    FT_CHECK(value % kFp8Alignment == 0) << "cuBLASLt FP8 plan " << p_name << ": " << name << " = " << value
                                         << " is not a multiple of " << kFp8Alignment
                                         << " (cuBLASLt's FP8 leading-dimension rule)";
  FT_CHECK(is_fp8(s.forward_format) && is_fp8(s.backward_format))
      << "cuBLASLt FP8 plan " << p_name << ": formats " << element_name(s.forward_format) << ", "
      << element_name(s.backward_format) << " must be FP8";
  FT_CHECK(s.forward_format == GemmElement::fp8_e4m3)
      << "cuBLASLt FP8 plan " << p_name << ": the forward format is E4M3 (an E5M2 x and w would make the backward's "
      << "E5M2 x E5M2 GEMMs, which cuBLASLt does not have)";
  FT_CHECK(s.output == GemmElement::f32 || s.output == GemmElement::bf16)
      << "cuBLASLt FP8 plan " << p_name << ": output " << element_name(s.output) << " must be f32 or bf16";
  Fp8GemmPlan f;
  GemmPlan& p = f.gemm;
  p.pass = pass;
  p.transa = Transpose::transpose;
  p.transb = Transpose::none;
  switch (pass) {
    case LinearPass::forward:
      p.m = s.out, p.n = s.rows, p.k = s.in;
      p.a = LinearOperand::w, p.lda = s.in;
      p.b = LinearOperand::x, p.ldb = s.in;
      p.c = LinearOperand::y, p.ldc = s.out;
      p.a_type = p.b_type = s.forward_format;
      p.c_type = p.output_type = s.output;
      p.beta = 0.0f;
      f.a_scale = {kPlanFp8Weight, true};
      f.b_scale = {kPlanFp8Input, true};
      f.fast_accum = true;
      if (s.bias) {
        FT_CHECK(s.bias_type == GemmElement::f32 || s.bias_type == GemmElement::bf16)
            << "cuBLASLt FP8 plan forward: bias " << element_name(s.bias_type) << " must be f32 or bf16";
        f.bias = s.bias_type == GemmElement::bf16 ? Fp8BiasStep::epilogue : Fp8BiasStep::add_after;
        p.epilogue = f.bias == Fp8BiasStep::epilogue ? GemmEpilogue::bias : GemmEpilogue::none;
        p.bias_stored = p.bias_type = s.bias_type;
        if (f.bias == Fp8BiasStep::add_after) p.c_type = GemmElement::f32;  // rounded once, after the bias
      }
      break;
    case LinearPass::dgrad:
      p.m = s.in, p.n = s.rows, p.k = s.out;
      p.a = LinearOperand::w_t, p.lda = s.out;
      p.b = LinearOperand::dy, p.ldb = s.out;
      p.c = LinearOperand::dx, p.ldc = s.in;
      p.a_type = s.forward_format;
      p.b_type = s.backward_format;
      p.c_type = p.output_type = s.output;
      p.beta = 0.0f;  // dx is written
      f.a_scale = {kPlanFp8Weight, true};
      f.b_scale = {kPlanFp8GradOutput, true};
      break;
    case LinearPass::wgrad:
      p.m = s.in, p.n = s.out, p.k = s.rows;
      p.a = LinearOperand::x_t, p.lda = s.rows;
      p.b = LinearOperand::dy_t, p.ldb = s.rows;
      p.c = LinearOperand::dw, p.ldc = s.in;
      p.a_type = s.forward_format;
      p.b_type = s.backward_format;
      p.c_type = p.output_type = GemmElement::f32;
      p.beta = 1.0f;  // dw accumulates (f32)
      f.a_scale = {kPlanFp8Input, true};
      f.b_scale = {kPlanFp8GradOutput, true};
      break;
  }
  return f;
}

// Empty when cuBLASLt would take the FP8 plan, else why not: the generic
// checks, TN, FP8 operands (not both E5M2), aligned leading dimensions and
// 16-byte aligned A, B, C and D, a bias epilogue only with a bf16 bias.
inline std::string fp8_gemm_plan_problem(const Fp8GemmPlan& f) {
  const GemmPlan& p = f.gemm;
  std::string problem = gemm_plan_problem(p);
  if (!problem.empty()) return problem;
  if (p.transa != Transpose::transpose || p.transb != Transpose::none) return "FP8 GEMMs need the TN layout";
  if (!is_fp8(p.a_type) || !is_fp8(p.b_type)) return "an FP8 plan with a non-FP8 operand";
  if (p.a_type == GemmElement::fp8_e5m2 && p.b_type == GemmElement::fp8_e5m2) return "E5M2 x E5M2";
  if (p.lda % kFp8Alignment != 0 || p.ldb % kFp8Alignment != 0 || p.ldc % kFp8Alignment != 0)
    return "a leading dimension is not a multiple of 16";
  if (p.epilogue == GemmEpilogue::bias && (f.bias != Fp8BiasStep::epilogue || p.bias_type != GemmElement::bf16))
    return "bias epilogue without a bf16 bias";
  const std::pair<const char*, std::uint32_t> pointers[] = {
      {"A", p.alignment.a}, {"B", p.alignment.b}, {"C", p.alignment.c}, {"D", p.alignment.d}};
  for (const auto& [name, alignment] : pointers)
    if (alignment < kFp8PointerAlignment)
      return std::string("FP8 ") + name + " aligned to " + std::to_string(alignment) + " bytes, not " +
             std::to_string(kFp8PointerAlignment);
  return {};
}

}  // namespace ftrain::cuda

namespace ftrain::cuda {

// ---- FP8 scale pointers -----------------------------------------------------------------
//
// On an H100 (cuBLAS 13) cublasLtMatmul refuses every algorithm (NOT_SUPPORTED)
// for an FP8 GEMM whose A or B scale pointer is 4 bytes past a 16-byte
// boundary, as the weight's and the gradient's scale_inv are inside the
// recipe's packed f32[3]; at 16, 32, 64, 128 and 256 bytes it runs and gives
// the same output bit for bit (CudaFp8.ForwardRunsWithScalesPackedAtAnyOffset,
// share/doc/gpu-runs/). The executor copies a scale below this alignment
// into a slot of its own first (a 4-byte copy on the compute stream).
inline constexpr std::uint32_t kFp8ScalePointerAlignment = 16;

inline bool fp8_scale_needs_staging(const void* scale) {
  return address_alignment(scale) < kFp8ScalePointerAlignment;
}

}  // namespace ftrain::cuda
