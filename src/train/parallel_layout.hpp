// What `parallel tensor T context C` does to a model's tensors, as pure
// functions of the model's architecture, its config map (Model::config())
// and a parameter's name and shape: which dimension of each weight the T
// tensor ranks split, and whether the model's shapes can take T and C at
// all. The planner (--check) and the training engine ask the same
// functions, so a layout --check accepts is the layout a run builds.
//
// Megatron's layout for a Llama decoder (Shoeybi et al. 2019; sequence
// parallelism from Korthikanti et al. 2022):
//   q_proj, k_proj, v_proj, gate_proj, up_proj  column-parallel: the output
//                                               features (dim 0) split
//   o_proj, down_proj                           row-parallel: the input
//                                               features (dim 1) split
//   embed_tokens, lm_head                       vocabulary-parallel: the
//                                               vocabulary rows (dim 0) split
//   norm weights                                replicated on every tensor rank
// Context parallelism splits no weight: each context rank holds 2 of the
// sequence's 2C chunks (causal load balancing), so seq_len must divide by 2C.
// Other architectures have no layout yet: T or C above 1 is refused for them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "deck/config.hpp"

namespace ftrain {

enum class TensorSplit {
  replicated,  // every tensor rank holds the whole tensor
  output,      // dim 0 split over T (column-parallel linears, vocabulary-parallel embedding and head)
  input,       // dim 1 split over T (row-parallel linears)
};

// How a parameter of `architecture` is split over the tensor ranks.
TensorSplit tensor_split(const std::string& architecture, const std::string& param_name,
                         const std::vector<std::int64_t>& shape);

// Elements of one tensor rank's slice of a parameter of `numel` elements.
std::int64_t tensor_slice_numel(TensorSplit split, std::int64_t numel, std::int64_t tensor);

// Each reason the model's shapes cannot take `tensor` and `context` (empty
// when they can), e.g. "num_key_value_heads 8 is not divisible by tensor 3
// (each tensor rank takes whole KV heads)".
std::vector<std::string> parallel_layout_problems(const std::string& architecture,
                                                  const std::map<std::string, std::string>& config,
                                                  std::int64_t tensor, std::int64_t context, std::int64_t seq_len);

// Throws one UserError naming the deck's parallel line (and the batch line
// for seq_len) with every problem above; returns when T = C = 1 or the
// layout is valid.
void check_parallel_layout(const std::string& architecture, const std::map<std::string, std::string>& config,
                           const RunConfig& config_of_run);

}  // namespace ftrain
