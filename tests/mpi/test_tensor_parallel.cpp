// parallel tensor 2 x FSDP 2 against pure FSDP on the same 4 ranks: the
// losses of several steps, the clipped gradient norms and every updated
// weight, gathered to full Hugging Face tensors, equal within rounding.
//
// The global batch is the same 4 sequences per step: pure FSDP reads one per
// rank; at tensor 2 the two ranks of a data index read the same two. Covered:
// GQA (4 heads, 2 KV heads: one KV head per tensor rank), tied and untied
// embeddings, activation checkpointing, f32 and bf16, full_shard and
// hybrid_shard (shard groups inside each tensor rank's FSDP group), and
// asynchronous host streams (the units' collectives stream-ordered).
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "base/error.hpp"
#include "comm/mpi_communicator.hpp"
#include "fsdp/engine.hpp"
#include "kernels/op_list.hpp"
#include "plugin/loader.hpp"

using namespace ftrain;

namespace {

constexpr std::int64_t kGlobalBatch = 4, kSeq = 8, kVocab = 40;
constexpr int kSteps = 3;

ModelHandle gqa_llama(bool tied) {
  return PluginLoader().create_model("llama", "tiny",
                                     {{"hidden_size", "32"}, {"intermediate_size", "48"}, {"num_hidden_layers", "2"},
                                      {"num_attention_heads", "4"}, {"num_key_value_heads", "2"},
                                      {"vocab_size", std::to_string(kVocab)},
                                      {"tie_word_embeddings", tied ? "true" : "false"}});
}

int32_t token(int step, std::int64_t sample, std::int64_t t) {
  return static_cast<std::int32_t>((step * 31 + sample * 17 + t * t * 7 + t * 3) % kVocab);
}

// Samples [first, first + count) of step `step`'s global batch; every fifth target ignored.
Batch batch_of(int step, std::int64_t first, std::int64_t count) {
  Batch b;
  b.inputs = Tensor::empty({count, kSeq}, DType::i32);
  b.targets = Tensor::empty({count, kSeq}, DType::i32);
  for (std::int64_t s = 0; s < count; ++s)
    for (std::int64_t t = 0; t < kSeq; ++t) {
      b.inputs.data_as<std::int32_t>()[s * kSeq + t] = token(step, first + s, t);
      const bool ignored = ((first + s) * kSeq + t) % 5 == 4;
      b.targets.data_as<std::int32_t>()[s * kSeq + t] = ignored ? kIgnoreIndex : token(step, first + s, t + 1);
    }
  return b;
}

std::int64_t global_targets() {
  std::int64_t n = 0;
  for (std::int64_t i = 0; i < kGlobalBatch * kSeq; ++i) n += i % 5 == 4 ? 0 : 1;
  return n;
}

struct TrainResult {
  std::vector<double> losses, norms;
  std::map<std::string, std::vector<float>> initial, weights;  // full HF tensors before and after training
};

// Every parameter as its full Hugging Face tensor on every rank: each FSDP
// group's first rank contributes its tensor rank's slices (the others and the
// whole tensors' copies on tensor ranks > 0 add zeros; x + 0 is exact).
std::map<std::string, std::vector<float>> full_tensors(FsdpEngine& engine, Communicator& world) {
  std::map<std::string, std::vector<float>> out;
  const bool first_of_fsdp_group = engine.grid().fsdp_rank(world.rank()) == 0;
  const int tensor_rank = engine.model_parallel().tensor_rank();
  for (const auto& flat : engine.units()) {
    Tensor gathered = Tensor::empty({flat->padded_numel()}, DType::f32);
    engine.shard_comm().all_gather(flat->master, gathered).wait();
    const float* v = gathered.data_as<float>();
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

struct TpCase {
  bool tied;
  DType dtype;
  int checkpoint_every;
  ShardingStrategy strategy;
  bool async_streams = false;  // the engine's and the tensor group's collectives on asynchronous host streams
  std::string describe() const {
    std::ostringstream s;
    s << (tied ? "tied" : "untied") << " " << dtype_name(dtype) << " checkpointing " << checkpoint_every << " "
      << sharding_strategy_name(strategy) << (async_streams ? " async" : "");
    return s.str();
  }
};

TrainResult train(const TpCase& setup, int tensor, Communicator& world) {
  auto model = gqa_llama(setup.tied);
  FsdpOptions o;
  o.strategy = setup.strategy;
  o.shard_group_size = setup.strategy == ShardingStrategy::hybrid_shard ? 4 / tensor / 2 : 0;
  o.param_dtype = setup.dtype;
  o.reduce_dtype = setup.dtype;
  o.checkpoint_every = setup.checkpoint_every;
  o.vocab_chunk = 8;  // several chunks per vocabulary slice
  o.tensor_parallel = tensor;
  if (setup.async_streams) o.host_streams = HostStreams::async;
  FsdpEngine engine(*model, world, o);
  engine.init_random(7);
  TrainResult run;
  run.initial = full_tensors(engine, world);
  const ProcessGrid& grid = engine.grid();
  const std::int64_t per_index = kGlobalBatch / grid.data_size();
  const std::int64_t first = grid.coordinates(world.rank()).data * per_index;
  const bool counts = engine.model_parallel().tensor_rank() == 0;
  AdamWHyper hyper;
  hyper.lr = 1e-2f;
  hyper.weight_decay = 0.1f;
  for (int step = 0; step < kSteps; ++step) {
    engine.zero_grad();
    engine.forward_backward(batch_of(step, first, per_index), 1.0f / static_cast<float>(global_targets()));
    const double loss = engine.take_train_loss();
    run.losses.push_back(world.all_reduce_sum(counts ? loss : 0.0) / static_cast<double>(global_targets()));
    engine.clip_and_step(hyper, /*clip_grad_norm=*/0.5, step + 1);
    run.norms.push_back(engine.read_step_health().grad_norm);
  }
  run.weights = full_tensors(engine, world);
  return run;
}

class TensorParallel : public ::testing::TestWithParam<TpCase> {};

TEST_P(TensorParallel, EqualsPureFsdpWithinRounding) {
  MpiCommunicator world(MPI_COMM_WORLD);
  if (world.size() != 4) GTEST_SKIP() << "tensor 2 x FSDP 2 against FSDP 4 needs 4 ranks";
  const TpCase setup = GetParam();
  SCOPED_TRACE(setup.describe());
  const TrainResult fsdp = train(setup, 1, world);
  const TrainResult tp = train(setup, 2, world);
  // f32: the sums of the row-parallel partials and of the sliced norm round
  // differently; bf16: activations and the partials are rounded to bf16.
  const bool bf16 = setup.dtype == DType::bf16;
  const double loss_tol = bf16 ? 2e-3 : 2e-6, update_tol = bf16 ? 0.15 : 1e-3;
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_NEAR(tp.losses[s], fsdp.losses[s], loss_tol * std::abs(fsdp.losses[s])) << "loss of step " << s + 1;
    EXPECT_NEAR(tp.norms[s], fsdp.norms[s], (bf16 ? 2e-2 : 1e-5) * fsdp.norms[s]) << "gradient norm of step " << s + 1;
  }
  ASSERT_EQ(tp.weights.size(), fsdp.weights.size());
  for (const auto& [name, expected] : fsdp.weights) {
    const auto it = tp.weights.find(name);
    ASSERT_NE(it, tp.weights.end()) << name << " missing at tensor 2";
    const std::vector<float>& got = it->second;
    const std::vector<float>& start = fsdp.initial.at(name);
    ASSERT_EQ(got.size(), expected.size()) << name;
    ASSERT_EQ(tp.initial.at(name), start) << name << ": both runs start from the same weights";
    // The training's change of the tensor, compared in L2: AdamW moves a
    // weight by about lr whatever its gradient's size, so under bf16 a few
    // near-zero gradients whose sign rounding flips differ by 2 lr; a tensor
    // updated from a wrong gradient differs by about its whole change.
    double diff = 0, change = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      diff += std::pow(static_cast<double>(got[i]) - expected[i], 2);
      change += std::pow(static_cast<double>(expected[i]) - start[i], 2);
    }
    ASSERT_GT(change, 0) << name << " was not updated";
    EXPECT_LT(std::sqrt(diff / change), update_tol)
        << name << ": the updates at tensor 2 differ from FSDP's by " << std::sqrt(diff / change) << " of their size";
  }
  EXPECT_GT(std::abs(fsdp.losses.front() - fsdp.losses.back()), 1e-4 * fsdp.losses.front())
      << "the steps changed the loss (the comparison is not of untrained models)";
}

INSTANTIATE_TEST_SUITE_P(Setups, TensorParallel,
                         ::testing::Values(TpCase{false, DType::f32, 0, ShardingStrategy::full_shard},
                                           TpCase{true, DType::f32, 0, ShardingStrategy::full_shard},
                                           TpCase{false, DType::f32, 1, ShardingStrategy::full_shard},
                                           TpCase{true, DType::bf16, 1, ShardingStrategy::full_shard},
                                           TpCase{false, DType::bf16, 0, ShardingStrategy::hybrid_shard},
                                           TpCase{true, DType::f32, 1, ShardingStrategy::full_shard, true}),
                         [](const ::testing::TestParamInfo<TpCase>& info) {
                           std::string n = info.param.describe();
                           for (char& ch : n)
                             if (ch == ' ') ch = '_';
                           return n;
                         });

// The same model at every T: init_random fills a slice with the full
// tensor's values there, and sync_module_states (each tensor rank's FSDP
// root reads, the others receive) gives the same bits.
TEST(TensorParallelInit, SlicesHoldTheFullTensorsValues) {
  MpiCommunicator world(MPI_COMM_WORLD);
  if (world.size() != 4) GTEST_SKIP() << "needs 4 ranks";
  std::map<int, std::map<std::string, std::vector<float>>> by_tensor;
  for (int tensor : {1, 2}) {
    auto model = gqa_llama(false);
    FsdpOptions o;
    o.tensor_parallel = tensor;
    FsdpEngine engine(*model, world, o);
    engine.init_random(99);
    by_tensor[tensor] = full_tensors(engine, world);
  }
  EXPECT_EQ(by_tensor[1], by_tensor[2]) << "init_random at tensor 2 is not the model of tensor 1";
  auto model = gqa_llama(false);
  FsdpOptions o;
  o.tensor_parallel = 2;
  FsdpEngine synced(*model, world, o);
  synced.init_from_root([&](const FlatEntry& e, std::int64_t first, std::int64_t count, float* dst) {
    ASSERT_EQ(synced.grid().fsdp_rank(world.rank()), 0) << "a rank other than its FSDP group's root read weights";
    random_init_values(99, e, first, count, dst);
  });
  EXPECT_EQ(full_tensors(synced, world), by_tensor[1]) << "sync_module_states at tensor 2";
}

TEST(TensorParallelRefusals, HeadsThatDoNotDivideAndModelsWithoutIt) {
  auto llama = PluginLoader().create_model("llama", "tiny", {{"num_attention_heads", "4"}, {"num_key_value_heads", "1"}});
  try {
    llama->split_for_tensor_parallel(2);
    FAIL() << "one KV head split over 2 tensor ranks was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("num_key_value_heads"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("1 is not a multiple of 2"), std::string::npos) << e.what();
  }
  auto vit = PluginLoader().create_model("vit", "", {});
  try {
    vit->split_for_tensor_parallel(2);
    FAIL() << "vit accepted parallel tensor 2";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("no tensor parallelism"), std::string::npos) << e.what();
  }
}

}  // namespace
