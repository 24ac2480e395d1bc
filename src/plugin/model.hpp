// The model SDK: what a plugin implements and what the engine drives.
//
// A model is a sequence of units. A unit is the FSDP wrapping unit (one
// decoder/encoder block; embedding and head are units too). It declares its
// parameters (Hugging Face names and shapes, init) and implements forward and
// backward over its *gathered* parameters. The engine owns everything else:
// flat parameter buffers, sharding, gathering and freeing, activation
// checkpointing (it may drop a UnitCache and call forward again before
// backward), gradient reduction, the optimizer.
//
// Data flow through units:
//   unit 0 (embedding)   forward(x = undefined) reads batch.inputs, returns h
//   unit i (block)       forward(x = h) returns h'
//   last unit (head)     forward(x = h) returns f32[1]: the SUM of per-token
//                        (or per-sample) losses over non-ignored targets,
//                        left on the device (ops::sum)
// Backward mirrors it: the last unit receives dy = f32[1] on the device
// holding the loss scale (1 / number of target tokens in the global batch;
// pass it to ops::cross_entropy_backward as is) and returns dx;
// unit 0 returns an undefined tensor. Parameter gradients accumulate (+=)
// into `grads` (f32, same shapes as params); see kernels/ops.hpp.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "core/tensor.hpp"
#include "data/batch.hpp"
#include "plugin/parallel_group.hpp"
#include "runtime/execution_context.hpp"

