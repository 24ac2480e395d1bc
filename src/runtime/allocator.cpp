#include "runtime/allocator.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <sys/mman.h>

#include "base/error.hpp"
#include "runtime/backend_library.hpp"
#include "runtime/host_streams.hpp"

namespace ftrain {

namespace {
constexpr std::size_t kAlign = 64;
// Capacities are rounded so that buffers of nearly the same size share
// blocks; a cached block serves requests down to half its capacity.
constexpr std::size_t kGranule = 512;

std::size_t round_up(std::size_t bytes, std::size_t unit) { return ((bytes + unit - 1) / unit) * unit; }

// Huge-page blocks are whole huge pages: a block's tail never shares a huge
// page with another allocation.
std::size_t round_capacity(std::size_t bytes, bool huge_pages) {
  const std::size_t b = round_up(std::max<std::size_t>(bytes, 1), kGranule);
  return huge_pages && b >= kHugePageBytes ? round_up(b, kHugePageBytes) : b;
}

bool read_switch(const char* variable, bool unset_value) {
  const char* v = std::getenv(variable);
  if (v == nullptr) return unset_value;
  const std::string s(v);
  if (s.empty()) return unset_value;
  if (s != "0" && s != "1") FT_USER_ERROR() << "environment variable " << variable << "='" << s << "': expected 0 or 1";
  return s == "1";
}

void poison(void* p, std::size_t bytes) {
  auto* w = static_cast<std::uint32_t*>(p);
  for (std::size_t i = 0; i < bytes / sizeof(std::uint32_t); ++i) w[i] = kPoisonWord;
}
}  // namespace

HostAllocatorOptions HostAllocatorOptions::from_environment() {
  HostAllocatorOptions o;
  o.debug = read_switch("FTRAIN_ALLOC_DEBUG", o.debug);
  o.huge_pages = read_switch("FTRAIN_HOST_HUGE_PAGES", o.huge_pages);
  return o;
}

struct HostAllocator::Impl {
  struct Pending {
    void* ptr;
    std::size_t capacity;
    std::vector<Event> events;
  };
  explicit Impl(const HostAllocatorOptions& o) : options(o) {}
  const HostAllocatorOptions options;
  mutable std::mutex mutex;
  std::multimap<std::size_t, void*> free;  // capacity -> block
  std::deque<Pending> pending;             // released, events not yet complete
  std::deque<std::pair<void*, std::size_t>> quarantine;  // debug: poisoned, not yet reusable
  std::size_t quarantine_bytes = 0;
  AllocatorStats stats;

  // The methods below run with `mutex` held.

  // A block nobody can touch any more. Debug: poison it and hold it in the
  // quarantine; the oldest leave once it holds enough bytes.
  void make_free(void* ptr, std::size_t capacity) {
    if (!options.debug) return cache(ptr, capacity);
    poison(ptr, capacity);
    quarantine.emplace_back(ptr, capacity);
    quarantine_bytes += capacity;
    stats.cached_bytes += capacity;
    while (quarantine_bytes > options.quarantine_bytes) {
      auto [p, c] = quarantine.front();
      quarantine.pop_front();
      quarantine_bytes -= c;
      stats.cached_bytes -= c;
      cache(p, c);
    }
  }

  void cache(void* ptr, std::size_t capacity) {
    if (stats.cached_bytes + capacity > options.cache_limit_bytes) {
      std::free(ptr);
      return;
    }
    free.emplace(capacity, ptr);
    stats.cached_bytes += capacity;
  }

