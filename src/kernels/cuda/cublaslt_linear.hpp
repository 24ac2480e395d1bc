// Executes cuBLASLt plans (cublaslt_plan.hpp) on a context's compute stream:
// one cuBLASLt handle and one 32 MiB workspace per execution context, the
// heuristic's algorithm cached per plan. Nothing here decides a transpose or
// a leading dimension.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/cuda/cublaslt_plan.hpp"

namespace ftrain {
class ExecutionContext;
}

namespace ftrain::cuda {

struct GemmOperands {
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  const void* bias = nullptr;   // epilogue bias
  GemmElement bias_type = GemmElement::f32;
};

void execute_gemm_plan(ExecutionContext& ctx, const GemmPlan& plan, const GemmOperands& operands);

// The context's cuBLASLt handle (a cublasLtHandle_t) and 32 MiB workspace,
// created at first use; shared with the FP8 executor (cublaslt_fp8.cpp).
struct BlasResources {
  void* handle = nullptr;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};
BlasResources blas_resources(ExecutionContext& ctx);

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

}  // namespace ftrain::cuda
