#include "train/plan_activations.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <sstream>

#include "train/plan.hpp"

namespace ftrain {

namespace {

struct BlockShape {
  double layers = 0;
  double tokens = 0;        // per sample
  double block_elements = 0;  // stored elements of one block, one sample (compute dtype)
  double block_f32 = 0;       // f32 elements of one block, one sample (softmax statistics)
  double input_elements = 0;  // one block's input, one sample
  double head_f32 = 0;        // once per sample: logits and their gradient for one chunk
  double ring_elements = 0;   // once per sample: context parallelism's 2 K/V blocks in flight
  double ring_f32 = 0;        // once per sample: the ring backward's f32 dQ and dK/dV buffers
};

BlockShape block_shape(const Model& model, const RunConfig& c) {
  const auto config = model.config();
  BlockShape b;
  if (model.architecture() == "llama") {
    // parallel tensor T context C: each context rank holds seq_len / C of
    // the tokens; tensor + sequence parallelism divides every per-block term
    // by T (heads and intermediate features by the layout, the norms and the
    // residual stream by the sequence split between the blocks).
    const double t = static_cast<double>(std::max<std::int64_t>(1, c.parallel.tensor));
    const double cp = static_cast<double>(std::max<std::int64_t>(1, c.parallel.context));
    const double h = config_number(config, "hidden_size"), f = config_number(config, "intermediate_size");
    const double heads = config_number(config, "num_attention_heads"), kv_heads = config_number(config, "num_key_value_heads");
    const double head_dim = config_number(config, "head_dim"), vocab = config_number(config, "vocab_size");
    const double q = heads * head_dim, kv = kv_heads * head_dim;
    b.layers = config_number(config, "num_hidden_layers");
    b.tokens = static_cast<double>(c.batch.seq_len) / cp;
    b.block_elements = b.tokens * (3 * h + q + 2 * kv + q + 4 * f) / t;
    b.block_f32 = b.tokens * heads / t;
    b.input_elements = b.tokens * h / t;
    // The vocabulary-parallel head: a vocab_chunk of the whole vocabulary is
    // split over the T ranks, each computing its chunk / T logits.
    b.head_f32 = 2 * b.tokens * std::min(vocab, static_cast<double>(std::max<std::int64_t>(1, c.vocab_chunk))) / t;
    // Ring attention, one layer's attention at a time: the K/V block being
    // received while the current one is used, and the backward's f32
    // buffers (dQ's accumulator; six key-sized buffers holding dK and dV:
    // this rank's share, the sums arriving and those leaving), which exceed
    // the forward's f32 output accumulator.
    if (cp > 1) {
      b.ring_elements = 2 * b.tokens * 2 * kv / t;
      b.ring_f32 = b.tokens * (q + 6 * kv) / t;
    }
  } else if (model.architecture() == "vit") {
    const double h = config_number(config, "embed_dim"), m = config_number(config, "mlp_dim"), heads = config_number(config, "num_heads");
    b.layers = config_number(config, "depth");
    b.tokens = config_number(config, "num_patches") + 1;  // + the class token
    b.block_elements = b.tokens * (8 * h + 2 * m);
    b.block_f32 = b.tokens * heads;
    b.input_elements = b.tokens * h;
  }
  return b;
}

}  // namespace

double config_number(const std::map<std::string, std::string>& config, const std::string& key) {
  const auto it = config.find(key);
  if (it == config.end()) return 0;
  try {
    return std::stod(it->second);
  } catch (const std::exception&) {
    return 0;
  }
}

double checkpointed_layers(const RunConfig& c, double layers) {
  switch (c.activation_checkpointing) {
    case deck::ActivationCheckpointing::off: return 0;
    case deck::ActivationCheckpointing::on: return layers;
    case deck::ActivationCheckpointing::every:
      return std::floor(layers / static_cast<double>(std::max<std::int64_t>(1, c.activation_checkpointing_every)));
  }
  return 0;
}

ActivationEstimate estimate_activations(const Model& model, const RunConfig& c) {
  ActivationEstimate e;
  const BlockShape b = block_shape(model, c);
  if (b.layers <= 0 || b.block_elements <= 0) return e;
  e.known = true;
  e.element_bytes = c.precision == deck::Precision::fp32 ? 4 : 2;
  const double micro = static_cast<double>(c.batch.micro_batch);
  const double block = b.block_elements * e.element_bytes + 4 * b.block_f32;
  const double input = b.input_elements * e.element_bytes;
  const double head = 4 * (b.head_f32 + b.ring_f32) + b.ring_elements * e.element_bytes;
  e.stored_bytes = micro * (b.layers * block + head);
  // Checkpointed: every block keeps its input; one block is recomputed at a time.
  e.checkpointed_bytes = micro * (b.layers * input + block + head);
  const double checkpointed = checkpointed_layers(c, b.layers);
  const double kept_layers = b.layers - checkpointed;
  e.planned_bytes = micro * (kept_layers * block + checkpointed * input + (checkpointed > 0 ? block : 0) + head);
  return e;
}

std::string format_activation_estimate(const ActivationEstimate& e, const RunConfig& c) {
  if (!e.known) return "";
  std::ostringstream s;
  s << "  activations       " << human_bytes(e.planned_bytes) << " per micro batch of " << c.batch.micro_batch
    << " (estimate, " << (e.element_bytes == 4 ? "f32" : "bf16") << "; "
    << human_bytes(e.stored_bytes) << " with every block's activations kept, " << human_bytes(e.checkpointed_bytes)
    << " with activation_checkpointing on)\n";
  return s.str();
}

}  // namespace ftrain
