// When a deck looks written for GPUs while ftrain runs on the host backend
// (train/gpu_sized_deck.hpp): each rule on its own, and silence for a small deck.
#include <gtest/gtest.h>

#include "train/gpu_sized_deck.hpp"

using namespace ftrain;

namespace {
RunPlan plan_of(std::int64_t parameters, std::int64_t state_bytes_per_rank) {
  RunPlan p;
  p.parameters = parameters;
  p.state_bytes_per_rank = state_bytes_per_rank;
  p.world_size = 2;
  p.flops_per_step = 6.0 * static_cast<double>(parameters) * 2048;
  return p;
}
const double kGiB = 1024.0 * 1024 * 1024;
}  // namespace

TEST(GpuSizedDeck, SmallDeckIsQuiet) {
  const HostFacts host{64 * kGiB, 2, 100e9};
  EXPECT_TRUE(gpu_recipe_reasons(plan_of(800'000, 8 << 20), deck::Precision::fp32, host).empty());
  EXPECT_TRUE(gpu_recipe_reasons(plan_of(800'000, 8 << 20), deck::Precision::bf16, host).empty());
  EXPECT_EQ(gpu_sized_deck_warning(plan_of(800'000, 8 << 20), deck::Precision::fp32, host), "");
}

TEST(GpuSizedDeck, EachRuleOnItsOwn) {
  const HostFacts host{64 * kGiB, 2, 100e9};
  // >= 1B parameters, memory that fits.
  auto r = gpu_recipe_reasons(plan_of(1'100'000'000, 1 << 30), deck::Precision::bf16, host);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_NE(r[0].find("1.10B parameters"), std::string::npos);
  // Memory per rank above the node's share (32 GiB each for 2 ranks).
  r = gpu_recipe_reasons(plan_of(500'000'000, static_cast<std::int64_t>(40 * kGiB)), deck::Precision::fp32, host);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_NE(r[0].find("32.00 GiB each"), std::string::npos) << r[0];
  // FP8 is emulated on the host.
  r = gpu_recipe_reasons(plan_of(600'000'000, 1 << 30), deck::Precision::fp8, host);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_NE(r[0].find("fp8"), std::string::npos);
}

TEST(GpuSizedDeck, WarningSaysHostAndStepTime) {
  const HostFacts host{64 * kGiB, 2, 100e9};
  const std::string w = gpu_sized_deck_warning(plan_of(70'000'000'000, static_cast<std::int64_t>(500 * kGiB)), deck::Precision::bf16, host);
  EXPECT_NE(w.find("host backend (CPU)"), std::string::npos) << w;
  EXPECT_NE(w.find("70.00B parameters"), std::string::npos) << w;
  // 6 * 70e9 * 2048 FLOPs over 2 ranks x 100 GFLOP/s = 4300.8 s.
  EXPECT_NE(w.find("1.2 hours"), std::string::npos) << w;
}
