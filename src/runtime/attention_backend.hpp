// The deck's `attention_backend auto|cudnn|reference`: which attention the
// CUDA backend runs. The host backend has one attention kernel (the tiled
// flash attention) and ignores the setting; the run header says so.
//
// On CUDA: `reference` runs the on-device oracle
// (kernels/cuda/attention.cu); `cudnn` runs the fused cuDNN SDPA
// graphs and stops with cuDNN's reason when cuDNN refuses a shape; `auto`
// takes cuDNN where it accepts the shape and otherwise the reference
// kernel, logging that choice once per shape (never a silent switch).
#pragma once

#include <string>

#include "base/device.hpp"

namespace ftrain {

enum class AttentionBackend { automatic, cudnn, reference };

const char* attention_backend_name(AttentionBackend backend);

struct AttentionBackendChoice {
  bool use_cudnn = false;
  // Non-empty when `auto` fell back: the line to log (shape and cuDNN's reason).
  std::string fallback_note;
};

// `shape` describes the attention call ("attention_forward B 2, T 4096, ...");
// `cudnn_refusal` is "" when cuDNN accepts it, else why not. Throws
// ftrain::Error for `cudnn` on a refused shape.
AttentionBackendChoice choose_attention_backend(AttentionBackend requested, const std::string& shape,
                                                const std::string& cudnn_refusal);

// The run header's words for which attention a run uses on `device`: on the
// host the setting has no effect ("attention_backend auto: no effect on the
// host backend"); on CUDA, which kernel each setting runs (the per-shape
// choice under auto is logged when a shape first runs).
std::string describe_attention_choice(AttentionBackend requested, Device device);

}  // namespace ftrain
