// Executes cuBLASLt plans (cublaslt_plan.hpp) on a context's compute stream:
// one cuBLASLt handle and one 32 MiB workspace per execution context, and
// per algorithm key (shape, layout, dtypes, epilogue, operand alignments)
// one set of descriptors and the heuristic's algorithm, made on the first
// GEMM of that key and reused after it. Nothing here decides a transpose or
// a leading dimension; the operands' alignments come from their pointers.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/cuda/cublaslt_plan.hpp"

namespace ftrain {
class ExecutionContext;
}

namespace ftrain::cuda {

struct GemmOperands {
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;            // C and D (one tensor)
  const void* bias = nullptr;   // the epilogue's bias, of the plan's bias_type
};

// Runs `plan` (as plan_linear made it: its alignments are placed here from
// the operands' pointers).
void execute_gemm_plan(ExecutionContext& ctx, const GemmPlan& plan, const GemmOperands& operands);

// One matmul's descriptors, destroyed with it (the BF16 and FP8 executors).
struct LtDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  LtDescriptors() = default;
  LtDescriptors(const LtDescriptors&) = delete;
  LtDescriptors& operator=(const LtDescriptors&) = delete;
  ~LtDescriptors() {
    if (c != nullptr) cublasLtMatrixLayoutDestroy(c);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (op != nullptr) cublasLtMatmulDescDestroy(op);
  }
};

// What the context keeps per algorithm key: the descriptors (pointer
// attributes such as the bias or scale pointers are set again on each call)
// and the algorithm chosen for them.
struct CachedMatmul {
  LtDescriptors descriptors;
  // The heuristic's usable algorithms, best first, and the one in use: a
  // candidate cublasLtMatmul refuses is passed over (run_first_supported).
  std::vector<cublasLtMatmulAlgo_t> candidates;
  std::size_t chosen = 0;
};

// After run_first_supported moved past candidates (`first` was in use):
// throws naming the GEMM when every candidate was refused, else notes once on
// stderr which candidate now runs. `kind` ("linear", "FP8") and the plan name
// the GEMM; the name is built here only, never on the per-GEMM path.
void report_candidate_fallback(const CachedMatmul& matmul, std::size_t first, const char* kind, const GemmPlan& plan);

// cublasLtMatmul (`run(algorithm)`) with the cached matmul's algorithm,
// falling back through its other candidates when cuBLASLt refuses one
// (NOT_SUPPORTED, checked before anything is launched).
template <class Run>
cublasStatus_t matmul_with_fallback(CachedMatmul& matmul, const char* kind, const GemmPlan& plan, Run&& run) {
  const std::size_t first = matmul.chosen;
  const cublasStatus_t status =
      run_first_supported(matmul.candidates.size(), matmul.chosen, CUBLAS_STATUS_NOT_SUPPORTED,
                          [&](std::size_t i) { return run(matmul.candidates[i]); });
  if (matmul.chosen != first) report_candidate_fallback(matmul, first, kind, plan);
  return status;
}

// The context's cuBLASLt handle (a cublasLtHandle_t), 32 MiB workspace and
// matmul cache, created at first use; shared with the FP8 executor
// (cublaslt_fp8.cpp). `mutex` guards the cache and the cached descriptors
// from the lookup until cublasLtMatmul has been enqueued.
struct BlasResources {
  void* handle = nullptr;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  GemmPlanCache<CachedMatmul>* matmuls = nullptr;
  std::mutex* mutex = nullptr;
  // kFp8ScaleSlots device slots, kFp8ScalePointerAlignment bytes apart, for
  // FP8 scales cuBLASLt would refuse where they are (cublaslt_plan.hpp).
  float* fp8_scale_slots = nullptr;
};
inline constexpr int kFp8ScaleSlots = 2;
BlasResources blas_resources(ExecutionContext& ctx);

// The A, B and C/D layouts of a plan (both executors).
void create_layouts(LtDescriptors& d, const GemmPlan& plan);

// The heuristic's algorithms for the descriptors of `plan`: the workspace
// and the plan's operand alignments as preferences, several results asked
// for, those cuBLASLt marks usable kept best first (at least one, or it
// throws). `what` names the GEMM in errors.
std::vector<cublasLtMatmulAlgo_t> choose_algorithms(const BlasResources& blas, const LtDescriptors& d,
                                                   const GemmPlan& plan, const char* what);

}  // namespace ftrain::cuda
