#include "kernels/cuda/cublaslt_linear.hpp"

#include <cublasLt.h>

#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "backends/cuda/device/cuda_check.hpp"
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

// Heuristic results asked for: the best one may be marked unusable
// (its state), and the next ones are the fallbacks.
constexpr int kHeuristicResults = 8;

// What a context keeps for cuBLASLt (owned through LibraryHandles::owner).
struct BlasState {
  cublasLtHandle_t handle = nullptr;
  std::shared_ptr<void> workspace;
  std::shared_ptr<void> fp8_scale_slots;  // kFp8ScaleSlots slots of kFp8ScalePointerAlignment bytes
  std::mutex mutex;
  GemmPlanCache<CachedMatmul> matmuls;  // destroyed before the handle
  ~BlasState() {
    matmuls = {};
    if (handle != nullptr) cublasLtDestroy(handle);
  }
};

BlasState& blas_state(ExecutionContext& ctx) {
  LibraryHandles& libs = ctx.libraries();
  if (libs.blas == nullptr) {
    auto state = std::make_shared<BlasState>();
    FTRAIN_CUBLAS_CHECK(cublasLtCreate(&state->handle));
    state->workspace = ctx.allocator().allocate(kWorkspaceBytes);
    state->fp8_scale_slots = ctx.allocator().allocate(std::size_t{kFp8ScaleSlots} * kFp8ScalePointerAlignment);
    FT_CHECK(!fp8_scale_needs_staging(state->fp8_scale_slots.get()))
        << "the device allocator returned FP8 scale slots aligned to "
        << address_alignment(state->fp8_scale_slots.get()) << " bytes, not " << kFp8ScalePointerAlignment;
    libs.blas = state.get();
    // One owner slot for every library's state: keep what is there (cuDNN's, if attention ran first).
    libs.owner = std::make_shared<std::pair<std::shared_ptr<void>, std::shared_ptr<BlasState>>>(libs.owner, state);
  }
  return *static_cast<BlasState*>(libs.blas);
}

template <class T>
void set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attribute, const T& value) {
  FTRAIN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attribute, &value, sizeof value));
}

// The descriptors of one non-FP8 plan, without its pointers (set per call).
std::unique_ptr<CachedMatmul> make_matmul(const GemmPlan& plan) {
  auto made = std::make_unique<CachedMatmul>();
  LtDescriptors& d = made->descriptors;
  FTRAIN_CUBLAS_CHECK(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set(d.op, CUBLASLT_MATMUL_DESC_TRANSA, operation(plan.transa));
  set(d.op, CUBLASLT_MATMUL_DESC_TRANSB, operation(plan.transb));
  if (plan.epilogue == GemmEpilogue::bias) {
    set(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    set(d.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, data_type(plan.bias_type));
  }
  create_layouts(d, plan);
  return made;
}

}  // namespace

BlasResources blas_resources(ExecutionContext& ctx) {
  BlasState& state = blas_state(ctx);
  return {static_cast<void*>(state.handle), state.workspace.get(), kWorkspaceBytes, &state.matmuls, &state.mutex,
          static_cast<float*>(state.fp8_scale_slots.get())};
}

void create_layouts(LtDescriptors& d, const GemmPlan& plan) {
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
}

std::vector<cublasLtMatmulAlgo_t> choose_algorithms(const BlasResources& blas, const LtDescriptors& d,
                                                   const GemmPlan& plan, const char* what) {
  cublasLtMatmulPreference_t preference = nullptr;
  FTRAIN_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, decltype(&cublasLtMatmulPreferenceDestroy)> owner(
      preference, &cublasLtMatmulPreferenceDestroy);
  auto prefer = [&](cublasLtMatmulPreferenceAttributes_t attribute, const auto& value) {
    FTRAIN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof value));
  };
  prefer(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, blas.workspace_bytes);
  // Without these the heuristic assumes 256-byte aligned operands.
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, plan.alignment.a);
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, plan.alignment.b);
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, plan.alignment.c);
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, plan.alignment.d);
  cublasLtMatmulHeuristicResult_t results[kHeuristicResults] = {};
  int returned = 0;
  FTRAIN_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(blas.handle), d.op, d.a, d.b, d.c,
                                                     d.c, preference, kHeuristicResults, results, &returned));
  const std::vector<int> usable = usable_heuristics(results, returned, CUBLAS_STATUS_SUCCESS);
  FT_CHECK(!usable.empty()) << "cuBLASLt has no usable algorithm for the " << what << " GEMM " << pass_name(plan.pass)
                        << " m=" << plan.m << " n=" << plan.n << " k=" << plan.k << " ("
                        << element_name(plan.a_type) << " x " << element_name(plan.b_type) << " -> "
                        << element_name(plan.c_type) << ", alignments A/B/C/D " << plan.alignment.a << "/"
                        << plan.alignment.b << "/" << plan.alignment.c << "/" << plan.alignment.d << " bytes; "
                        << returned << " results, none usable)";
  std::vector<cublasLtMatmulAlgo_t> algorithms;
  for (int i : usable) algorithms.push_back(results[i].algo);
  return algorithms;
}

