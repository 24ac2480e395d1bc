// Llama (Hugging Face LlamaForCausalLM) as ftrain units.
//
// Units and their parameters (HF names and shapes; C hidden, V vocab,
// I intermediate, D head_dim, Hq / Hkv query / key-value heads):
//   0      "model.embed_tokens"  model.embed_tokens.weight [V, C]
//   1..L   "model.layers.i"      input_layernorm.weight [C],
//                                self_attn.{q_proj [Hq*D, C], k_proj [Hkv*D, C],
//                                           v_proj [Hkv*D, C], o_proj [C, Hq*D]}.weight,
//                                post_attention_layernorm.weight [C],
//                                mlp.{gate_proj [I, C], up_proj [I, C], down_proj [C, I]}.weight
//   L+1    "lm_head"             model.norm.weight [C], lm_head.weight [V, C]
//                                (tied: an alias of model.embed_tokens.weight)
// No biases (attention_bias = mlp_bias = false). Norm weights start at one
// and are excluded from weight decay; every matrix starts N(0, initializer_range).
//
// parallel tensor T (split_for_tensor_parallel): each unit declares its
// tensor rank's slices (Megatron's layout, llama_model.cpp) and the stream
// between units is that rank's N / T token rows (sequence parallelism).
// parallel context C (use_context_parallel): each batch holds this rank's
// chunks of the windows and the decoder layers' attention runs as a ring
// over the context group (layers/context_parallel_attention.hpp).
//
// Activations are [N, C] rows (N = batch * sequence) in ctx.compute_dtype;
// per-head tensors are the same buffers viewed as [B, T, H, D]. Activation
// gradients travel in the compute dtype, parameter gradients are f32 and
// accumulate (kernels/ops.hpp conventions).
#pragma once

#include <memory>
#include <vector>

#include "core/tensor.hpp"
#include "llama_config.hpp"
#include "plugin/model.hpp"

namespace ftrain::llama {

class LlamaModel final : public Model {
 public:
  explicit LlamaModel(const LlamaConfig& config);
  ~LlamaModel() override;

  std::string architecture() const override { return "llama"; }
  std::map<std::string, std::string> config() const override { return config_.to_map(); }
  DataKind data_kind() const override { return DataKind::tokens; }
  int num_units() const override { return static_cast<int>(units_.size()); }
  Unit& unit(int index) override;
  // PaLM / Megatron MFU convention (PaLM paper, appendix B):
  //   6 * N_matmul * T  +  12 * L * Hq * D * T^2
  // N_matmul counts every weight that takes part in a matmul: the attention
  // and MLP projections of all layers and the output head (also when tied;
  // the embedding lookup is not a matmul). The attention term counts QK^T
  // and PV over the full T x T square (no halving for the causal mask), as
  // PaLM does, so numbers compare with published MFU figures.
  double training_flops_per_sample(std::int64_t sequence_length) const override;
  double attention_training_flops(double query_key_pairs) const override;
  std::int64_t output_size() const override { return config_.vocab_size; }
  // Megatron's layout (llama_model.cpp "tensor parallelism"): heads, KV heads,
  // intermediate columns and vocabulary rows divided by T, refused naming the
  // count that T does not divide.
  void split_for_tensor_parallel(int tensor_size) override;
  // Ring attention over the context group in every decoder layer.
  void use_context_parallel(int context_size) override;

  const LlamaConfig& llama_config() const { return config_; }

 private:
  LlamaConfig config_;
  void make_units();

  Tensor inv_freq_;  // f32 [D/2] on the host, shared by every layer's rope
  int tensor_size_ = 1;
  int context_size_ = 1;
  std::vector<std::unique_ptr<Unit>> units_;
};

}  // namespace ftrain::llama
