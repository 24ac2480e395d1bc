#include "kernels/cuda/cublaslt_linear.hpp"

#include <cublasLt.h>

#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>

#include "kernels/cuda/cuda_check.hpp"
#include "runtime/execution_context.hpp"

namespace ftrain::cuda {

namespace {

constexpr std::size_t kWorkspaceBytes = std::size_t(32) << 20;

cudaDataType_t data_type(GemmElement e) {
  switch (e) {
    case GemmElement::f32: return CUDA_R_32F;
    case GemmElement::bf16: return CUDA_R_16BF;
    case GemmElement::fp8_e4m3: return CUDA_R_8F_E4M3;
    case GemmElement::fp8_e5m2: return CUDA_R_8F_E5M2;
  }
  FT_THROW() << "cuBLASLt: unknown element type";
}
cublasOperation_t operation(Transpose t) { return t == Transpose::none ? CUBLAS_OP_N : CUBLAS_OP_T; }

using PlanKey = std::tuple<int, int, int, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                           std::int64_t, int, int, int, int, float>;
PlanKey key_of(const GemmPlan& p) {
  return {static_cast<int>(p.transa), static_cast<int>(p.transb), static_cast<int>(p.epilogue), p.m, p.n, p.k,
          p.lda, p.ldb, p.ldc, static_cast<int>(p.a_type), static_cast<int>(p.b_type), static_cast<int>(p.c_type),
          static_cast<int>(p.batch_count), p.beta};
}

// What a context keeps for cuBLASLt (owned through LibraryHandles::owner).
struct BlasState {
  cublasLtHandle_t handle = nullptr;
  std::shared_ptr<void> workspace;
  std::mutex mutex;
  std::map<PlanKey, cublasLtMatmulAlgo_t> algorithms;
  ~BlasState() {
    if (handle != nullptr) cublasLtDestroy(handle);
  }
};

BlasState& blas_state(ExecutionContext& ctx) {
  LibraryHandles& libs = ctx.libraries();
  if (libs.blas == nullptr) {
    auto state = std::make_shared<BlasState>();
    FTRAIN_CUBLAS_CHECK(cublasLtCreate(&state->handle));
    state->workspace = ctx.allocator().allocate(kWorkspaceBytes);
    libs.blas = state.get();
    // One owner slot for every library's state: keep what is there (cuDNN's, if attention ran first).
    libs.owner = std::make_shared<std::pair<std::shared_ptr<void>, std::shared_ptr<BlasState>>>(libs.owner, state);
  }
  return *static_cast<BlasState*>(libs.blas);
}

}  // namespace

BlasResources blas_resources(ExecutionContext& ctx) {
  BlasState& state = blas_state(ctx);
  return {static_cast<void*>(state.handle), state.workspace.get(), kWorkspaceBytes};
}

void execute_gemm_plan(ExecutionContext& ctx, const GemmPlan& plan, const GemmOperands& operands) {
  const std::string problem = gemm_plan_problem(plan);
  FT_CHECK(problem.empty()) << "cuBLASLt " << pass_name(plan.pass) << " plan is inconsistent: " << problem;
  if (plan.m == 0 || plan.n == 0) return;
  BlasState& state = blas_state(ctx);
  auto stream = static_cast<cudaStream_t>(ctx.compute().native_handle());

  LtDescriptors d;
  FTRAIN_CUBLAS_CHECK(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = operation(plan.transa), tb = operation(plan.transb);
  FTRAIN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  FTRAIN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  if (plan.epilogue == GemmEpilogue::bias) {
    FT_CHECK(operands.bias != nullptr) << "cuBLASLt " << pass_name(plan.pass) << ": bias epilogue without a bias";
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    const cudaDataType_t bias_type = data_type(operands.bias_type);
    FTRAIN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
    FTRAIN_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &operands.bias, sizeof operands.bias));
    FTRAIN_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type));
  }
  const std::int64_t a_rows = stored_rows(plan.transa, plan.m, plan.k), a_cols = plan.transa == Transpose::none ? plan.k : plan.m;
  const std::int64_t b_rows = stored_rows(plan.transb, plan.k, plan.n), b_cols = plan.transb == Transpose::none ? plan.n : plan.k;
  FTRAIN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.a, data_type(plan.a_type), static_cast<std::uint64_t>(a_rows),
                                                 static_cast<std::uint64_t>(a_cols), plan.lda));
  FTRAIN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.b, data_type(plan.b_type), static_cast<std::uint64_t>(b_rows),
                                                 static_cast<std::uint64_t>(b_cols), plan.ldb));
  FTRAIN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.c, data_type(plan.c_type), static_cast<std::uint64_t>(plan.m),
                                                 static_cast<std::uint64_t>(plan.n), plan.ldc));
  if (plan.batch_count > 1) {
    const std::int32_t count = static_cast<std::int32_t>(plan.batch_count);
    const std::pair<cublasLtMatrixLayout_t, std::int64_t> layouts[] = {
        {d.a, plan.stride_a}, {d.b, plan.stride_b}, {d.c, plan.stride_c}};
    for (const auto& [layout, stride] : layouts) {
      FTRAIN_CUBLAS_CHECK(
          cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
      FTRAIN_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                           &stride, sizeof stride));
    }
  }

  cublasLtMatmulAlgo_t algorithm;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    auto found = state.algorithms.find(key_of(plan));
    if (found == state.algorithms.end()) {
      cublasLtMatmulPreference_t preference = nullptr;
      FTRAIN_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
      std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, decltype(&cublasLtMatmulPreferenceDestroy)> owner(
          preference, &cublasLtMatmulPreferenceDestroy);
      const std::size_t workspace = kWorkspaceBytes;
      FTRAIN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                               &workspace, sizeof workspace));
      cublasLtMatmulHeuristicResult_t result{};
      int returned = 0;
      FTRAIN_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(state.handle, d.op, d.a, d.b, d.c, d.c, preference, 1,
                                                         &result, &returned));
      FT_CHECK(returned > 0) << "cuBLASLt has no algorithm for the " << pass_name(plan.pass) << " GEMM m=" << plan.m
                             << " n=" << plan.n << " k=" << plan.k;
      found = state.algorithms.emplace(key_of(plan), result.algo).first;
    }
    algorithm = found->second;
  }
  FTRAIN_CUBLAS_CHECK(cublasLtMatmul(state.handle, d.op, &plan.alpha, operands.a, d.a, operands.b, d.b, &plan.beta,
                                     operands.c, d.c, operands.c, d.c, &algorithm, state.workspace.get(),
                                     kWorkspaceBytes, stream));
}

}  // namespace ftrain::cuda
