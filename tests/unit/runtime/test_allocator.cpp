// The stream-ordered host allocator (runtime/allocator.hpp): alignment,
// caching, release ordered after asynchronous work, debug poisoning and
// delayed reuse, environment parsing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <future>

#include "base/error.hpp"
#include "runtime/allocator.hpp"
#include "runtime/stream.hpp"

using namespace ftrain;

namespace {
float as_float(std::uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
}  // namespace

TEST(HostAllocator, AlignedAndReusedAfterRelease) {
  HostAllocator a;
  void* first = nullptr;
  {
    auto block = a.allocate(1000);
    first = block.get();
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(first) % 64, 0u);
    EXPECT_GE(a.stats().live_bytes, 1000u);
  }
  EXPECT_EQ(a.stats().live_bytes, 0u);
  auto again = a.allocate(900);  // same size class
  EXPECT_EQ(again.get(), first) << "a released block is handed out again";
  EXPECT_EQ(a.stats().reused_blocks, 1);
  auto zero = a.allocate(0);
  EXPECT_NE(zero.get(), nullptr);
}

TEST(HostAllocator, ReleaseWaitsForQueuedWorkOnAsynchronousStreams) {
  HostAllocator a;
  auto stream = make_host_stream(true, "test.compute");
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  stream->enqueue([opened] { opened.wait(); });  // work that may still read the block
  void* released = nullptr;
  {
    auto block = a.allocate(4096);
    released = block.get();
  }
  EXPECT_EQ(a.stats().pending_bytes, 4096u) << "released while the stream still has work queued";
  auto other = a.allocate(4096);
  EXPECT_NE(other.get(), released) << "a pending block is not reused";
  gate.set_value();
  stream->synchronize();
  auto reused = a.allocate(4096);
  EXPECT_EQ(reused.get(), released) << "after the stream passed the release event the block is free";
  EXPECT_EQ(a.stats().pending_bytes, 0u);
}

TEST(HostAllocator, DebugModePoisonsFreshAndFreedBlocksAndDelaysReuse) {
  HostAllocatorOptions o;
  o.debug = true;
  o.quarantine_bytes = 8192;
  HostAllocator a(o);
  float* raw = nullptr;
  void* first = nullptr;
  {
    auto block = a.allocate(256);
    raw = static_cast<float*>(block.get());
    first = block.get();
    EXPECT_TRUE(std::isnan(raw[0])) << "never-written memory reads as NaN";
    for (int i = 0; i < 64; ++i) raw[i] = 1.0f;
  }
  // The block sits in the quarantine (still owned by the allocator): a
  // dangling reader sees the poison, not the old values.
  for (int i = 0; i < 64; ++i) ASSERT_TRUE(std::isnan(raw[i])) << i;
  EXPECT_TRUE(std::isnan(as_float(kPoisonWord)));
  auto next = a.allocate(256);
  EXPECT_NE(next.get(), first) << "a freed block is not reused while quarantined";
  EXPECT_EQ(a.stats().reused_blocks, 0);
}

TEST(HostAllocator, EnvironmentSwitchesDebugModeAndRejectsOtherValues) {
  ::setenv("FTRAIN_ALLOC_DEBUG", "1", 1);
  EXPECT_TRUE(HostAllocatorOptions::from_environment().debug);
  ::setenv("FTRAIN_ALLOC_DEBUG", "0", 1);
  EXPECT_FALSE(HostAllocatorOptions::from_environment().debug);
  ::setenv("FTRAIN_ALLOC_DEBUG", "yes", 1);
  try {
    HostAllocatorOptions::from_environment();
    ADD_FAILURE() << "expected an error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("FTRAIN_ALLOC_DEBUG='yes'"), std::string::npos) << e.what();
  }
  ::unsetenv("FTRAIN_ALLOC_DEBUG");
}

// Blocks of 2 MiB or more: 2 MiB aligned, whole huge pages, advised as
// transparent huge pages; smaller blocks and huge_pages = false keep the
// 64-byte alignment and the 512-byte size classes.
TEST(HostAllocator, LargeBlocksAreWholeHugePagesAdvisedAsSuch) {
  HostAllocator a;
  {
    auto large = a.allocate(kHugePageBytes + 1);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(large.get()) % kHugePageBytes, 0u);
    EXPECT_EQ(a.stats().live_bytes, 2 * kHugePageBytes) << "rounded up to whole huge pages";
    auto small = a.allocate(kHugePageBytes - 4096);
    EXPECT_EQ(a.stats().live_bytes, 3 * kHugePageBytes - 4096) << "a block under 2 MiB keeps its size class";
  }
  // Where the kernel has THP (Linux with CONFIG_TRANSPARENT_HUGEPAGE, as
  // Debian's), the advice is taken.
  if (std::FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r")) {
    std::fclose(f);
    EXPECT_EQ(a.stats().huge_page_blocks, 1);
  }
  HostAllocatorOptions off;
  off.huge_pages = false;
  HostAllocator plain(off);
  auto large = plain.allocate(kHugePageBytes + 1);
  EXPECT_EQ(plain.stats().live_bytes, kHugePageBytes + 512);
  EXPECT_EQ(plain.stats().huge_page_blocks, 0);
}

TEST(HostAllocator, EnvironmentSwitchesHugePagesAndRejectsOtherValues) {
  EXPECT_TRUE(HostAllocatorOptions{}.huge_pages) << "on unless switched off";
  ::setenv("FTRAIN_HOST_HUGE_PAGES", "0", 1);
  EXPECT_FALSE(HostAllocatorOptions::from_environment().huge_pages);
  ::setenv("FTRAIN_HOST_HUGE_PAGES", "1", 1);
  EXPECT_TRUE(HostAllocatorOptions::from_environment().huge_pages);
  ::setenv("FTRAIN_HOST_HUGE_PAGES", "off", 1);
  try {
    HostAllocatorOptions::from_environment();
    ADD_FAILURE() << "expected an error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("FTRAIN_HOST_HUGE_PAGES='off'"), std::string::npos) << e.what();
  }
  ::unsetenv("FTRAIN_HOST_HUGE_PAGES");
}

TEST(HostAllocator, NoAllocatorForCudaOnAHostOnlyBuild) {
  EXPECT_EQ(find_allocator(Device::cuda), nullptr);
  EXPECT_NE(find_allocator(Device::host), nullptr);
}
