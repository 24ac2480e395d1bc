#include "runtime/attention_backend.hpp"

#include "base/error.hpp"

namespace ftrain {

const char* attention_backend_name(AttentionBackend backend) {
  switch (backend) {
    case AttentionBackend::automatic:
      return "auto";
    case AttentionBackend::cudnn:
      return "cudnn";
    case AttentionBackend::reference:
      return "reference";
  }
  return "?";
}

AttentionBackendChoice choose_attention_backend(AttentionBackend requested, const std::string& shape,
                                                const std::string& cudnn_refusal) {
  switch (requested) {
    case AttentionBackend::reference:
      return {false, ""};
    case AttentionBackend::cudnn:
      FT_CHECK(cudnn_refusal.empty()) << "attention_backend cudnn: cuDNN cannot run " << shape << ": "
                                      << cudnn_refusal << " (use `attention_backend auto` or `reference`)";
      return {true, ""};
    case AttentionBackend::automatic:
      if (cudnn_refusal.empty()) return {true, ""};
      return {false, "attention_backend auto: " + shape + " runs on the CUDA reference attention, because cuDNN " +
                         "cannot run it: " + cudnn_refusal};
  }
  return {false, ""};
}

std::string describe_attention_choice(AttentionBackend requested, Device device) {
  const std::string setting = std::string("attention_backend ") + attention_backend_name(requested);
  if (device == Device::host) return setting + ": no effect on the host backend";
  switch (requested) {
    case AttentionBackend::reference:
      return setting + ": the CUDA reference attention kernel (slow; the on-device oracle)";
    case AttentionBackend::cudnn:
      return setting + ": cuDNN fused SDPA (bf16; a shape it cannot run stops the run naming cuDNN's reason)";
    case AttentionBackend::automatic:
      return setting + ": cuDNN fused SDPA where its plan builds (bf16), else the CUDA reference kernel; "
                       "the choice is logged once per shape";
  }
  return setting;
}

}  // namespace ftrain
