// The linear layer of every precision, shared by every model plugin (public
// SDK header): ops::linear_forward / ops::linear_backward in the compute
// dtype, or, under `precision fp8`, the FP8 GEMMs with delayed scaling
// (fp8/scaled_linear.hpp) on a per-layer state this class owns.
//
// A unit keeps one LinearLayers for its linears and calls forward/backward
// with the layer's index; a layer split into several GEMMs (ViT's qkv into
// q, k, v) uses one index for all of them: one state, one scale update.
// A unit hands its linear weights to LinearLayers untouched (views of them
// are fine): under FP8 all-gather a weight arrives already cast with this
// layer's scale (fsdp/fp8_all_gather.hpp) and is used as it is.
//
// Sits above the plugin SDK's model.hpp (it takes the StepContext the
// engine gives a unit) and is installed with the SDK.
#pragma once

#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "fp8/recipe.hpp"
#include "plugin/model.hpp"

namespace ftrain::layers {

// The linear layers of one unit.
class LinearLayers {
 public:
  // names[i]: the checkpoint name of layer i, its Hugging Face / timm prefix
  // ("model.layers.0.self_attn.q_proj"). An empty name marks an index that is
  // not a linear layer, so a unit may index layers by its own parameter enum.
  explicit LinearLayers(std::vector<std::string> names);

  // ops::linear_forward / ops::linear_backward, or their FP8 versions when
  // ctx.fp8 (the layer's state is created at its first FP8 use).
  void forward(const StepContext& ctx, int layer, const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y);
  void backward(const StepContext& ctx, int layer, const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx,
                Tensor& dw, Tensor* db);

  // Fused FP8 producers (precision fp8 only): input_cast is the descriptor
  // layer `layer`'s forward would cast its input [shape] into (its input
  // scale; its amax slot when ctx.training); a fused op fills it (several
  // layers reading one activation each get their own: q, k, v), then
  // forward_cast runs the layer on it without casting the input again.
  Fp8Tensor input_cast(const StepContext& ctx, int layer, const Shape& shape);
  void forward_cast(const StepContext& ctx, int layer, const Fp8Tensor& xq, const Tensor& w, const Tensor* b,
                    Tensor& y);

  // Every layer's state and checkpoint name, in index order (Unit::fp8_states).
  // Created on the host when asked for before the first FP8 step (a resume
  // loads into them); the first step moves them to the training device.
  std::vector<Fp8StateRef> states(const fp8::Recipe& recipe);

 private:
  fp8::LinearState& state(const StepContext& ctx, int layer);
  void create(const fp8::Recipe& recipe, Device device);

  std::vector<std::string> names_;
  std::vector<fp8::LinearState> states_;  // empty until the first FP8 use; one per index
};

}  // namespace ftrain::layers