namespace ftrain {

namespace fp8 {
struct Recipe;       // fp8/recipe.hpp
struct LinearState;  // fp8/recipe.hpp
}
namespace lora {
struct UnitAdapters;  // layers/lora.hpp
}

// uniform: U(-init_bound, init_bound) (LoRA's A, PEFT's kaiming-uniform).
enum class InitKind : std::uint8_t { normal, zeros, ones, uniform };

struct ParamSpec {
  std::string name;  // Hugging Face name, e.g. "model.layers.0.self_attn.q_proj.weight"
  Shape shape;
  InitKind init = InitKind::normal;
  float init_std = 0.02f;     // for InitKind::normal
  float init_bound = 0.0f;    // for InitKind::uniform
  bool weight_decay = true;   // false for norms and biases
  // A linear layer's weight [out, in] (used as x W^T) that LoRA may adapt
  // (layers/lora.hpp): the plugin routes it through lora::add_forward /
  // add_backward with this spec's index as the slot. Never the output head.
  bool adaptable = false;
  // Non-empty: this entry is not a parameter of this unit but an alias of the
  // named parameter owned by an earlier unit (tied embeddings). The engine
  // passes that tensor in this slot and accumulates its gradient there.
  std::string tied_to;
  // Tensor parallelism (Model::split_for_tensor_parallel): -1, this tensor is
  // whole on every tensor rank (replicated: norm weights); else `shape` is
  // this tensor rank's slice of the Hugging Face tensor `full_shape`, split
  // evenly along dimension tensor_split_dim in tensor-rank order (rank r holds
  // indices [r * shape[d], (r + 1) * shape[d]) of it). Initialisation,
  // gradient norms and checkpoints use it to address the full tensor.
  int tensor_split_dim = -1;
  Shape full_shape;
};

// Per-step knobs the engine passes to units.
struct StepContext {
  // Where ops run (kernels/ops.hpp: every op takes it). Set by the engine;
  // ops are enqueued on its compute stream, so a unit reads tensor data on
  // the host only after execution().synchronize().
  ExecutionContext* execution_context = &host_context();
  ExecutionContext& execution() const {
    FT_CHECK(execution_context != nullptr) << "StepContext without an execution context";
    return *execution_context;
  }
  Device device = Device::host;
  DType compute_dtype = DType::f32;   // dtype of activations and gathered params
  std::int64_t vocab_chunk = 4096;    // cross-entropy chunk over the vocabulary
  bool training = true;               // false for eval: units may skip saving for backward
  // precision fp8: the linear layers inside the blocks run FP8 GEMMs with the
  // delayed-scaling recipe (fp8/recipe.hpp; the units keep the per-layer
  // scaling state in layers::LinearLayers, layers/linear.hpp); embeddings, norms,
  // attention and the head stay in compute_dtype. fp8_recipe is non-null whenever fp8 is true.
  bool fp8 = false;
  const fp8::Recipe* fp8_recipe = nullptr;
  // LoRA (layers/lora.hpp): the adapters of the unit being computed, set by
  // the engine per unit; null when the unit has none. Plugins pass it on to
  // lora::add_forward / add_backward and never read it themselves.
  const lora::UnitAdapters* lora = nullptr;
  // parallel tensor T context C (plugin/parallel_group.hpp): this rank's
  // tensor and context groups; null (or null groups) when both are 1.
  const ModelParallel* parallel = nullptr;
};

// Whatever a unit's forward keeps for its backward. The engine may clear() it
// (activation checkpointing) and call forward again to refill it.
struct UnitCache {
  std::vector<Tensor> saved;
  void clear() { saved.clear(); }
};

// One FP8 linear's delayed-scaling state, owned by its unit, and the name it
// is checkpointed under (the linear's Hugging Face / timm prefix, e.g.
// "model.layers.0.self_attn.q_proj").
struct Fp8StateRef {
  std::string name;
  fp8::LinearState* state = nullptr;
};

class Unit {
 public:
  virtual ~Unit() = default;
  virtual std::string name() const = 0;  // "model.embed_tokens", "model.layers.3", "lm_head"
  virtual std::vector<ParamSpec> params() const = 0;
  virtual Tensor forward(const StepContext& ctx, const std::vector<Tensor>& params, const Batch& batch,
                         const Tensor& x, UnitCache& cache) = 0;
  virtual Tensor backward(const StepContext& ctx, const std::vector<Tensor>& params, std::vector<Tensor>& grads,
                          const Batch& batch, const Tensor& x, const Tensor& dy, UnitCache& cache) = 0;
  // precision fp8: the state of every FP8 linear of this unit, created on
  // first use (a unit keeping an layers::LinearLayers returns its states(),
  // layers/linear.hpp). Units only RECORD amaxes (forward: input, weight;
  // backward: output gradient; the casts do it on the device); the engine
  // reduces the current amaxes over all ranks and updates the scales after
  // each forward + backward, so every rank uses the scales a single rank
  // would have (Transformer Engine's amax reduction over the data-parallel
  // group), and checkpoints save the states.
  virtual std::vector<Fp8StateRef> fp8_states(const fp8::Recipe& recipe) {
    (void)recipe;
    return {};
  }
};

enum class DataKind : std::uint8_t { tokens, images };

class Model {
 public:
  virtual ~Model() = default;
  virtual std::string architecture() const = 0;  // "llama"
  // Resolved hyperparameters in Hugging Face config.json naming, for the run
  // log, checkpoints attributes and --check.
  virtual std::map<std::string, std::string> config() const = 0;
  virtual DataKind data_kind() const = 0;
  virtual int num_units() const = 0;
  virtual Unit& unit(int index) = 0;
  // Training FLOPs (forward + backward) for one sample of `sequence_length`
  // tokens (ignored for images), used for MFU: 6 * params_in_matmuls * tokens
  // plus attention's score and value matmuls.
  virtual double training_flops_per_sample(std::int64_t sequence_length) const = 0;
  // The attention part of that count for `query_key_pairs` (query, key)
  // pairs, counted as training_flops_per_sample counts a sample's T * T (the
  // PaLM convention: a causal window counts in full). A document mask leaves
  // a packed window the sum over its documents of length^2 (train/
  // attention_flops.hpp), and MFU counts only those. 0 for a model whose
  // attention the mask never changes.
  virtual double attention_training_flops(double query_key_pairs) const {
    (void)query_key_pairs;
    return 0;
  }
  // Vocabulary size (language) or number of classes (vision).
  virtual std::int64_t output_size() const = 0;
  // Image models: one input image as {height, width, channels}, the layout of
  // an image batch. The trainer sizes image sources and the memory plan by it,
  // so it needs no model's config keys. Empty for token models.
  virtual std::vector<std::int64_t> image_shape() const { return {}; }
  // parallel tensor T: called once, before params() is read, with T > 1.
  // The model then declares each tensor rank's slices (ParamSpec::
  // tensor_split_dim) and its units talk over StepContext::parallel->tensor.
  // A model without tensor parallelism refuses; the message should name
  // what it would need.
  virtual void split_for_tensor_parallel(int tensor_size) {
    FT_USER_ERROR() << "model '" << architecture() << "' has no tensor parallelism: parallel tensor " << tensor_size
                    << " needs a model that splits its layers (llama does); use parallel tensor 1";
  }
  // parallel context C: called once, before training, with C > 1. Each
  // batch then holds this rank's 2 chunks of every sample's window
  // (Batch::sequence_index says which tokens), and the model's attention
  // must see the whole window: layers/context_parallel_attention.hpp's
  // ring over StepContext::parallel->context. Token-wise layers need no
  // change. A model whose attention cannot do that refuses (the default).
  virtual void use_context_parallel(int context_size) {
    FT_USER_ERROR() << "model '" << architecture() << "' has no context parallelism: parallel context "
                    << context_size << " needs a model whose attention runs as a ring over the context group "
                    << "(llama's does); use parallel context 1";
  }
};

}  // namespace ftrain
