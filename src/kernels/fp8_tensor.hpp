// An FP8 tensor as the FP8 ops see it: a non-owning descriptor in the manner
// of Transformer Engine's (common/include/transformer_engine/transformer_engine.h:
// data + scale + scale_inv + amax, with the format in the data's dtype).
//
//   data       fp8_e4m3 or fp8_e5m2, the shape of the tensor it encodes:
//              data = fp8(x * scale), round to nearest even, saturating
//   scale      f32[1] on the data's device: the quantisation factor the
//              cast READS (a view of the layer's scale, fp8/recipe.hpp)
//   scale_inv  f32[1]: the dequantisation factor 1 / scale, WRITTEN by the
//              cast together with the data, and by fp8_update_scales for
//              the whole layer; the only factor the FP8 GEMMs read (what
//              cuBLASLt's A/B_SCALE_POINTER take on a GPU)
//   amax       f32[1] or undefined: the slot of the amax history that the
//              cast max-accumulates max |x| into (row 0 of the layer's
//              history, the iteration in progress); undefined = record
//              nothing (evaluation, and the backward's re-casts of x and w)
//   data_t     fp8, optional: the transposed copy [cols, rows] of data viewed
//              as [rows = numel / cols, cols = last dim], written by the same
//              cast when defined (TE's columnwise data). cuBLASLt's FP8 GEMMs
//              take only the TN layout, so the GPU's dgrad reads w's and its
//              wgrad x's and dy's (kernels/cuda/cublaslt_plan.hpp); the host
//              GEMMs never need them.
//
// All four live on the device: no op reads a scale or an amax on the host,
// so on CUDA the recipe runs without a host round trip per GEMM. The tensors
// are views into the layer's state, so a descriptor is cheap to build per
// call and never owns the scaling state.
#pragma once

#include <cstdint>

#include "core/tensor.hpp"

namespace ftrain {

struct Fp8Tensor {
  Tensor data;
  Tensor scale;
  Tensor scale_inv;
  Tensor amax;
  Tensor data_t;

  DType format() const { return data.dtype(); }
  // The same descriptor over borrowed (non-owning) tensors: what an op
  // enqueued on an asynchronous stream holds (kernels/host_backend.cpp).
  Fp8Tensor borrow() const {
    return {data.borrow(), scale.borrow(), scale_inv.borrow(), amax.borrow(), data_t.borrow()};
  }
};

// Several FP8 casts of ONE tensor, each with its own consumer's scale, made
// in one pass by a fused producer (ops::rmsnorm_forward_fp8): Llama's q, k
// and v projections read one normalised input, but each keeps its own input
// scale and amax slot (fp8/recipe.hpp: a LinearState per projection), so
// the fused op writes one FP8 copy per consumer, exactly what a cast per
// consumer would write. out[0 .. count) are used; no transposed copies
// (data_t must be undefined: the forward's GEMM needs none).
struct Fp8Casts {
  static constexpr int kMax = 4;
  Fp8Tensor out[kMax];
  int count = 0;

  Fp8Casts borrow() const {
    Fp8Casts b;
    b.count = count;
    for (int i = 0; i < count && i < kMax; ++i) b.out[i] = out[i].borrow();
    return b;
  }
};

// Transformer Engine's amax_compute_algo: the amax a new scale is computed
// from is the max over the whole history, or its latest entry.
enum class Fp8AmaxAlgo : std::uint8_t { max, most_recent };

// Columns of a linear layer's amax history and entries of its scale
// (fp8/recipe.hpp): the GEMM operands of one te.Linear.
enum Fp8Operand : int { kFp8Input = 0, kFp8Weight = 1, kFp8GradOutput = 2, kFp8NumOperands = 3 };

}  // namespace ftrain
