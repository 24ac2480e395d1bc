// Executes cuBLASLt FP8 plans (cublaslt_plan.hpp: plan_fp8_linear) on a
// context's compute stream, with the context's handle, workspace and matmul
// cache (cublaslt_linear.hpp): descriptors and the heuristic's algorithm kept
// per algorithm key, operand alignments included.
// Nothing here decides a layout, an operand or a scale: the plan does, and
// the host test suite replays it (tests/unit/cuda/test_cublaslt_fp8_plan.cpp).
#pragma once

#include "kernels/cuda/cublaslt_plan.hpp"

namespace ftrain {
class ExecutionContext;
}

namespace ftrain::cuda {

struct Fp8GemmOperands {
  const void* a = nullptr;
  const void* b = nullptr;
  void* d = nullptr;              // also C (beta = 1: the f32 accumulator dw)
  const void* bias = nullptr;     // bf16 epilogue bias (Fp8BiasStep::epilogue)
  const float* a_scale = nullptr;  // device f32[1]: the plan's a_scale (a scale_inv)
  const float* b_scale = nullptr;
  float* d_amax = nullptr;        // device f32[1] or null: max |D| (CUBLASLT_MATMUL_DESC_AMAX_D_POINTER)
};

void execute_fp8_gemm_plan(ExecutionContext& ctx, const Fp8GemmPlan& plan, const Fp8GemmOperands& operands);

}  // namespace ftrain::cuda
