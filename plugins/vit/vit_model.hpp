// Vision Transformer (timm VisionTransformer) as ftrain units.
//
// Units and their parameters (timm names and shapes; C embed_dim, P patch,
// Cin channels, N = (image/P)^2 patches, T = N + 1 tokens, M mlp_dim,
// K num_classes):
//   0        "patch_embed"  cls_token [1, 1, C], pos_embed [1, T, C],
//                           patch_embed.proj.weight [C, Cin, P, P], patch_embed.proj.bias [C]
//   1..depth "blocks.i"     norm1.{weight,bias} [C], attn.qkv.weight [3C, C], attn.qkv.bias [3C],
//                           attn.proj.weight [C, C], attn.proj.bias [C], norm2.{weight,bias} [C],
//                           mlp.fc1.weight [M, C], mlp.fc1.bias [M], mlp.fc2.weight [C, M], mlp.fc2.bias [C]
//   last     "head"         norm.{weight,bias} [C], head.weight [K, C], head.bias [K]
// Matrices, cls_token and pos_embed start N(0, initializer_range) (timm:
// trunc_normal std 0.02; cls_token std 1e-6), biases zero, LayerNorm weights
// one; norms, biases, cls_token and pos_embed are excluded from weight decay
// (timm's no_weight_decay + 1-d rule).
//
// Data: batch.inputs f32 [B, H, W, Cin] (NHWC, already normalised),
// batch.targets i32 [B] class labels (-100 = padding). Activations are rows
// [B*T, C] in ctx.compute_dtype, token 0 of each image the class token.
#pragma once

#include <memory>
#include <vector>

#include "plugin/model.hpp"
#include "vit_config.hpp"

namespace ftrain::vit {

class VitModel final : public Model {
 public:
  explicit VitModel(const VitConfig& config);
  ~VitModel() override;

  std::string architecture() const override { return "vit"; }
  std::map<std::string, std::string> config() const override { return config_.to_map(); }
  DataKind data_kind() const override { return DataKind::images; }
  std::vector<std::int64_t> image_shape() const override {
    return {config_.image_size, config_.image_size, config_.num_channels};
  }
  int num_units() const override { return static_cast<int>(units_.size()); }
  Unit& unit(int index) override;
  // Per image (sequence_length is ignored):
  //   6 * (depth * (4 C^2 + 2 C M) * T  +  C * Cin P^2 * N  +  K * C)
  //   + 12 * depth * C * T^2
  // i.e. every matmul weight times the rows it multiplies (the patch
  // projection sees N rows, the head only the class token), plus QK^T and PV
  // over the full T x T square (PaLM's convention, as the llama plugin).
  double training_flops_per_sample(std::int64_t sequence_length) const override;
  std::int64_t output_size() const override { return config_.num_classes; }

  const VitConfig& vit_config() const { return config_; }

 private:
  VitConfig config_;
  std::vector<std::unique_ptr<Unit>> units_;
};

}  // namespace ftrain::vit
