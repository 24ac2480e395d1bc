// FsdpEngine::first_non_finite: the stop on divergence names the tensor
// where a NaN appeared first in backward order (the last unit holding one,
// its first such tensor), whichever rank holds it, and every rank gets the
// same answer (the trainer branches on it collectively). And
// FsdpEngine::clip_and_step: a training step reads nothing on the host (the
// norm, the clip factor and the diverged flag stay on the device), gives the
// norm and update of the former host path bit for bit, and a diverged step
// (and every step after it) changes no master weight or moment.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "fsdp/engine.hpp"
#include "plugin/loader.hpp"

using namespace ftrain;

namespace {

ModelHandle tiny_llama() {
  return PluginLoader().create_model("llama", "tiny",
                                     {{"hidden_size", "24"}, {"intermediate_size", "40"}, {"num_hidden_layers", "2"},
                                      {"vocab_size", "37"}});
}

// Puts `value` into one element of entry `e` of unit `u` on whichever rank(s)
// hold a piece of it.
void poison(FsdpEngine& engine, FsdpEngine::ShardState which, std::size_t u, int e, float value) {
  FlatParameter& flat = *engine.units()[u];
  Tensor& state = which == FsdpEngine::ShardState::gradient ? flat.grad : flat.master;
  flat.for_each_shard_piece([&](int entry, std::int64_t, std::int64_t, std::int64_t at) {
    if (entry == e) state.data_as<float>()[at] = value;
  });
}

std::string expected_name(FsdpEngine& engine, std::size_t u, int e) {
  const FlatParameter& flat = *engine.units()[u];
  return "unit '" + flat.unit_name() + "', tensor '" + flat.entries()[static_cast<std::size_t>(e)].name + "'";
}

class NonFinite : public ::testing::TestWithParam<FsdpEngine::ShardState> {};

TEST_P(NonFinite, NamesTheLastUnitHoldingOneOnEveryRank) {
  MpiCommunicator world(MPI_COMM_WORLD);
  auto model = tiny_llama();
  FsdpEngine engine(*model, world, FsdpOptions{});
  engine.init_random(5);
  engine.zero_grad();
  const auto which = GetParam();
  EXPECT_EQ(engine.first_non_finite(which), "");

  ASSERT_GE(engine.units().size(), 3u);
  const std::size_t early = 0, late = engine.units().size() - 2;  // a block, before the head
  const int late_entries = static_cast<int>(engine.units()[late]->entries().size());
  ASSERT_GE(late_entries, 3);
  poison(engine, which, early, 0, std::numeric_limits<float>::infinity());
  poison(engine, which, late, late_entries - 1, std::numeric_limits<float>::quiet_NaN());
  poison(engine, which, late, 1, -std::numeric_limits<float>::infinity());
  const std::string got = engine.first_non_finite(which);
  EXPECT_EQ(got, expected_name(engine, late, 1));

  // Every rank reports the same answer.
  int length = static_cast<int>(got.size()), longest = 0, shortest = 0;
  MPI_Allreduce(&length, &longest, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(&length, &shortest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  EXPECT_EQ(longest, shortest);
}

Batch token_batch(int rank, int step) {
  Batch batch;
  batch.inputs = Tensor::empty({2, 8}, DType::i32);
  batch.targets = Tensor::empty({2, 8}, DType::i32);
  for (int i = 0; i < 16; ++i) {
    batch.inputs.data_as<std::int32_t>()[i] = (i * 7 + rank + 3 * step) % 37;
    batch.targets.data_as<std::int32_t>()[i] = (i * 5 + 3 + rank + step) % 37;
  }
  batch.first_sample = 2 * rank;
  return batch;
}

// Every trainable shard state (master, both moments) as bits.
std::vector<float> optimizer_state(FsdpEngine& engine) {
  std::vector<float> out;
  for (FlatParameter* f : engine.all_flats())
    for (const Tensor* t : {&f->master, &f->exp_avg, &f->exp_avg_sq}) {
      const auto v = to_float_vector(*t);
      out.insert(out.end(), v.begin(), v.end());
    }
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(ClipAndStep, ReadsNothingOnTheHostMatchesTheHostPathAndSkipsDivergedSteps) {
  MpiCommunicator world(MPI_COMM_WORLD);
  auto model_device = tiny_llama(), model_host = tiny_llama();
  FsdpEngine device(*model_device, world, FsdpOptions{});  // clip_and_step
  FsdpEngine host(*model_host, world, FsdpOptions{});      // the former path: grad_norm() read, then the update
  device.init_random(5);
  host.init_random(5);
  AdamWHyper h;
  h.lr = 1e-2f;
  h.weight_decay = 0.1f;
  const double clip = 0.5;  // below the norms here: every step is clipped
  for (int step = 1; step <= 3; ++step) {
    const std::int64_t reads_before = device.host_reads();
    device.zero_grad();
    device.forward_backward(token_batch(world.rank(), step), 1.0f / 32.0f);
    device.clip_and_step(h, clip, step);
    EXPECT_EQ(device.host_reads(), reads_before) << "step " << step << ": the step read a device value on the host";

    host.zero_grad();
    host.forward_backward(token_batch(world.rank(), step), 1.0f / 32.0f);
    const double norm = host.grad_norm();
    ASSERT_GT(norm, clip);
    host.optimizer_step(h, static_cast<float>(clip / (norm + 1e-6)));

    const FsdpEngine::StepHealth health = device.read_step_health();
    EXPECT_EQ(health.grad_norm, norm) << "step " << step << ": not the host path's norm bit for bit";
    EXPECT_EQ(health.first_diverged_step, 0);
    EXPECT_TRUE(same_bits(optimizer_state(device), optimizer_state(host))) << "step " << step;
  }
  EXPECT_EQ(device.take_train_loss(), host.take_train_loss());

  // Step 4 diverges (a NaN in one gradient after backward): nothing changes,
  // and step 5, finite again, is skipped too until the host has looked.
  const auto before = optimizer_state(device);
  const std::int64_t reads_before = device.host_reads();
  device.zero_grad();
  device.forward_backward(token_batch(world.rank(), 4), 1.0f / 32.0f);
  poison(device, FsdpEngine::ShardState::gradient, 1, 0, std::numeric_limits<float>::quiet_NaN());
  device.clip_and_step(h, clip, 4);
  device.zero_grad();
  device.forward_backward(token_batch(world.rank(), 5), 1.0f / 32.0f);
  device.clip_and_step(h, clip, 5);
  EXPECT_EQ(device.host_reads(), reads_before);
  const FsdpEngine::StepHealth health = device.read_step_health();
  EXPECT_EQ(health.first_diverged_step, 4) << "every rank flags the first diverged step";
  EXPECT_TRUE(std::isfinite(health.grad_norm)) << "step 5's own norm";
  EXPECT_TRUE(same_bits(optimizer_state(device), before)) << "a diverged step changed the optimizer state";
}

INSTANTIATE_TEST_SUITE_P(States, NonFinite,
                         ::testing::Values(FsdpEngine::ShardState::gradient, FsdpEngine::ShardState::master),
                         [](const auto& info) {
                           return info.param == FsdpEngine::ShardState::gradient ? std::string("gradient")
                                                                                 : std::string("master");
                         });

}  // namespace
