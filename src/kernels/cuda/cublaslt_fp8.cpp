#include "kernels/cuda/cublaslt_fp8.hpp"

#include <cublasLt.h>

#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "kernels/cuda/cublaslt_linear.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "runtime/execution_context.hpp"

namespace ftrain::cuda {

namespace {

cudaDataType_t data_type(GemmElement e) {
  switch (e) {
    case GemmElement::f32: return CUDA_R_32F;
    case GemmElement::bf16: return CUDA_R_16BF;
    case GemmElement::fp8_e4m3: return CUDA_R_8F_E4M3;
    case GemmElement::fp8_e5m2: return CUDA_R_8F_E5M2;
  }
  FT_THROW() << "cuBLASLt FP8: unknown element type";
}

using Fp8PlanKey = std::tuple<void*, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                              std::int64_t, int, int, int, int, int, float>;
Fp8PlanKey key_of(void* handle, const Fp8GemmPlan& f) {
  const GemmPlan& p = f.gemm;
  return {handle, p.m, p.n, p.k, p.lda, p.ldb, p.ldc, static_cast<int>(p.a_type), static_cast<int>(p.b_type),
          static_cast<int>(p.c_type), static_cast<int>(p.epilogue), f.fast_accum ? 1 : 0, p.beta};
}

std::mutex& cache_mutex() {
  static std::mutex m;
  return m;
}
std::map<Fp8PlanKey, cublasLtMatmulAlgo_t>& algorithm_cache() {
  static std::map<Fp8PlanKey, cublasLtMatmulAlgo_t> cache;
  return cache;
}

template <class T>
void set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attribute, const T& value) {
  FTRAIN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attribute, &value, sizeof value));
}

}  // namespace

void execute_fp8_gemm_plan(ExecutionContext& ctx, const Fp8GemmPlan& plan, const Fp8GemmOperands& operands) {
  const GemmPlan& p = plan.gemm;
  const std::string problem = fp8_gemm_plan_problem(plan);
  FT_CHECK(problem.empty()) << "cuBLASLt FP8 " << pass_name(p.pass) << " plan is inconsistent: " << problem;
  FT_CHECK(operands.a_scale != nullptr && operands.b_scale != nullptr)
      << "cuBLASLt FP8 " << pass_name(p.pass) << ": a scale pointer is missing (the plan names operands "
      << plan.a_scale.operand << " and " << plan.b_scale.operand << ")";
  if (p.m == 0 || p.n == 0) return;
  const BlasResources blas = blas_resources(ctx);
  auto handle = static_cast<cublasLtHandle_t>(blas.handle);
  auto stream = static_cast<cudaStream_t>(ctx.compute().native_handle());

  LtDescriptors d;
  FTRAIN_CUBLAS_CHECK(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set(d.op, CUBLASLT_MATMUL_DESC_TRANSA, p.transa == Transpose::none ? CUBLAS_OP_N : CUBLAS_OP_T);
  set(d.op, CUBLASLT_MATMUL_DESC_TRANSB, p.transb == Transpose::none ? CUBLAS_OP_N : CUBLAS_OP_T);
  // The dequantisation factors (scale_inv) by device pointer: no host read.
  set(d.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, operands.a_scale);
  set(d.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, operands.b_scale);
  set(d.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, static_cast<std::int8_t>(plan.fast_accum ? 1 : 0));
  if (operands.d_amax != nullptr) set(d.op, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, operands.d_amax);
  if (p.epilogue == GemmEpilogue::bias) {
    FT_CHECK(operands.bias != nullptr) << "cuBLASLt FP8 forward: bias epilogue without a bias";
    set(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    set(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, operands.bias);
    set(d.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, CUDA_R_16BF);
  }
  // TN: A stored k x m, B stored k x n (column-major), C/D m x n.
  FTRAIN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.a, data_type(p.a_type), static_cast<std::uint64_t>(p.k),
                                                 static_cast<std::uint64_t>(p.m), p.lda));
  FTRAIN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.b, data_type(p.b_type), static_cast<std::uint64_t>(p.k),
                                                 static_cast<std::uint64_t>(p.n), p.ldb));
  FTRAIN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.c, data_type(p.c_type), static_cast<std::uint64_t>(p.m),
                                                 static_cast<std::uint64_t>(p.n), p.ldc));

  cublasLtMatmulAlgo_t algorithm;
  {
    std::lock_guard<std::mutex> lock(cache_mutex());
    auto found = algorithm_cache().find(key_of(blas.handle, plan));
    if (found == algorithm_cache().end()) {
      cublasLtMatmulPreference_t preference = nullptr;
      FTRAIN_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
      std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, decltype(&cublasLtMatmulPreferenceDestroy)> owner(
          preference, &cublasLtMatmulPreferenceDestroy);
      const std::size_t workspace = blas.workspace_bytes;
      FTRAIN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                               &workspace, sizeof workspace));
      cublasLtMatmulHeuristicResult_t result{};
      int returned = 0;
      FTRAIN_CUBLAS_CHECK(
          cublasLtMatmulAlgoGetHeuristic(handle, d.op, d.a, d.b, d.c, d.c, preference, 1, &result, &returned));
      FT_CHECK(returned > 0) << "cuBLASLt has no FP8 algorithm for the " << pass_name(p.pass) << " GEMM m=" << p.m
                             << " n=" << p.n << " k=" << p.k << " (" << element_name(p.a_type) << " x "
                             << element_name(p.b_type) << " -> " << element_name(p.c_type) << ")";
      found = algorithm_cache().emplace(key_of(blas.handle, plan), result.algo).first;
    }
    algorithm = found->second;
  }
  FTRAIN_CUBLAS_CHECK(cublasLtMatmul(handle, d.op, &p.alpha, operands.a, d.a, operands.b, d.b, &p.beta, operands.d,
                                     d.c, operands.d, d.c, &algorithm, blas.workspace, blas.workspace_bytes, stream));
}

}  // namespace ftrain::cuda
