// Executes cuBLASLt plans (cublaslt_plan.hpp) on a context's compute stream:
// one cuBLASLt handle and one 32 MiB workspace per execution context, the
// heuristic's algorithm cached per plan. Nothing here decides a transpose or
// a leading dimension.
#pragma once

#include <cuda_runtime.h>

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

}  // namespace ftrain::cuda
