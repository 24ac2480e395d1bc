#include "kernels/cuda/cudnn_sdpa_execute.hpp"

#include <cuda_runtime.h>
#include <cudnn.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "backends/cuda/device/cuda_check.hpp"
#include "base/error.hpp"
#include "kernels/cuda/cudnn_sdpa_graph.hpp"
#include "runtime/execution_context.hpp"

namespace ftrain::cuda {

namespace {

std::string cudnn_reason(cudnnStatus_t status) {
  char reason[1024] = {};
  cudnnGetLastErrorString(reason, sizeof reason);
  std::string r = cudnnGetErrorString(status);
  if (reason[0] != '\0') r += std::string(": ") + reason;
  return r;
}

// One shape's finalized graph and plan (both kept: the plan refers to the
// graph), or why there is none.
struct CachedPlan {
  CudnnDescriptors graph;
  SdpaExecutionPlan plan;
  std::string refusal;
};

// What a context keeps for cuDNN (owned through LibraryHandles::owner).
struct DnnState {
  cudnnHandle_t handle = nullptr;
  std::string no_handle;  // why there is no handle (no GPU), else ""
  std::mutex mutex;
  std::map<SdpaPlanKey, std::unique_ptr<CachedPlan>> plans;
  ~DnnState() {
    plans.clear();  // plans before the handle they were built with
    if (handle != nullptr) cudnnDestroy(handle);
  }
};

// Keeps both the library state found in LibraryHandles::owner (cuBLASLt's)
// and ours alive: the handles struct has one owner slot.
struct OwnerChain {
  std::shared_ptr<void> previous;
  std::shared_ptr<DnnState> dnn;
};

DnnState& dnn_state(ExecutionContext& ctx) {
  LibraryHandles& libs = ctx.libraries();
  if (libs.dnn == nullptr) {
    auto state = std::make_shared<DnnState>();
    state->handle = static_cast<cudnnHandle_t>(open_cudnn_handle(ctx.compute().native_handle(), state->no_handle));
    libs.dnn = state.get();
    libs.owner = std::make_shared<OwnerChain>(OwnerChain{libs.owner, state});
  }
  return *static_cast<DnnState*>(libs.dnn);
}

CachedPlan& cached(DnnState& state, const SdpaPlanKey& key) {
  auto found = state.plans.find(key);
  if (found != state.plans.end()) return *found->second;
  auto entry = std::make_unique<CachedPlan>();
  if (!state.no_handle.empty()) {
    entry->refusal = state.no_handle;
  } else {
    try {
      const SdpaShape shape = key.shape();
      entry->graph = key.direction == SdpaDirection::forward ? build_sdpa_forward_graph(shape, state.handle)
                                                             : build_sdpa_backward_graph(shape, state.handle);
      entry->plan = build_sdpa_execution_plan(entry->graph, state.handle, nullptr);
    } catch (const Error& e) {
      entry->refusal = e.what();
    }
  }
  return *state.plans.emplace(key, std::move(entry)).first->second;
}

}  // namespace

void* open_cudnn_handle(void* stream, std::string& why) {
  cudnnHandle_t handle = nullptr;
  const cudnnStatus_t created = cudnnCreate(&handle);
  if (created != CUDNN_STATUS_SUCCESS) {
    why = "cuDNN SDPA execution plans need a GPU (a driver and a device): cudnnCreate returned " +
          cudnn_reason(created);
    return nullptr;
  }
  const cudnnStatus_t set = cudnnSetStream(handle, static_cast<cudaStream_t>(stream));
  if (set != CUDNN_STATUS_SUCCESS) {
    why = "cudnnSetStream on the compute stream returned " + cudnn_reason(set);
    cudnnDestroy(handle);
    return nullptr;
  }
  return handle;
}

std::string cudnn_sdpa_prepare(ExecutionContext& ctx, const SdpaPlanKey& key) {
  std::string refusal = sdpa_dtype_refusal(key);
  if (refusal.empty()) refusal = sdpa_ragged_refusal(key.shape());
  if (!refusal.empty()) return refusal;
  DnnState& state = dnn_state(ctx);
  const std::lock_guard<std::mutex> lock(state.mutex);
  return cached(state, key).refusal;
}

void cudnn_sdpa_run(ExecutionContext& ctx, const SdpaPlanKey& key, SdpaBuffers buffers, float softmax_scale,
                    const SdpaRaggedArrays* ragged) {
  DnnState& state = dnn_state(ctx);
  CachedPlan* entry = nullptr;
  {
    const std::lock_guard<std::mutex> lock(state.mutex);
    entry = &cached(state, key);
  }
  FT_CHECK(entry->refusal.empty()) << "cuDNN cannot run " << describe(key) << ": " << entry->refusal;
  const SdpaShape shape = key.shape();
  FT_CHECK(shape.ragged() == (ragged != nullptr))
      << describe(key) << ": the document mask's ragged arrays " << (ragged ? "given to" : "missing from")
      << " this call";
  auto stream = static_cast<cudaStream_t>(ctx.compute().native_handle());
  // Workspace layout: cuDNN's own, then (backward) the row sums and the f32
  // dQ accumulator, (document mask under GQA) dK and dV per query head,
  // (document mask) the i32 lengths and offsets; each 256-byte aligned.
  const std::int64_t own = sdpa_round_up(entry->plan.workspace_bytes);
  const bool backward = key.direction == SdpaDirection::backward;
  const std::int64_t scratch =
      backward ? sdpa_row_dot_bytes(shape) + sdpa_dq_accum_bytes(shape) + 2 * sdpa_full_head_bytes(shape) : 0;
  const std::int64_t ragged_bytes =
      ragged ? sdpa_round_up(static_cast<std::int64_t>(ragged->packed.size() * sizeof(std::int32_t))) : 0;
  const std::int64_t total = own + scratch + ragged_bytes;
  char* workspace = total > 0 ? static_cast<char*>(ctx.workspace(static_cast<std::size_t>(total))) : nullptr;
  if (ragged) {
    auto* arrays = reinterpret_cast<std::int32_t*>(workspace + own + scratch);
    // Pageable source: the copy has taken the host array when the call returns.
    FTRAIN_CUDA_CHECK(cudaMemcpyAsync(arrays, ragged->packed.data(), ragged->packed.size() * sizeof(std::int32_t),
                                      cudaMemcpyHostToDevice, stream));
    buffers.seq_len = arrays + ragged->seq_len;
    buffers.q_offsets = arrays + ragged->q_offsets;
    buffers.kv_offsets = arrays + ragged->kv_offsets;
    buffers.stats_offsets = arrays + ragged->stats_offsets;
  }
  if (backward) {
    buffers.row_dot = workspace + own;
    buffers.dq_accum = workspace + own + sdpa_row_dot_bytes(shape);
    if (sdpa_full_head_bytes(shape) > 0) {
      buffers.dk_full = workspace + own + sdpa_row_dot_bytes(shape) + sdpa_dq_accum_bytes(shape);
      buffers.dv_full = static_cast<char*>(buffers.dk_full) + sdpa_full_head_bytes(shape);
    }
    // Before cuDNN 9.6 the caller had to zero the f32 dQ accumulator; from
    // 9.6 on the engine initialises it (cudnn-frontend's composite SDPA
    // backward makes the same distinction).
    if (cudnnGetVersion() < 90600)
      FTRAIN_CUDA_CHECK(
          cudaMemsetAsync(buffers.dq_accum, 0, static_cast<std::size_t>(sdpa_dq_accum_bytes(shape)), stream));
  }
  SdpaScalars scalars;
  scalars.scale = softmax_scale;
  SdpaVariantPack pack = sdpa_variant_pack(shape, key.direction, buffers, scalars);

  CudnnDescriptors owner;
  cudnnBackendDescriptor_t variant = nullptr;
  cudnnStatus_t status = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &variant);
  FT_CHECK(status == CUDNN_STATUS_SUCCESS) << describe(key) << ": cuDNN variant pack: " << cudnn_reason(status);
  owner.add(variant);
  const auto n = static_cast<std::int64_t>(pack.uids.size());
  void* workspace_pointer = workspace;
  for (const auto& [attribute, type, count, value] :
       {std::tuple<cudnnBackendAttributeName_t, cudnnBackendAttributeType_t, std::int64_t, void*>{
            CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, pack.uids.data()},
        {CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, pack.pointers.data()},
        {CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace_pointer}}) {
    status = cudnnBackendSetAttribute(variant, attribute, type, count, value);
    FT_CHECK(status == CUDNN_STATUS_SUCCESS) << describe(key) << ": cuDNN variant pack: " << cudnn_reason(status);
  }
  status = cudnnBackendFinalize(variant);
  FT_CHECK(status == CUDNN_STATUS_SUCCESS) << describe(key) << ": cuDNN variant pack: " << cudnn_reason(status);
  status = cudnnBackendExecute(state.handle, static_cast<cudnnBackendDescriptor_t>(entry->plan.descriptors.last()),
                               variant);
  FT_CHECK(status == CUDNN_STATUS_SUCCESS) << describe(key) << ": cudnnBackendExecute: " << cudnn_reason(status);
}

}  // namespace ftrain::cuda