  // Releases whose events have all completed become free.
  void settle() {
    for (auto it = pending.begin(); it != pending.end();) {
      if (!std::all_of(it->events.begin(), it->events.end(), [](const Event& e) { return e.query(); })) {
        ++it;
        continue;
      }
      stats.pending_bytes -= it->capacity;
      make_free(it->ptr, it->capacity);
      it = pending.erase(it);
    }
  }
};

HostAllocator::HostAllocator(const HostAllocatorOptions& options)
    : options_(options), impl_(std::make_unique<Impl>(options)) {}

HostAllocator::~HostAllocator() {
  // Pending blocks: their streams are drained by now (a context
  // synchronizes when destroyed), so everything goes back.
  for (auto& p : impl_->pending) {
    for (auto& e : p.events) e.synchronize();
    std::free(p.ptr);
  }
  for (auto& q : impl_->quarantine) std::free(q.first);
  for (auto& f : impl_->free) std::free(f.second);
}

std::shared_ptr<void> HostAllocator::allocate(std::size_t bytes) {
  const std::size_t capacity = round_capacity(bytes, options_.huge_pages);
  void* ptr = nullptr;
  std::size_t got = capacity;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->settle();
    auto it = impl_->free.lower_bound(capacity);
    if (it != impl_->free.end() && it->first <= 2 * capacity) {
      got = it->first;
      ptr = it->second;
      impl_->free.erase(it);
      impl_->stats.cached_bytes -= got;
      ++impl_->stats.reused_blocks;
    }
  }
  if (ptr == nullptr) {
    const bool huge = options_.huge_pages && capacity >= kHugePageBytes;  // capacity: whole huge pages
    ptr = std::aligned_alloc(huge ? kHugePageBytes : kAlign, capacity);
    FT_CHECK(ptr != nullptr) << "host allocation of " << bytes << " bytes failed";
    // Before the first touch, so the pages fault in as huge pages.
    const bool advised = huge && madvise(ptr, capacity, MADV_HUGEPAGE) == 0;
    if (options_.debug) poison(ptr, capacity);  // never-written memory reads as NaN too
    std::lock_guard<std::mutex> lock(impl_->mutex);
    ++impl_->stats.fresh_blocks;
    if (advised) ++impl_->stats.huge_page_blocks;
  }
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->stats.live_bytes += got;
    impl_->stats.peak_live_bytes = std::max(impl_->stats.peak_live_bytes, impl_->stats.live_bytes);
  }
  return std::shared_ptr<void>(ptr, [this, got](void* p) { release(p, got); });
}

void HostAllocator::release(void* ptr, std::size_t capacity) {
  // Recorded before taking our lock: the streams' locks are never taken
  // inside it, so a stream's worker releasing a tensor cannot deadlock.
  std::vector<Event> events = record_on_async_host_streams();
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->stats.live_bytes -= capacity;
  const bool done = std::all_of(events.begin(), events.end(), [](const Event& e) { return e.query(); });
  if (done) {
    impl_->make_free(ptr, capacity);
  } else {
    impl_->pending.push_back({ptr, capacity, std::move(events)});
    impl_->stats.pending_bytes += capacity;
  }
  impl_->settle();
}

void HostAllocator::zero(void* dst, std::size_t bytes) { std::memset(dst, 0, bytes); }
void HostAllocator::copy(void* dst, const void* src, std::size_t bytes) { std::memcpy(dst, src, bytes); }

AllocatorStats HostAllocator::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->stats;
}

void HostAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->settle();
  for (auto& f : impl_->free) {
    std::free(f.second);
    impl_->stats.cached_bytes -= f.first;
  }
  impl_->free.clear();
}

void HostAllocator::restart_peak() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->stats.peak_live_bytes = impl_->stats.live_bytes;
}

HostAllocator& host_allocator() {
  static HostAllocator* allocator = [] {
    const HostAllocatorOptions o = HostAllocatorOptions::from_environment();
    if (o.debug)
      std::fprintf(stderr, "ftrain: FTRAIN_ALLOC_DEBUG=1: freed host blocks are poisoned (NaN) and reused late\n");
    return new HostAllocator(o);  // never destroyed: tensors may outlive static destruction
  }();
  return *allocator;
}

namespace {
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
DeviceAllocator*& slot(Device d) {
  static DeviceAllocator* slots[2] = {nullptr, nullptr};
  return slots[d == Device::host ? 0 : 1];
}
}  // namespace

std::shared_ptr<void> DeviceAllocator::allocate_pinned_host(std::size_t bytes) {
  return host_allocator().allocate(bytes);
}

DeviceAllocator* find_allocator(Device device) {
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    if (DeviceAllocator* a = slot(device)) return a;
  }
  if (device == Device::host) return &host_allocator();
  // A backend library registers its allocator when it is loaded.
  load_optional_backend_libraries();
  std::lock_guard<std::mutex> lock(registry_mutex());
  return slot(device);
}

DeviceAllocator* register_allocator(Device device, DeviceAllocator* allocator) {
  FT_CHECK(allocator == nullptr || allocator->device() == device)
      << "allocator for " << device_name(allocator->device()) << " registered for " << device_name(device);
  std::lock_guard<std::mutex> lock(registry_mutex());
  DeviceAllocator* previous = slot(device);
  slot(device) = allocator;
  return previous;
}

}  // namespace ftrain
