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
// The forward is the "TN" form FP8 GEMMs require (GPU.md). The bias is the
// forward's epilogue (one value per m = out); db (+=) is a column sum of dy
// done by the CUDA backend's deterministic reduction, not an epilogue
// (cuBLASLt's BGRAD epilogues overwrite).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/error.hpp"

namespace ftrain::cuda {

enum class Transpose : std::uint8_t { none, transpose };
enum class GemmElement : std::uint8_t { f32, bf16 };
enum class GemmEpilogue : std::uint8_t { none, bias };
enum class LinearPass : std::uint8_t { forward, dgrad, wgrad };
// Which tensor of the linear op a matmul operand is.
enum class LinearOperand : std::uint8_t { x, w, dy, y, dx, dw };

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
};

struct LinearShape {
  std::int64_t rows = 0, in = 0, out = 0;
  GemmElement activation = GemmElement::f32;  // x, dy
  GemmElement weight = GemmElement::f32;      // w
  GemmElement output = GemmElement::f32;      // y (forward), dx (dgrad), dw (wgrad)
  bool bias = false;
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
  GemmPlan p;
  p.pass = pass;
  p.a_type = p.b_type = s.weight;
  p.c_type = s.output;
  switch (pass) {
    case LinearPass::forward:
      p.transa = Transpose::transpose;
      p.transb = Transpose::none;
      p.m = s.out, p.n = s.rows, p.k = s.in;
      p.a = LinearOperand::w, p.lda = s.in;
      p.b = LinearOperand::x, p.ldb = s.in;
      p.c = LinearOperand::y, p.ldc = s.out;
      p.beta = 0.0f;
      p.epilogue = s.bias ? GemmEpilogue::bias : GemmEpilogue::none;
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

// Empty when the plan is self-consistent (every leading dimension at least
// the stored rows of its operand), else what is wrong: what cuBLASLt itself
// would refuse with CUBLAS_STATUS_INVALID_VALUE.
inline std::string gemm_plan_problem(const GemmPlan& p) {
  auto too_small = [](const char* name, std::int64_t ld, std::int64_t rows) {
    return std::string(name) + " " + std::to_string(ld) + " < " + std::to_string(rows) + " stored rows";
  };
  if (p.m < 0 || p.n < 0 || p.k < 0) return "negative m/n/k";
  if (p.lda < std::max<std::int64_t>(1, stored_rows(p.transa, p.m, p.k))) return too_small("lda", p.lda, stored_rows(p.transa, p.m, p.k));
  if (p.ldb < std::max<std::int64_t>(1, stored_rows(p.transb, p.k, p.n))) return too_small("ldb", p.ldb, stored_rows(p.transb, p.k, p.n));
  if (p.ldc < std::max<std::int64_t>(1, p.m)) return too_small("ldc", p.ldc, p.m);
  if (p.batch_count < 1) return "batch_count < 1";
  return {};
}

}  // namespace ftrain::cuda
