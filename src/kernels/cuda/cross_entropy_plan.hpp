// The GEMMs of the CUDA fused cross entropy (cross_entropy_head.cpp) as data:
// a pure function lists, chunk by chunk over the vocabulary, the cuBLASLt
// plans (cublaslt_plan.hpp, the linear layer's own) and where each operand
// starts, so the host test suite replays the whole chunked head through
// OpenBLAS with the shared row math and compares it with the host op
// (tests/unit/cuda/test_cross_entropy_plan.cpp), and the CUDA code only
// executes the list. No CUDA header.
//
// With h[N, C], w[V, C], chunk [v0, v0 + cs) of the vocabulary:
//   logits[N, cs] = h . w[v0 : v0+cs]^T    linear forward (x = h, w = the chunk's rows, out = cs)
//   dh[N, C]     (+)= dlogit . w[v0 : v0+cs] linear dgrad, beta 0 on the first chunk then 1 (dh is written)
//   dw[v0 : v0+cs] += dlogit^T . h           linear wgrad, beta 1 (absent for a frozen head;
//                                            an f32 partial then an add for f32 operands and a bf16 dw)
// w's chunk and dw's chunk start v0 * C elements into their tensors.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cuda/cublaslt_plan.hpp"
#include "kernels/cuda/launch_config.hpp"

namespace ftrain::cuda {

struct CrossEntropyHeadShape {
  std::int64_t rows = 0, channels = 0, vocab = 0, vocab_chunk = 0;
  GemmElement operands = GemmElement::f32;  // h, w and dlogit as the GEMMs read them
  GemmElement dw = GemmElement::f32;        // dw's storage
  bool want_dw = true;                      // false: a frozen head
};

struct CrossEntropyChunkPlan {
  std::int64_t v0 = 0, width = 0;
  std::int64_t w_offset = 0;  // elements into w (and dw) where the chunk's rows start
  GemmPlan logits;            // C = the f32 logits chunk [rows, width]
  GemmPlan dh;                // C = dh in f32 [rows, channels]
  GemmPlan dw;                // C = dw's chunk; unused when !want_dw
  // f32 GEMMs write f32 only: with f32 operands and a bf16 dw the wgrad
  // writes an f32 partial [width, channels] (beta 0) that an element-wise
  // add rounds into dw once, as the host's bf16 dw does.
  bool dw_partial = false;
};

inline std::vector<CrossEntropyChunkPlan> plan_cross_entropy_head(const CrossEntropyHeadShape& s) {
  FT_CHECK(s.rows >= 0 && s.channels > 0 && s.vocab > 0 && s.vocab_chunk > 0)
      << "cross-entropy plan: rows " << s.rows << ", channels " << s.channels << ", vocab " << s.vocab
      << ", vocab_chunk " << s.vocab_chunk << " (all but rows must be positive)";
  const std::int64_t chunk = cross_entropy_chunk_width(s.vocab, s.vocab_chunk);
  std::vector<CrossEntropyChunkPlan> plans;
  for (std::int64_t v0 = 0; v0 < s.vocab; v0 += chunk) {
    CrossEntropyChunkPlan p;
    p.v0 = v0;
    p.width = std::min(chunk, s.vocab - v0);
    p.w_offset = v0 * s.channels;
    const LinearShape linear{s.rows, s.channels, p.width, s.operands, s.operands, GemmElement::f32, false};
    p.logits = plan_linear(LinearPass::forward, linear);
    p.dh = plan_linear(LinearPass::dgrad, linear);
    p.dh.beta = v0 == 0 ? 0.0f : 1.0f;
    p.dw_partial = s.want_dw && s.operands == GemmElement::f32 && s.dw == GemmElement::bf16;
    LinearShape weight = linear;
    weight.output = p.dw_partial ? GemmElement::f32 : s.dw;
    p.dw = plan_linear(LinearPass::wgrad, weight);
    if (p.dw_partial) p.dw.beta = 0.0f;
    plans.push_back(p);
  }
  return plans;
}

}  // namespace ftrain::cuda
