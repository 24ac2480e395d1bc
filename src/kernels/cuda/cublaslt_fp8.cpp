#include "kernels/cuda/cublaslt_fp8.hpp"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>

#include "backends/cuda/device/cuda_check.hpp"
#include "kernels/cuda/cublaslt_linear.hpp"
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

template <class T>
void set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attribute, const T& value) {
  FTRAIN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attribute, &value, sizeof value));
}

// The descriptors of one FP8 plan, without its pointers (set per call).
std::unique_ptr<CachedMatmul> make_fp8_matmul(const Fp8GemmPlan& plan) {
  const GemmPlan& p = plan.gemm;
  auto made = std::make_unique<CachedMatmul>();
  LtDescriptors& d = made->descriptors;
  FTRAIN_CUBLAS_CHECK(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set(d.op, CUBLASLT_MATMUL_DESC_TRANSA, p.transa == Transpose::none ? CUBLAS_OP_N : CUBLAS_OP_T);
  set(d.op, CUBLASLT_MATMUL_DESC_TRANSB, p.transb == Transpose::none ? CUBLAS_OP_N : CUBLAS_OP_T);
  set(d.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, static_cast<std::int8_t>(plan.fast_accum ? 1 : 0));
  if (p.epilogue == GemmEpilogue::bias) {
    set(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    set(d.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, data_type(p.bias_type));
  }
  // TN: A stored k x m, B stored k x n (column-major), C/D m x n.
  create_layouts(d, p);
  return made;
}

// FTRAIN_CUBLASLT_FP8_SCALE_STAGING=off passes every scale pointer to
// cuBLASLt as it is: how a GPU test shows which placements cuBLASLt refuses.
bool scale_staging_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("FTRAIN_CUBLASLT_FP8_SCALE_STAGING");
    return v == nullptr || std::string(v) != "off";
  }();
  return enabled;
}

// `scale`, or its value copied (stream-ordered) into slot `slot` when
// cuBLASLt would refuse it where it is.
const float* placed_scale(const float* scale, const BlasResources& blas, int slot, cudaStream_t stream) {
  if (!scale_staging_enabled() || !fp8_scale_needs_staging(scale)) return scale;
  float* staged = blas.fp8_scale_slots + static_cast<std::size_t>(slot) * (kFp8ScalePointerAlignment / sizeof(float));
  FTRAIN_CUDA_CHECK(cudaMemcpyAsync(staged, scale, sizeof(float), cudaMemcpyDeviceToDevice, stream));
  return staged;
}

}  // namespace

void execute_fp8_gemm_plan(ExecutionContext& ctx, const Fp8GemmPlan& unplaced, const Fp8GemmOperands& operands) {
  const bool has_bias = unplaced.gemm.epilogue == GemmEpilogue::bias;
  FT_CHECK(!has_bias || operands.bias != nullptr) << "cuBLASLt FP8 forward: bias epilogue without a bias";
  const Fp8GemmPlan plan = placed(unplaced, operand_alignment(operands.a, operands.b, operands.d, operands.d,
                                                              has_bias ? operands.bias : nullptr));
  const GemmPlan& p = plan.gemm;
  const std::string problem = fp8_gemm_plan_problem(plan);
  FT_CHECK(problem.empty()) << "cuBLASLt FP8 " << pass_name(p.pass) << " plan m=" << p.m << " n=" << p.n
                            << " k=" << p.k << " (" << element_name(p.a_type) << " x " << element_name(p.b_type)
                            << " -> " << element_name(p.c_type) << ") is refused: " << problem;
  FT_CHECK(operands.a_scale != nullptr && operands.b_scale != nullptr)
      << "cuBLASLt FP8 " << pass_name(p.pass) << ": a scale pointer is missing (the plan names operands "
      << plan.a_scale.operand << " and " << plan.b_scale.operand << ")";
  if (p.m == 0 || p.n == 0) return;
  const BlasResources blas = blas_resources(ctx);
  auto stream = static_cast<cudaStream_t>(ctx.compute().native_handle());

  // Under the lock: the slots are reused by the next FP8 GEMM on this stream.
  std::lock_guard<std::mutex> lock(*blas.mutex);
  const float* a_scale = placed_scale(operands.a_scale, blas, 0, stream);
  const float* b_scale = placed_scale(operands.b_scale, blas, 1, stream);
  GemmAlgorithmKey key = gemm_algorithm_key(p);
  key.fast_accum = plan.fast_accum;
  key.d_amax = operands.d_amax != nullptr;  // the amax output can narrow the algorithms
  CachedMatmul* matmul = blas.matmuls->find(key, p);
  if (matmul == nullptr) {
    std::unique_ptr<CachedMatmul> made = make_fp8_matmul(plan);
    // The heuristic sees the pointer attributes' presence: set them first.
    set(made->descriptors.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, a_scale);
    set(made->descriptors.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, b_scale);
    if (operands.d_amax != nullptr) set(made->descriptors.op, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, operands.d_amax);
    made->candidates = choose_algorithms(blas, made->descriptors, p, "FP8");
    matmul = &blas.matmuls->insert(key, p, std::move(made));
  }
  const LtDescriptors& d = matmul->descriptors;
  // The dequantisation factors (scale_inv) by device pointer: no host read.
  set(d.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, a_scale);
  set(d.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, b_scale);
  if (operands.d_amax != nullptr) set(d.op, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, operands.d_amax);
  if (has_bias) set(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, operands.bias);
  FTRAIN_CUBLAS_CHECK(matmul_with_fallback(*matmul, "FP8", p, [&](const cublasLtMatmulAlgo_t& algorithm) {
    return cublasLtMatmul(static_cast<cublasLtHandle_t>(blas.handle), d.op, &p.alpha, operands.a, d.a, operands.b, d.b,
                          &p.beta, operands.d, d.c, operands.d, d.c, &algorithm, blas.workspace,
                          blas.workspace_bytes, stream);
  }));
}

}  // namespace ftrain::cuda
