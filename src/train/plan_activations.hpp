// An estimate of one rank's activation memory, from the model's shapes (its
// config: hidden size, layers, heads, sequence length), for `ftrain --check`
// on a machine that cannot run the model. The numbers are a plan: the run
// header's memory lines are the measurement.
//
// Counted, per block and sample, for a Llama decoder (T = seq_len tokens):
// the block's input and the two norms' outputs (3 x T x hidden), q, k and v
// (T x (q + 2 kv)), the attention output (T x q), the MLP's gate, up,
// silu(gate) and their product (4 x T x intermediate), in the compute dtype
// (f32 for precision fp32, else bf16), plus the attention's softmax
// statistics (f32, T x heads). Attention is taken as fused: no T x T score
// matrix is kept. For a ViT block (T = patches + 1): the two norms' inputs
// and outputs, q, k, v, the attention output (8 x T x embed) and the MLP's
// two hidden tensors (2 x T x mlp_dim). On top, once: the cross entropy's
// f32 logits and their gradient for one vocabulary chunk (T x vocab_chunk;
// Llama only). With activation checkpointing a checkpointed block keeps
// only its input (T x hidden) and one block's full set is live during its
// recomputation. Under `parallel tensor T context C` (Llama) one rank
// holds seq_len / C tokens and 1/T of every block term (tensor + sequence
// parallelism: Korthikanti et al. 2022), the head's logits chunk is / T
// (a vocab_chunk of the whole vocabulary split over the T ranks), and context parallelism adds the 2 K/V blocks of the ring in
// flight (2 x tokens x 2 kv / T). (share/bench/llama_bench_plan.py counts the same block
// tensors; scripts_llama_bench_plan holds the two together.) Not counted: temporaries inside kernels and the
// allocator's fragmentation (the fit report leaves room for them).
#pragma once

#include <map>
#include <string>

#include "deck/config.hpp"
#include "plugin/model.hpp"

namespace ftrain {

struct ActivationEstimate {
  bool known = false;                     // false: no shape rule for this architecture
  double stored_bytes = 0;                // per micro batch, every block's activations kept
  double checkpointed_bytes = 0;          // per micro batch, every block checkpointed
  double planned_bytes = 0;               // per micro batch, as the deck sets activation_checkpointing
  int element_bytes = 2;                  // the compute dtype's size
};

ActivationEstimate estimate_activations(const Model& model, const RunConfig& config);

// How many of `layers` blocks activation_checkpointing recomputes.
double checkpointed_layers(const RunConfig& config, double layers);

// A model config value (Model::config()) as a number; 0 when absent or not a
// number (the estimates then say they do not know).
double config_number(const std::map<std::string, std::string>& config, const std::string& key);

// The plan's "activations" line (ends in a newline; "" when unknown).
std::string format_activation_estimate(const ActivationEstimate& estimate, const RunConfig& config);

}  // namespace ftrain
