// FsdpEngine::first_non_finite: the stop on divergence names the tensor
// where a NaN appeared first in backward order (the last unit holding one,
// its first such tensor), whichever rank holds it, and every rank gets the
// same answer (the trainer branches on it collectively).
#include <gtest/gtest.h>
#include <mpi.h>

#include <limits>
#include <string>

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

INSTANTIATE_TEST_SUITE_P(States, NonFinite,
                         ::testing::Values(FsdpEngine::ShardState::gradient, FsdpEngine::ShardState::master),
                         [](const auto& info) {
                           return info.param == FsdpEngine::ShardState::gradient ? std::string("gradient")
                                                                                 : std::string("master");
                         });

}  // namespace
