// FSDP on asynchronous host streams (issue 19): the engine's ordering —
// all-gathers the compute stream waits on by event, prefetch, reduce-scatter
// overlapping the next backward unit, limit_all_gathers, stream-ordered
// buffer release — gives the synchronous stream's results bit for bit, for
// every strategy with prefetch on and off, limit_all_gathers 1,
// activation checkpointing and gradient accumulation (with and without
// no_sync). Runs at np 2 and 4; share/scripts/tsan-check.sh runs it under
// ThreadSanitizer, where a missing event wait is a reported race.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/mpi_collectives.hpp"
#include "comm/mpi_communicator.hpp"
#include "fsdp/engine.hpp"
#include "plugin/loader.hpp"

using namespace ftrain;

namespace {

ModelHandle tiny_llama(bool tied) {
  return PluginLoader().create_model("llama", "tiny",
                                     {{"hidden_size", "24"}, {"intermediate_size", "40"}, {"num_hidden_layers", "3"},
                                      {"vocab_size", "37"}, {"tie_word_embeddings", tied ? "true" : "false"}});
}

struct Case {
  std::string name;
  ShardingStrategy strategy = ShardingStrategy::full_shard;
  BackwardPrefetch backward = BackwardPrefetch::backward_pre;
  bool forward_prefetch = false;
  int limit_all_gathers = 2;
  int checkpoint_every = 0;
  int accumulate = 1;
  bool no_sync = false;
  bool tied = false;
  DType param_dtype = DType::f32;
  DType reduce_dtype = DType::f32;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// Everything a run produced, compared bit for bit.
struct Outcome {
  std::vector<double> losses;
  std::vector<double> norms;
  std::vector<std::vector<float>> masters;  // this rank's shards after the last step
  FsdpCounters counters;
  std::int64_t flats_with_shard_pieces = 0;  // trainable flats whose shard here holds a parameter element
  std::int64_t shard_pieces = 0;             // their pieces (tensors or parts of tensors) on this rank
};

FsdpOptions options_for(const Case& c, HostStreams streams) {
  FsdpOptions o;
  o.strategy = c.strategy;
  o.backward_prefetch = c.backward;
  o.forward_prefetch = c.forward_prefetch;
  o.limit_all_gathers = c.limit_all_gathers;
  o.checkpoint_every = c.checkpoint_every;
  o.no_sync = c.no_sync;
  o.shard_group_size = 2;  // hybrid_shard: pairs of ranks
  o.param_dtype = c.param_dtype;
  o.reduce_dtype = c.reduce_dtype;
  o.host_streams = streams;
  return o;
}

Batch make_batch(int rank, int micro, int step) {
  Batch b;
  b.inputs = Tensor::empty({2, 8}, DType::i32);
  b.targets = Tensor::empty({2, 8}, DType::i32);
  for (int i = 0; i < 16; ++i) {
    b.inputs.data_as<std::int32_t>()[i] = (i * 7 + rank * 3 + micro * 5 + step * 11) % 37;
    b.targets.data_as<std::int32_t>()[i] = (i * 5 + rank + micro * 2 + step) % 37;
  }
  return b;
}

Outcome train(const Case& c, HostStreams streams, int steps = 2) {
  MpiCommunicator world(MPI_COMM_WORLD);
  auto model = tiny_llama(c.tied);
  FsdpEngine engine(*model, world, options_for(c, streams));
  EXPECT_EQ(engine.execution().asynchronous(), streams == HostStreams::async);
  engine.init_random(17);
  AdamWHyper hyper;
  hyper.lr = 1e-2f;
  Outcome out;
  const float loss_scale = 1.0f / static_cast<float>(16 * c.accumulate * world.size());
  for (int step = 1; step <= steps; ++step) {
    engine.zero_grad();
    for (int a = 0; a < c.accumulate; ++a)
      engine.forward_backward(make_batch(world.rank(), a, step), loss_scale, /*sync_gradients=*/a + 1 == c.accumulate);
    out.losses.push_back(engine.take_train_loss());
    engine.clip_and_step(hyper, /*clip_grad_norm=*/1.0, step);
    out.norms.push_back(engine.read_step_health().grad_norm);
  }
  for (FlatParameter* f : engine.all_flats()) {
    out.masters.push_back(to_float_vector(f->master));
    std::int64_t pieces = 0;
    f->for_each_shard_piece([&](int, std::int64_t, std::int64_t, std::int64_t) { ++pieces; });
    if (!f->trainable() || pieces == 0) continue;
    ++out.flats_with_shard_pieces;
    out.shard_pieces += pieces;
  }
  out.counters = engine.counters();
  return out;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

class AsyncEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(AsyncEquivalence, AsyncStreamsGiveTheSyncResultsBitForBit) {
  const Case& c = GetParam();
  MpiCommunicator world(MPI_COMM_WORLD);
  if (c.strategy == ShardingStrategy::hybrid_shard && world.size() % 2 != 0) GTEST_SKIP() << "pairs of ranks";
  const Outcome sync = train(c, HostStreams::sync);
  const Outcome async = train(c, HostStreams::async);
  ASSERT_EQ(sync.losses.size(), async.losses.size());
  for (std::size_t i = 0; i < sync.losses.size(); ++i) {
    EXPECT_TRUE(std::isfinite(sync.losses[i]) && std::isfinite(sync.norms[i]));
    EXPECT_TRUE(same_bits(sync.losses[i], async.losses[i]))
        << c.name << " step " << i + 1 << ": loss " << sync.losses[i] << " sync vs " << async.losses[i] << " async";
    EXPECT_TRUE(same_bits(sync.norms[i], async.norms[i]))
        << c.name << " step " << i + 1 << ": grad_norm " << sync.norms[i] << " sync vs " << async.norms[i];
  }
  ASSERT_EQ(sync.masters.size(), async.masters.size());
  for (std::size_t f = 0; f < sync.masters.size(); ++f) {
    ASSERT_EQ(sync.masters[f].size(), async.masters[f].size());
    EXPECT_EQ(0, std::memcmp(sync.masters[f].data(), async.masters[f].data(), sync.masters[f].size() * sizeof(float)))
        << c.name << ": flat " << f << " master differs between sync and async streams";
  }
  // The feature acted the same way in both modes.
  EXPECT_EQ(sync.counters.recomputed_units, async.counters.recomputed_units);
  EXPECT_EQ(sync.counters.forward_prefetch_gathers, async.counters.forward_prefetch_gathers);
  EXPECT_EQ(sync.counters.backward_prefetch_gathers, async.counters.backward_prefetch_gathers);
  EXPECT_EQ(sync.counters.deferred_reductions, async.counters.deferred_reductions);
  if (c.checkpoint_every > 0) EXPECT_GT(async.counters.recomputed_units, 0);
  if (c.no_sync) EXPECT_GT(async.counters.deferred_reductions, 0);
  if (world.size() > 1 && c.strategy == ShardingStrategy::full_shard)
    EXPECT_LE(async.counters.gathered_in_flight_high_water, c.limit_all_gathers) << c.name;
}

std::vector<Case> cases() {
  std::vector<Case> v;
  {
    Case c;
    c.name = "full_shard_prefetch_accumulate2";
    c.forward_prefetch = true;
    c.accumulate = 2;
    v.push_back(c);
  }
  {
    Case c;
    c.name = "full_shard_no_prefetch_limit1_checkpointing";
    c.backward = BackwardPrefetch::none;
    c.limit_all_gathers = 1;
    c.checkpoint_every = 1;
    v.push_back(c);
  }
  {
    Case c;
    c.name = "full_shard_tied_forward_prefetch_limit1_bf16";
    c.tied = true;
    c.forward_prefetch = true;
    c.limit_all_gathers = 1;
    c.param_dtype = DType::bf16;
    c.reduce_dtype = DType::bf16;
    v.push_back(c);
  }
  {
    Case c;
    c.name = "shard_grad_op_backward_post_accumulate2_no_sync";
    c.strategy = ShardingStrategy::shard_grad_op;
    c.backward = BackwardPrefetch::backward_post;
    c.accumulate = 2;
    c.no_sync = true;
    v.push_back(c);
  }
  {
    Case c;
    c.name = "no_shard_accumulate2_no_sync_checkpointing";
    c.strategy = ShardingStrategy::no_shard;
    c.accumulate = 2;
    c.no_sync = true;
    c.checkpoint_every = 1;
    v.push_back(c);
  }
  {
    Case c;
    c.name = "hybrid_shard_prefetch_checkpoint_every2_accumulate2";
    c.strategy = ShardingStrategy::hybrid_shard;
    c.forward_prefetch = true;
    c.checkpoint_every = 2;
    c.accumulate = 2;
    v.push_back(c);
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Fsdp, AsyncEquivalence, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// limit_all_gathers on asynchronous streams bounds the all-gather outputs
// alive at once, not only the units the caller holds: with the compute
// stream held back (a slow first op), the caller would otherwise gather
// every unit ahead of the stream. It waits instead for the free event of
// the oldest released unit.
TEST(AsyncStreams, LimitAllGathersBoundsGatheredUnitsInFlight) {
  MpiCommunicator world(MPI_COMM_WORLD);
  if (world.size() == 1) GTEST_SKIP() << "one rank gathers nothing";
  auto model = tiny_llama(false);
  Case c;
  c.backward = BackwardPrefetch::backward_pre;
  c.forward_prefetch = true;
  c.limit_all_gathers = 1;
  FsdpEngine engine(*model, world, options_for(c, HostStreams::async));
  engine.init_random(3);
  engine.zero_grad();
  // The stream is busy for a while: everything the caller enqueues waits.
  engine.execution().compute().enqueue([] { std::this_thread::sleep_for(std::chrono::milliseconds(200)); });
  engine.forward_backward(make_batch(world.rank(), 0, 1), 1.0f / 32.0f);
  const FsdpCounters& k = engine.counters();
  EXPECT_LE(k.gathered_in_flight_high_water, 1);
  EXPECT_GT(k.rate_limited_gathers, 0) << "the caller never had to wait for a free event: the stream was not behind";
}

// no_sync reduces once per step and gives the per-micro-step reduction's
// result up to the order of the sums (it adds the micro-steps before the
// ranks instead of after).
TEST(AsyncStreams, NoSyncMatchesReducingEveryMicroStep) {
  for (ShardingStrategy strategy : {ShardingStrategy::no_shard, ShardingStrategy::shard_grad_op}) {
    Case c;
    c.name = sharding_strategy_name(strategy);
    c.strategy = strategy;
    c.accumulate = 3;
    const Outcome every = train(c, HostStreams::async);
    c.no_sync = true;
    const Outcome deferred = train(c, HostStreams::async);
    EXPECT_EQ(every.counters.deferred_reductions, 0);
    EXPECT_EQ(deferred.counters.deferred_reductions, 2 /*steps*/ * 2 /*micro-steps*/ * 5 /*units*/) << c.name;
    for (std::size_t i = 0; i < every.norms.size(); ++i) {
      EXPECT_NEAR(every.losses[i], deferred.losses[i], 1e-6 * std::abs(every.losses[i])) << c.name;
      EXPECT_NEAR(every.norms[i], deferred.norms[i], 1e-5 * std::abs(every.norms[i])) << c.name;
    }
    // Masters: within 1% of one AdamW step (lr 1e-2). The two runs sum the
    // micro-steps' gradients in another order; AdamW divides each gradient by
    // its own running RMS, so an element whose gradient is near its rounding
    // noise can move by a visible fraction of lr. A lost or doubled
    // micro-step moves most elements by a large fraction of lr and the
    // gradient norm by a third (checked above at 1e-5).
    std::size_t beyond_1e5 = 0, compared = 0;
    for (std::size_t f = 0; f < every.masters.size(); ++f)
      for (std::size_t i = 0; i < every.masters[f].size(); ++i) {
        ASSERT_NEAR(every.masters[f][i], deferred.masters[f][i], 1e-4) << c.name << " flat " << f << " element " << i;
        beyond_1e5 += std::abs(every.masters[f][i] - deferred.masters[f][i]) > 1e-5 ? 1 : 0;
        ++compared;
      }
    EXPECT_LT(beyond_1e5 * 1000, compared) << c.name << ": " << beyond_1e5 << " of " << compared
                                           << " masters differ by more than 1e-5";
  }
}

// The multi-tensor AdamW: one launch per trainable flat parameter and step
// (adamw_update_chunks over the flat's chunk table), not one per tensor nor
// per run of adjacent tensors with the same weight decay (a Llama block's 9
// tensors were 4 launches before; the results are those of the per-tensor
// loop bit for bit: the regression goldens). Going back to a launch per
// run or per piece makes the launch count exceed the flat count and fails.
TEST(AsyncStreams, AdamwCoversEachFlatInOneLaunch) {
  Case c;
  c.name = "full_shard";
  constexpr int kSteps = 2;
  const Outcome out = train(c, HostStreams::sync, kSteps);
  ASSERT_GT(out.flats_with_shard_pieces, 0);
  EXPECT_EQ(out.counters.optimizer_launches, kSteps * out.flats_with_shard_pieces)
      << out.counters.optimizer_launches << " launches for " << out.flats_with_shard_pieces << " flats in "
      << kSteps << " steps";
  EXPECT_EQ(out.counters.optimizer_tensors, kSteps * out.shard_pieces) << "every piece is still counted";
  EXPECT_GT(out.shard_pieces, out.flats_with_shard_pieces) << "the flats hold several tensors each";
}

// Passes every collective to the communicator it wraps and, for each
// all-gather, records whether send was recv's own block (the in-place
// layout, comm/mpi_collectives.hpp) or a buffer of its own. Sub-communicators
// split from it record into the same tally (the engine gathers over a split).
struct GatherTally {
  int in_place = 0, separate = 0;
};
class GatherRecorder final : public Communicator {
 public:
  GatherRecorder(std::unique_ptr<Communicator> owned, Communicator& inner, std::shared_ptr<GatherTally> tally)
      : owned_(std::move(owned)), inner_(inner), tally_(std::move(tally)) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string describe() const override { return "recording " + inner_.describe(); }
  Request all_gather(const Tensor& send, Tensor& recv, const Event& after) override {
    ++(mpi_collectives::gathers_in_place(send, recv, rank()) ? tally_->in_place : tally_->separate);
    return inner_.all_gather(send, recv, after);
  }
  Request all_gather_v(const Tensor& send, Tensor& recv, const std::vector<std::int64_t>& counts,
                       const Event& after) override {
    return inner_.all_gather_v(send, recv, counts, after);
  }
  Request reduce_scatter_sum(const Tensor& send, Tensor& recv, const Event& after) override {
    return inner_.reduce_scatter_sum(send, recv, after);
  }
  Request all_reduce_sum(Tensor& inout, const Event& after) override { return inner_.all_reduce_sum(inout, after); }
  Request all_reduce_max(Tensor& inout, const Event& after) override { return inner_.all_reduce_max(inout, after); }
  std::unique_ptr<Communicator> split(int color, int key) const override {
    auto sub = inner_.split(color, key);
    Communicator& ref = *sub;
    return std::make_unique<GatherRecorder>(std::move(sub), ref, tally_);
  }
  std::unique_ptr<Communicator> split_node() const override { return inner_.split_node(); }
  void barrier() override { inner_.barrier(); }
  void set_unit_label(const std::string& unit) override { inner_.set_unit_label(unit); }
  std::string unit_label() const override { return inner_.unit_label(); }
  CommTimes times() const override { return inner_.times(); }
  void reset_times() override { inner_.reset_times(); }
  double all_reduce_sum(double value) override { return inner_.all_reduce_sum(value); }
  double all_reduce_max(double value) override { return inner_.all_reduce_max(value); }
  std::int64_t all_reduce_sum(std::int64_t value) override { return inner_.all_reduce_sum(value); }

 private:
  std::unique_ptr<Communicator> owned_;
  Communicator& inner_;
  std::shared_ptr<GatherTally> tally_;
};

// With bf16 parameters the master -> bf16 cast writes this rank's block of
// the gathered buffer and the gather runs in place (no send buffer, no copy
// of the own block by MPI). An engine that casts into a buffer of its own
// again makes `separate` count and fails.
TEST(AsyncStreams, Bf16ParameterGathersRunInPlace) {
  MpiCommunicator mpi(MPI_COMM_WORLD);
  if (mpi.size() < 2) GTEST_SKIP() << "one rank gathers nothing";
  for (ShardingStrategy strategy : {ShardingStrategy::full_shard, ShardingStrategy::shard_grad_op}) {
    auto tally = std::make_shared<GatherTally>();
    GatherRecorder world(nullptr, mpi, tally);
    auto model = tiny_llama(false);
    Case c;
    c.strategy = strategy;
    c.param_dtype = DType::bf16;
    FsdpEngine engine(*model, world, options_for(c, HostStreams::async));
    engine.init_random(17);
    engine.zero_grad();
    engine.forward_backward(make_batch(world.rank(), 0, 1), 1.0f / 32.0f);
    EXPECT_TRUE(std::isfinite(engine.take_train_loss()));
    EXPECT_GT(tally->in_place, 0) << "no in-place gather under strategy " << static_cast<int>(strategy);
    EXPECT_EQ(tally->separate, 0) << tally->separate << " gathers sent a buffer of their own";
  }
}

TEST(AsyncStreams, NoSyncIsRefusedWhereItWouldUnshardTheGradient) {
  MpiCommunicator world(MPI_COMM_WORLD);
  auto model = tiny_llama(false);
  Case c;
  c.no_sync = true;
  EXPECT_THROW(FsdpEngine(*model, world, options_for(c, HostStreams::sync)), std::exception);
}

}  // namespace
