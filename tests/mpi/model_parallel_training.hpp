// A few steps of a tiny GQA Llama through the FSDP engine at any
// `parallel tensor T context C` grid of 4 ranks, gathered to full Hugging
// Face tensors, and the comparison of two such runs: what the tensor- and
// context-parallel engine tests share (test_tensor_parallel.cpp,
// test_context_parallel_training.cpp).
//
// The global batch is the same kGlobalBatch windows per step at every grid:
// each data index reads its share of them, and every rank of a data index
// (its tensor and context ranks) is given the same whole windows; the
// engine cuts them to a context rank's chunks.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "comm/communicator.hpp"
#include "fsdp/engine.hpp"
#include "fsdp/flat_parameter.hpp"
#include "kernels/op_list.hpp"
#include "plugin/loader.hpp"

namespace ftrain::model_parallel_training {

constexpr std::int64_t kGlobalBatch = 4, kVocab = 40;

inline ModelHandle gqa_llama(bool tied) {
  return PluginLoader().create_model("llama", "tiny",
                                     {{"hidden_size", "32"}, {"intermediate_size", "48"}, {"num_hidden_layers", "2"},
                                      {"num_attention_heads", "4"}, {"num_key_value_heads", "2"},
                                      {"vocab_size", std::to_string(kVocab)},
                                      {"tie_word_embeddings", tied ? "true" : "false"}});
}

inline std::int32_t token(int step, std::int64_t sample, std::int64_t t) {
  return static_cast<std::int32_t>((step * 31 + sample * 17 + t * t * 7 + t * 3) % kVocab);
}

// The packed documents of sample `sample`: lengths cycling through 5, 3, 7
// (shifted per sample), so boundaries fall inside and across the context
// chunks of any C.
inline std::int32_t document_of(std::int64_t sample, std::int64_t t) {
  static const int lengths[] = {5, 3, 7};
  std::int64_t start = 0;
  for (int d = 0;; ++d) {
    const std::int64_t end = start + lengths[(d + sample) % 3];
    if (t < end) return d;
    start = end;
  }
}

// Windows [first, first + count) of step `step`'s global batch, `seq`
// tokens each; every fifth target ignored. `packed`: document ids and RoPE
// positions restarting at each document, as `document_mask on` with
// `positions restart` makes them.
inline Batch batch_of(int step, std::int64_t first, std::int64_t count, std::int64_t seq, bool packed = false) {
  Batch b;
  b.inputs = Tensor::empty({count, seq}, DType::i32);
  b.targets = Tensor::empty({count, seq}, DType::i32);
  if (packed) {
    b.documents = Tensor::empty({count, seq}, DType::i32);
    b.positions = Tensor::empty({count, seq}, DType::i32);
  }
  for (std::int64_t s = 0; s < count; ++s) {
    std::int64_t document_start = 0;
    for (std::int64_t t = 0; t < seq; ++t) {
      const std::int64_t at = s * seq + t;
      b.inputs.data_as<std::int32_t>()[at] = token(step, first + s, t);
      const bool ignored = ((first + s) * seq + t) % 5 == 4;
      b.targets.data_as<std::int32_t>()[at] = ignored ? kIgnoreIndex : token(step, first + s, t + 1);
      if (!packed) continue;
      const std::int32_t document = document_of(first + s, t);
      if (t > 0 && document != document_of(first + s, t - 1)) document_start = t;
      b.documents.data_as<std::int32_t>()[at] = document;
      b.positions.data_as<std::int32_t>()[at] = static_cast<std::int32_t>(t - document_start);
    }
  }
  return b;
}

inline std::int64_t global_targets(std::int64_t seq) {
  std::int64_t n = 0;
  for (std::int64_t i = 0; i < kGlobalBatch * seq; ++i) n += i % 5 == 4 ? 0 : 1;
  return n;
}

struct TrainResult {
  std::vector<double> losses, norms;
  std::map<std::string, std::vector<float>> initial, weights;  // full HF tensors before and after training
  std::int64_t recomputed_units = 0;                           // summed over the ranks
};

// Every parameter as its full Hugging Face tensor on every rank: each FSDP
// group's first rank (one per tensor index; the group holds the data and
// context ranks of that index) contributes its tensor rank's slices (the
// others and the whole tensors' copies on tensor ranks > 0 add zeros; x + 0
// is exact). Masters on a device are gathered there and read through a
// host copy.
inline std::map<std::string, std::vector<float>> full_tensors(FsdpEngine& engine, Communicator& world) {
  std::map<std::string, std::vector<float>> out;
  const bool first_of_fsdp_group = engine.grid().fsdp_rank(world.rank()) == 0;
  const int tensor_rank = engine.model_parallel().tensor_rank();
  for (const auto& flat : engine.units()) {
    Tensor gathered = Tensor::empty({flat->padded_numel()}, DType::f32, flat->master.device());
    engine.shard_comm_for(flat->master).all_gather(flat->master, gathered).wait();
    const Tensor host = host_readable(gathered);
    const float* v = host.data_as<float>();
    for (const FlatEntry& e : flat->entries()) {
      const FlatEntry whole = full_entry(e);
      Tensor t = Tensor::zeros({whole.numel}, DType::f32);
      float* dst = t.data_as<float>();
      if (first_of_fsdp_group && (e.tensor_split() || tensor_rank == 0))
        for_each_full_run(e, 0, e.numel, [&](std::int64_t full_first, std::int64_t n, std::int64_t at) {
          std::copy(v + e.offset + at, v + e.offset + at + n, dst + full_first);
        });
      world.all_reduce_sum(t).wait();
      out[e.name] = to_float_vector(t);
    }
  }
  return out;
}

// `steps` steps of AdamW with gradient clipping on `engine` (initialised by
// the caller); the step's loss is the sum over the ranks that hold a part of
// it (tensor rank 0 of each context index: the tensor ranks share their
// tokens' loss, the context ranks each hold their own tokens'), divided by
// the global batch's targets.
inline TrainResult train_steps(FsdpEngine& engine, Communicator& world, int steps, std::int64_t seq,
                               bool packed = false) {
  TrainResult run;
  run.initial = full_tensors(engine, world);
  const ProcessGrid& grid = engine.grid();
  const std::int64_t per_index = kGlobalBatch / grid.data_size();
  const std::int64_t first = grid.coordinates(world.rank()).data * per_index;
  const bool holds_loss = engine.model_parallel().tensor_rank() == 0;
  const auto targets = static_cast<double>(global_targets(seq));
  AdamWHyper hyper;
  hyper.lr = 1e-2f;
  hyper.weight_decay = 0.1f;
  engine.reset_counters();
  for (int step = 0; step < steps; ++step) {
    engine.zero_grad();
    engine.forward_backward(batch_of(step, first, per_index, seq, packed), static_cast<float>(1.0 / targets));
    const double loss = engine.take_train_loss();
    run.losses.push_back(world.all_reduce_sum(holds_loss ? loss : 0.0) / targets);
    engine.clip_and_step(hyper, /*clip_grad_norm=*/0.5, step + 1);
    run.norms.push_back(engine.read_step_health().grad_norm);
  }
  run.recomputed_units = world.all_reduce_sum(engine.counters().recomputed_units);
  run.weights = full_tensors(engine, world);
  return run;
}

struct Tolerances {
  double loss, norm, update;  // relative; update: L2 of the weights' difference over their change
  // update, for the 1-D tensors of at most `hidden` elements (the norms'
  // weights): under bf16 one near-zero gradient whose sign rounding flips
  // moves one of their 32 elements by 2 lr, a third of the tensor's change.
  double small_update = update;
};
// The L2 norm of a - b over that of b - start: the first run's change of a
// tensor measured against the second's.
inline double relative_difference(const std::vector<float>& a, const std::vector<float>& b,
                                  const std::vector<float>& start) {
  double diff = 0, change = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff += std::pow(static_cast<double>(a[i]) - b[i], 2);
    change += std::pow(static_cast<double>(b[i]) - start[i], 2);
  }
  return change > 0 ? std::sqrt(diff / change) : std::numeric_limits<double>::infinity();
}

