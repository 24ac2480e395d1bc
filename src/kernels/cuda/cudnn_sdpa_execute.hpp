// cuDNN fused attention, the execution side: one cuDNN handle per execution
// context (LibraryHandles::dnn, set on the context's compute stream) and,
// per shape (SdpaPlanKey: B, T, Hq, Hkv, D, dtype, causal, direction, and
// under the document mask the ragged batch's sequence count and length), the
// finalized operation graph and execution plan, built once and cached with
// its workspace size -- or, when cuDNN refuses the shape, the reason,
// cached too so a refused shape is asked about once. Running a plan takes
// its workspace (cuDNN's, then the backward's two f32 scratch tensors) from
// ExecutionContext::workspace and binds the variant pack from
// cudnn_sdpa_plan.hpp's table.
#pragma once

#include <string>

#include "kernels/cuda/cudnn_sdpa_plan.hpp"

namespace ftrain {
class ExecutionContext;
}

namespace ftrain::cuda {

// A cudnnHandle_t on `stream` (a cudaStream_t), or nullptr with `why` set:
// without a GPU cudnnCreate fails, and `why` says that cuDNN SDPA execution
// plans need a GPU, with cuDNN's status.
void* open_cudnn_handle(void* stream, std::string& why);

// "" when a finalized plan for `key` is cached in `ctx` (built now if it was
// not), else why cuDNN cannot run it: the storage, no GPU, or cuDNN's own
// reason for refusing the graph or every engine configuration's plan.
std::string cudnn_sdpa_prepare(ExecutionContext& ctx, const SdpaPlanKey& key);

// Enqueues the cached plan of `key` on the compute stream (prepare returned
// ""). `buffers` holds the op's tensors; the backward's scratch is filled in
// here from the context's workspace (the f32 dQ accumulator zeroed first
// where the cuDNN version needs it: before 9.6). Under the document mask
// (key.ragged_sequences > 0) `ragged` holds the call's sequence lengths and
// offsets (sdpa_ragged_arrays), copied into the workspace on the stream.
void cudnn_sdpa_run(ExecutionContext& ctx, const SdpaPlanKey& key, SdpaBuffers buffers, float softmax_scale,
                    const SdpaRaggedArrays* ragged = nullptr);

}  // namespace ftrain::cuda
