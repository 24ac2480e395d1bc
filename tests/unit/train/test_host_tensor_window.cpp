// The host tensor memory of a log window (train/metrics.hpp): the host
// allocator's live bytes at the log step and its peak since the previous
// window, which metrics.jsonl reports per rank and share/bench/
// context_parallel.sh reads as what a training step adds per rank.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "runtime/allocator.hpp"
#include "train/metrics.hpp"

using namespace ftrain;

namespace {
constexpr std::size_t kMiB = std::size_t(1) << 20;
}

TEST(HostTensorWindow, PeakIsTheWindowsHighWaterMarkNotTheProcesss) {
  HostAllocator host(HostAllocatorOptions{.huge_pages = false});
  auto kept = host.allocate(3 * kMiB);  // a rank's resident state
  { auto step = host.allocate(10 * kMiB); }  // a step's activations, released
  const HostTensorWindow first = take_host_tensor_window(host);
  EXPECT_DOUBLE_EQ(first.live_mib, 3.0);
  EXPECT_DOUBLE_EQ(first.peak_mib, 13.0);
  { auto step = host.allocate(4 * kMiB); }  // a smaller step in the next window
  const HostTensorWindow second = take_host_tensor_window(host);
  EXPECT_DOUBLE_EQ(second.live_mib, 3.0);
  EXPECT_DOUBLE_EQ(second.peak_mib, 7.0) << "the previous window's 10 MiB step is still in the peak";
  const HostTensorWindow idle = take_host_tensor_window(host);
  EXPECT_DOUBLE_EQ(idle.peak_mib, idle.live_mib) << "a window without allocations peaks at what is alive";
}

TEST(HostTensorWindow, TrainingRowHasBothFieldsPerRank) {
  StepRecord r;
  r.memory.rss_mib_per_rank = {100, 110};
  r.memory.host_tensor_mib_per_rank = {3, 4};
  r.memory.host_tensor_peak_mib_per_rank = {13, 14.5};
  const auto j = nlohmann::json::parse(step_metrics_row(r));
  EXPECT_EQ(j["host_tensor_mib_per_rank"], nlohmann::json({3.0, 4.0}));
  EXPECT_EQ(j["host_tensor_peak_mib_per_rank"], nlohmann::json({13.0, 14.5}));
}
