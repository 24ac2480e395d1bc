// cuDNN fused attention, step 1: the forward SDPA operation graph as plain
// data, built through cuDNN's backend API (cudnn_graph.h; no
// cudnn-frontend here) and checked against a device description without a
// GPU (cuDNN's "deviceless ahead-of-time compilation", GPU.md).
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
// driver: they and the op table's cuDNN path come next
// (share/doc/status.md).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ftrain::cuda {

struct SdpaShape {
  std::int64_t batch = 1, q_heads = 1, kv_heads = 1, seq = 1, head_dim = 64;
  bool causal = true;
  // 0 = head_dim. Another value makes Q.K^T inconsistent: the graph cuDNN
  // must refuse (how the test shows its check can fail).
  std::int64_t key_head_dim = 0;
};

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
// ftrain::Error with cuDNN's own reason when cuDNN refuses it.
CudnnDescriptors build_sdpa_forward_graph(const SdpaShape& shape);
// The finalized backward operation graph. Variant-pack uids: 1 Q, 2 K (as
// K^T), 3 V (as V^T), 4 O, 5 statistics, 6 scale, 7 -inf, 8 one (by value),
// 9 dO, 10 dQ, 11 dK, 12 dV, 13 and 14 f32 workspace (row sums
// [B, H, T, 1], dQ accumulator [B, H, T, D]).
CudnnDescriptors build_sdpa_backward_graph(const SdpaShape& shape);
// A finalized CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR for an H100 SXM (GPU.md's keys).
CudnnDescriptors h100_device_description();
// Engine configurations cuDNN's heuristics (mode A) offer for `graph` on
// `device` (needs a loadable libcuda: a driver, or the toolkit's stub).
std::int64_t sdpa_engine_configurations(const CudnnDescriptors& graph, const CudnnDescriptors& device);

}  // namespace ftrain::cuda
