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

#include <map>
#include <sstream>

#include "base/error.hpp"
#include "comm/mpi_communicator.hpp"
#include "fsdp/engine.hpp"
#include "fsdp/parameter_init.hpp"
#include "plugin/loader.hpp"
#include "model_parallel_training.hpp"

using namespace ftrain;
using namespace ftrain::model_parallel_training;

namespace {

constexpr std::int64_t kSeq = 8;
constexpr int kSteps = 3;

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
  return train_steps(engine, world, kSteps, kSeq);
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
  expect_same_training(tp, fsdp, bf16 ? Tolerances{2e-3, 2e-2, 0.15} : Tolerances{2e-6, 1e-5, 1e-3}, "tensor 2");
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
