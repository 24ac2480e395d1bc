// The arithmetic of the fused FP8 producers (op_list.hpp: rmsnorm_forward_fp8,
// swiglu_forward_fp8), written once for kernels/host/fp8_fusions.cpp and
// kernels/cuda/fp8_fusions.cu.
//
// A fused op must give the bits of the unfused pair it replaces:
//     y = rmsnorm_forward(x) (or swiglu_forward)   stored in y's dtype
//     cast_to_fp8(y, out)                          reads y back as f32
// so the FP8 code and the amax are taken from the value AFTER it was rounded
// to the activation dtype (bf16 under mixed precision), never from the f32
// the norm computed: fp8(round_bf16(v) * scale), max |round_bf16(v)|. For an
// f32 activation the rounding is the identity. The per-element value comes
// from norms.hpp / activations.hpp, the cast and amax key from fp8.hpp.
#pragma once

#include <cstdint>

#include "kernels/math/activations.hpp"
#include "kernels/math/fp8.hpp"
#include "base/hd.hpp"
#include "kernels/math/norms.hpp"

namespace ftrain::math {

// v as a store into the activation dtype and a load back would leave it
// (base/dtype.hpp's to_bf16 / to_float for bf16; unchanged for f32).
FTRAIN_HD float round_to_activation(float v, bool bf16) {
  return bf16 ? bf16_bits_to_float(float_to_bf16_bits(v)) : v;
}

// The activation value the fused RMSNorm stores (and casts) for one element.
FTRAIN_HD float rmsnorm_fp8_stored(float x, float rstd, float w, bool bf16) {
  return round_to_activation(rmsnorm_value(x, rstd, w), bf16);
}

// The activation value the fused SwiGLU stores (and casts) for one element.
FTRAIN_HD float swiglu_fp8_stored(float gate, float up, bool bf16) {
  return round_to_activation(swiglu_value(gate, up), bf16);
}

}  // namespace ftrain::math
