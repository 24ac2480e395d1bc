// The bookkeeping of a device allocator's pinned host blocks
// (DeviceAllocator::allocate_pinned_host): which address ranges are
// pinned, for is_pinned_host, and the bytes live and at their peak, for
// AllocatorStats. The allocator makes and frees the blocks; this only
// records them. Thread-safe: blocks go from any thread that drops the last
// reference.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

namespace ftrain {

class PinnedHostBlocks {
 public:
  void add(const void* block, std::size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      blocks_[address(block)] = bytes;
    }
    const std::size_t live = live_.fetch_add(bytes) + bytes;
    for (std::size_t peak = peak_.load(); live > peak && !peak_.compare_exchange_weak(peak, live);) {
    }
  }
  void remove(const void* block, std::size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      blocks_.erase(address(block));
    }
    live_.fetch_sub(bytes);
  }
  // Whether `host_ptr` lies inside a recorded block (a 0-byte block holds its own address).
  bool contains(const void* host_ptr) const {
    const std::uintptr_t at = address(host_ptr);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.upper_bound(at);
    if (it == blocks_.begin()) return false;
    --it;
    return at < it->first + std::max<std::size_t>(it->second, 1);
  }
  std::size_t live_bytes() const { return live_.load(); }
  std::size_t peak_bytes() const { return peak_.load(); }

 private:
  static std::uintptr_t address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }
  mutable std::mutex mutex_;
  std::map<std::uintptr_t, std::size_t> blocks_;  // start address -> bytes
  std::atomic<std::size_t> live_{0}, peak_{0};
};

}  // namespace ftrain
