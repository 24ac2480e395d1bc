// cuDNN fused attention, step 1: the forward SDPA operation graph as plain
// data, built through cuDNN's backend API (cudnn_graph.h; no
// cudnn-frontend here) and checked against a device description without a
// GPU (cuDNN's "deviceless ahead-of-time compilation").
//
// The graph is the composite one cudnn-frontend builds for SDPA: Q.K^T,
// scale, causal mask from generated row/column indices, max, subtract, exp,
// sum, log-sum-exp (the saved statistics, f32 [B, H, T, 1]), divide, .V.
// Q/K/V/O are BSHD straight from the QKV projection ([B, T, H, D] memory)
// through strides; GQA through K/V having fewer heads. The backward graph is
// cudnn-frontend's composite one too (dO.O row sums, P recomputed from the
// saved statistics, dV = P^T.dO, dS = scale.P.(dO.V^T - rowsum), dK =
// dS^T.Q, dQ = dS.K through an f32 accumulator; under GQA dK/dV per query
// head, then summed over each KV head's group). Execution plans need a
// driver: cudnn_sdpa_execute.hpp builds them with a real handle. The graphs'
// input/output tensors (uids, dims, strides) come from sdpa_io_tensors()
// (cudnn_sdpa_plan.hpp), the table the variant pack is bound from.
//
// Document mask (SdpaShape::ragged()): the graphs run on the ragged batch
// of documents, cudnn-frontend's padding-mask SDPA over THD-style ragged
// offsets: every matmul takes the per-sequence lengths as its M/N/K
// overrides, the scores get the padding mask (row and column below the
// sequence's length) before the causal one, and Q/K/V/O/stats (and the
// backward's dO/dQ/dK/dV and f32 scratch) name their ragged offsets.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/cudnn_sdpa_plan.hpp"

namespace ftrain::cuda {

// Owns backend descriptors (destroyed in reverse order).
class CudnnDescriptors {
 public:
  CudnnDescriptors() = default;
  CudnnDescriptors(const CudnnDescriptors&) = delete;
  CudnnDescriptors& operator=(const CudnnDescriptors&) = delete;
  CudnnDescriptors(CudnnDescriptors&&) = default;
  CudnnDescriptors& operator=(CudnnDescriptors&&) = default;
  ~CudnnDescriptors();
  void* add(void* descriptor);  // cudnnBackendDescriptor_t
  void* last() const { return owned_.empty() ? nullptr : owned_.back(); }

 private:
  std::vector<void*> owned_;
};

// The finalized forward operation graph (last() is the graph). Throws
// ftrain::Error with cuDNN's own reason when cuDNN refuses it. `handle`
// (a cudnnHandle_t) is set on the graph when given; null for a deviceless
// check against a device description.
CudnnDescriptors build_sdpa_forward_graph(const SdpaShape& shape, void* handle = nullptr);
// The finalized backward operation graph; its variant pack is
// sdpa_io_tensors(shape, SdpaDirection::backward).
CudnnDescriptors build_sdpa_backward_graph(const SdpaShape& shape, void* handle = nullptr);
// A finalized CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR for an H100 SXM.
CudnnDescriptors h100_device_description();
// Engine configurations cuDNN's heuristics (mode A) offer for `graph` on
// `device` (needs a loadable libcuda: a driver, or the toolkit's stub).
std::int64_t sdpa_engine_configurations(const CudnnDescriptors& graph, const CudnnDescriptors& device);


// An execution plan for a finalized `graph`: cuDNN's heuristics (mode A),
// then the first engine configuration, best first, whose plan finalizes.
// With `handle` (a cudnnHandle_t; the graph built with it) the plan can be
// executed; with `device` (h100_device_description()) it is cuDNN's
// deviceless compilation, which still needs a driver to load the engine's
// kernels: without one it throws. Throws ftrain::Error with cuDNN's
// reasons (the first three configurations') when no plan finalizes.
struct SdpaExecutionPlan {
  CudnnDescriptors descriptors;  // last() is the plan
  std::int64_t workspace_bytes = 0;
  std::int64_t engine_configurations = 0;
};
SdpaExecutionPlan build_sdpa_execution_plan(const CudnnDescriptors& graph, void* handle,
                                            const CudnnDescriptors* device);

}  // namespace ftrain::cuda
