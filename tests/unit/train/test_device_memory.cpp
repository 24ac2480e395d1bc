// The per-rank device memory a GPU run reports (train/device_memory.hpp):
// the CUDA allocator's stats in MiB (allocated = live, reserved = the pool's,
// peak = peak live), the run header's line and the metrics.jsonl fields.
// Host runs never call these (their header and metrics are unchanged, which
// the regression and console tests compare).
#include <gtest/gtest.h>

#include "train/device_memory.hpp"

using namespace ftrain;

TEST(DeviceMemory, SampleIsTheAllocatorStatsInMib) {
  AllocatorStats stats;
  stats.live_bytes = std::size_t(3) << 20;
  stats.reserved_bytes = std::size_t(8) << 20;
  stats.peak_live_bytes = std::size_t(5) << 20;
  stats.cached_bytes = std::size_t(99) << 20;  // a host notion: not reported
  const DeviceMemorySample s = device_memory_sample(stats);
  EXPECT_EQ(s.allocated_mib, 3.0);
  EXPECT_EQ(s.reserved_mib, 8.0);
  EXPECT_EQ(s.peak_mib, 5.0);
}

TEST(DeviceMemory, HeaderLineNamesEveryRank) {
  const std::string line = format_device_memory("after load", {{12, 40, 30}, {13, 41, 31.4}});
  EXPECT_EQ(line,
            "device memory after load: rank 0 12 MiB allocated, 40 reserved, peak 30 | rank 1 13 MiB allocated, 41 "
            "reserved, peak 31\n");
}

TEST(DeviceMemory, MetricsFieldsPerRankAndMax) {
  nlohmann::json j;
  add_device_memory_metrics(j, {{1, 2, 3}, {4, 5, 6.5}});
  EXPECT_EQ(j["device_allocated_mib_per_rank"], nlohmann::json({1.0, 4.0}));
  EXPECT_EQ(j["device_reserved_mib_per_rank"], nlohmann::json({2.0, 5.0}));
  EXPECT_EQ(j["device_peak_mib_per_rank"], nlohmann::json({3.0, 6.5}));
  EXPECT_EQ(j["device_peak_mib_max_rank"], 6.5);
}

TEST(DeviceMemory, NoCudaAllocatorIsAnErrorNamingIt) {
  if (find_allocator(Device::cuda) != nullptr) GTEST_SKIP() << "a CUDA allocator is registered here";
  try {
    this_rank_device_memory();
    FAIL() << "no error without a CUDA allocator";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA allocator"), std::string::npos) << e.what();
  }
}
