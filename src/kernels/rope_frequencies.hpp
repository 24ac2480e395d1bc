// Rotary-embedding inverse frequencies, as Hugging Face computes them
// (transformers modeling_rope_utils.py), for kernels' rope_forward/backward.
//
// Both return a host f32 tensor [head_dim / 2]; values are computed in double
// and rounded once to f32.
#pragma once

#include <cstdint>

#include "core/tensor.hpp"

namespace ftrain {

// Default RoPE: inv_freq[i] = theta^(-2i / head_dim).
Tensor rope_inv_freq(std::int64_t head_dim, double theta);

// rope_scaling {"rope_type": "llama3"} (Llama 3.1+): the default frequencies,
// then with wavelen = 2 pi / inv_freq, low = original_max_position /
// low_freq_factor and high = original_max_position / high_freq_factor:
// wavelen > low -> inv_freq / factor; wavelen < high -> unchanged; otherwise
// (1 - smooth) * inv_freq / factor + smooth * inv_freq with
// smooth = (original_max_position / wavelen - low_freq_factor) /
//          (high_freq_factor - low_freq_factor).
Tensor rope_inv_freq_llama3(std::int64_t head_dim, double theta, double factor, double low_freq_factor,
                            double high_freq_factor, std::int64_t original_max_position);

}  // namespace ftrain