// `got` (a model-parallel run) against `want` (pure FSDP from the same
// weights): every step's loss and clipped gradient norm, and every weight's
// update.
inline void expect_same_training(const TrainResult& got, const TrainResult& want, const Tolerances& tol,
                                 const std::string& grid) {
  ASSERT_EQ(got.losses.size(), want.losses.size()) << grid;
  for (std::size_t s = 0; s < want.losses.size(); ++s) {
    EXPECT_NEAR(got.losses[s], want.losses[s], tol.loss * std::abs(want.losses[s]))
        << grid << ": loss of step " << s + 1;
    EXPECT_NEAR(got.norms[s], want.norms[s], tol.norm * want.norms[s]) << grid << ": gradient norm of step " << s + 1;
  }
  ASSERT_FALSE(want.weights.empty());
  ASSERT_EQ(got.weights.size(), want.weights.size()) << grid;
  for (const auto& [name, expected] : want.weights) {
    const auto it = got.weights.find(name);
    ASSERT_NE(it, got.weights.end()) << name << " missing at " << grid;
    const std::vector<float>& value = it->second;
    const std::vector<float>& start = want.initial.at(name);
    ASSERT_EQ(value.size(), expected.size()) << name << " at " << grid;
    ASSERT_EQ(got.initial.at(name), start) << name << ": both runs start from the same weights (" << grid << ")";
    // The training's change of the tensor, compared in L2: AdamW moves a
    // weight by about lr whatever its gradient's size, so under bf16 a few
    // near-zero gradients whose sign rounding flips differ by 2 lr; a tensor
    // updated from a wrong gradient differs by about its whole change.
    ASSERT_NE(expected, start) << name << " was not updated";
    const double difference = relative_difference(value, expected, start);
    EXPECT_LT(difference, expected.size() <= 64 ? tol.small_update : tol.update)
        << name << ": the updates at " << grid << " differ from FSDP's by " << difference << " of their size";
  }
  // Near its uniform start (ln 40) the loss moves by about 1e-4 of itself in
  // three steps; f32 rounding is 100 times smaller.
  EXPECT_GT(std::abs(want.losses.front() - want.losses.back()), 2e-5 * want.losses.front())
      << "the steps changed the loss (the comparison is not of untrained models)";
}

}  // namespace ftrain::model_parallel_training