void report_candidate_fallback(const CachedMatmul& matmul, std::size_t first, const char* kind, const GemmPlan& plan) {
  const std::string what = std::string(kind) + " GEMM " + pass_name(plan.pass) + " m=" + std::to_string(plan.m) +
                           " n=" + std::to_string(plan.n) + " k=" + std::to_string(plan.k);
  FT_CHECK(matmul.chosen < matmul.candidates.size())
      << "cuBLASLt refused every algorithm its heuristic offered for the " << what << " (" << matmul.candidates.size()
      << " candidates, each NOT_SUPPORTED at cublasLtMatmul)";
  // Once per GEMM shape: the cache keeps the candidate that ran.
  std::fprintf(stderr, "ftrain: cuBLASLt refused heuristic algorithm %zu of %zu for the %s at execution; using %zu\n",
               first + 1, matmul.candidates.size(), what.c_str(), matmul.chosen + 1);
}

void execute_gemm_plan(ExecutionContext& ctx, const GemmPlan& unplaced, const GemmOperands& operands) {
  const bool has_bias = unplaced.epilogue == GemmEpilogue::bias;
  FT_CHECK(!has_bias || operands.bias != nullptr)
      << "cuBLASLt " << pass_name(unplaced.pass) << ": bias epilogue without a bias";
  const GemmPlan plan = placed(unplaced, operand_alignment(operands.a, operands.b, operands.c, operands.c,
                                                           has_bias ? operands.bias : nullptr));
  const std::string problem = gemm_plan_problem(plan);
  FT_CHECK(problem.empty()) << "cuBLASLt " << pass_name(plan.pass) << " plan m=" << plan.m << " n=" << plan.n
                            << " k=" << plan.k << " (" << element_name(plan.a_type) << " -> "
                            << element_name(plan.c_type) << ") is refused: " << problem;
  if (plan.m == 0 || plan.n == 0) return;
  const BlasResources blas = blas_resources(ctx);
  auto stream = static_cast<cudaStream_t>(ctx.compute().native_handle());

  std::lock_guard<std::mutex> lock(*blas.mutex);
  const GemmAlgorithmKey key = gemm_algorithm_key(plan);
  CachedMatmul* matmul = blas.matmuls->find(key, plan);
  if (matmul == nullptr) {
    std::unique_ptr<CachedMatmul> made = make_matmul(plan);
    made->candidates = choose_algorithms(blas, made->descriptors, plan, "linear");
    matmul = &blas.matmuls->insert(key, plan, std::move(made));
  }
  const LtDescriptors& d = matmul->descriptors;
  if (has_bias) set(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, operands.bias);
  FTRAIN_CUBLAS_CHECK(matmul_with_fallback(*matmul, "linear", plan, [&](const cublasLtMatmulAlgo_t& algorithm) {
    return cublasLtMatmul(static_cast<cublasLtHandle_t>(blas.handle), d.op, &plan.alpha, operands.a, d.a, operands.b,
                          d.b, &plan.beta, operands.c, d.c, operands.c, d.c, &algorithm, blas.workspace,
                          blas.workspace_bytes, stream);
  }));
}

}  // namespace ftrain::cuda
