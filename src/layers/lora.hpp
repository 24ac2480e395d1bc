// LoRA (low-rank adaptation, Hu et al. 2021; Hugging Face PEFT's LoraConfig)
// as one mechanism for every model: the engine owns the adapters, a plugin
// only routes its linear layers through lora::linear_forward/_backward.
//
// An adapted linear y = x W^T + b becomes
//   y = x W^T + b + scale * (drop(x) A^T) B^T,   A [r, in], B [out, r]
// with scale = alpha / r (PEFT) or alpha / sqrt(r) (rslora on). W and b are
// frozen: the engine hands the plugin undefined gradient tensors for them and
// the ops skip those gradients (kernels/op_list.hpp), so only dx, dA and dB
// are computed. The adapter part is composed of existing ops (two thin
// linears, a dropout, a scaled add), so it runs on whichever backend the
// tensors live on.
//
// Dropout (PEFT's lora_dropout, applied to the LoRA input only) draws its
// mask from the run's seed with a counter-based RNG keyed by (module name,
// global sample, row within the sample, column): the same mask whatever the
// number of ranks, the micro-batch split or activation-checkpointing
// recompute, and backward regenerates it instead of keeping it.
//
// Target matching is PEFT's: a module (the weight's name without ".weight")
// is targeted when its name equals a target or ends with "." + target;
// `all-linear` targets every linear a plugin marks adaptable (the block
// linears; never the output head, as PEFT excludes it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.hpp"

namespace ftrain {

struct StepContext;  // plugin/model.hpp

namespace lora {

enum class AInit : std::uint8_t {
  kaiming,   // PEFT's default (init_lora_weights=True): kaiming_uniform(a=sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in))
  gaussian,  // init_lora_weights="gaussian": normal(0, 1/r)
};

struct Config {
  bool enabled = false;
  int rank = 8;             // PEFT r
  double alpha = 8.0;       // PEFT lora_alpha
  double dropout = 0.0;     // PEFT lora_dropout
  std::vector<std::string> targets = {"q_proj", "v_proj"};  // PEFT's default for Llama
  bool all_linear = false;  // target_modules="all-linear"
  AInit init = AInit::kaiming;
  bool rslora = false;      // use_rslora: scale alpha / sqrt(r)

  double scale() const;
  // module: a linear's name, e.g. "model.layers.0.self_attn.q_proj".
  bool targets_module(const std::string& module) const;
  // "q_proj,v_proj" or "all-linear".
  std::string targets_text() const;
};

// The module name of a weight ("...q_proj.weight" -> "...q_proj"), "" when
// the name does not end in ".weight".
std::string module_of_weight(const std::string& weight_name);

// Names of the adapter tensors of a module in ftrain (and Hugging Face PEFT
// state-dict naming without the "base_model.model." prefix and without the
// adapter name, as PEFT saves them): "<module>.lora_A.weight".
std::string lora_a_name(const std::string& module);
std::string lora_b_name(const std::string& module);

// What the engine gives a unit for one adapted linear while it computes.
struct AdaptedLinear {
  std::string module;          // "model.layers.0.self_attn.q_proj"
  std::uint64_t dropout_stream = 0;  // rng stream of this module's dropout mask
  Tensor a, b;                 // gathered lora_A [r, in], lora_B [out, r] (compute dtype)
  Tensor grad_a, grad_b;       // f32, accumulate (+=); undefined in evaluation
};

// Per unit: the adapted linears by parameter slot (the index of the base
// weight in Unit::params()), plus the step's knobs.
struct UnitAdapters {
  std::vector<AdaptedLinear*> by_slot;  // nullptr: slot not adapted
  float scale = 1.0f;
  float dropout = 0.0f;
  std::uint64_t seed = 0;
  // Global index (in the run's sample order) of the micro-batch's first
  // sample and the number of samples in it: rows of x are sample-major, so
  // row i of x is row (i % rows_per_sample) of sample first_sample + i / rows_per_sample.
  std::int64_t first_sample = 0;
  std::int64_t samples = 1;

  const AdaptedLinear* at(int slot) const {
    return slot >= 0 && static_cast<std::size_t>(slot) < by_slot.size() ? by_slot[static_cast<std::size_t>(slot)]
                                                                         : nullptr;
  }
};

// The LoRA part of an adapted linear (call after the base linear):
//   y += scale * (drop(x) A^T) B^T
// Nothing happens when slot `slot` of the unit is not adapted.
// out_first: y holds output features [out_first, out_first + width of y) of
// the adapted linear only (a fused weight computed in parts, e.g. timm's
// qkv as q, k, v): the rows of B used are those; the parts' calls add up to
// one call over the whole output.
void add_forward(const StepContext& ctx, int slot, const Tensor& x, Tensor& y, std::int64_t out_first = 0);
// Its backward (call after the base linear's backward, which wrote dx):
//   dx += drop^T(scale * dy B A),  dA += scale * (dy B)^T drop(x),  dB += scale * dy^T (drop(x) A^T)
// dx may be null (no input gradient wanted).
// (dx += here, so a dx the base linear wrote (=) ends up the sum of both.)
void add_backward(const StepContext& ctx, int slot, const Tensor& x, const Tensor& dy, Tensor* dx,
                  std::int64_t out_first = 0);

// Whether slot `slot` of the unit computing under ctx is adapted.
bool adapted(const StepContext& ctx, int slot);

// The dropout mask value of element (row, column) of a LoRA input: 0 or
// 1 / (1 - p). Exposed for tests.
float dropout_factor(std::uint64_t seed, std::uint64_t stream, std::int64_t global_row, std::int64_t column,
                     std::int64_t width, float p);

}  // namespace lora
}  // namespace ftrain
