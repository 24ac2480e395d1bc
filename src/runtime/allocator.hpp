// Device memory behind Tensor: one stream-ordered allocator per device.
//
// Rules (the same for every backend; share/doc/execution-model.md):
//  * Tensor::empty asks the allocator registered for the tensor's device.
//    The host allocator is always there; a CUDA backend library registers
//    its own when it is loaded (a cudaMemPool of its own on the rank's GPU,
//    cudaMallocFromPoolAsync on the attached compute stream, cudaFreeAsync
//    ordered after every live stream: backends/cuda/cuda_backend.cpp). No allocator for a
//    device = no backend for it: Tensor::empty says so, naming the tensor.
//  * A block is released when the last Tensor owning it goes away. The
//    release is ORDERED, not immediate: the allocator records an event on
//    the streams that may still read the block and hands the block out again
//    only after those events completed. So the owner may drop a buffer right
//    after ENQUEUEING the last op that reads it (FSDP2's pattern), never
//    before.
//  * Host: 64-byte aligned blocks (kernels vectorise), cached for reuse. A
//    release is recorded on every asynchronous host stream (there are at
//    most a few), so cross-stream use needs no record_stream call.
//  * Host blocks of 2 MiB or more (the FSDP flats, gathered parameters,
//    gradients, activations of real models) are 2 MiB aligned, sized in
//    whole 2 MiB pages and advised as transparent huge pages
//    (madvise(MADV_HUGEPAGE); Debian's default THP mode is "madvise", so
//    without the advice they get 4 KiB pages). Fewer TLB misses in the
//    kernels, and MPI's single-copy transfers (CMA) pin one page per 2 MiB
//    instead of 512. The advice is only advice: where the kernel has no THP
//    the block is used as it is. HostAllocatorOptions::huge_pages,
//    FTRAIN_HOST_HUGE_PAGES=0 turns it off (share/doc/performance.md).
//  * Debug mode (HostAllocatorOptions::debug, FTRAIN_ALLOC_DEBUG=1): every
//    block is filled with a NaN pattern when handed out fresh and when it is
//    freed, and freed blocks wait in a quarantine before reuse, so a read
//    after release (or of never-written memory) shows up as NaN in tests
//    instead of as plausible stale numbers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "base/device.hpp"
#include "runtime/stream.hpp"

namespace ftrain {

struct AllocatorStats {
  std::size_t live_bytes = 0;        // handed out, not yet released
  std::size_t pending_bytes = 0;     // released, waiting for stream events
  std::size_t cached_bytes = 0;      // free for reuse (debug: incl. quarantine)
  std::size_t peak_live_bytes = 0;
  std::int64_t fresh_blocks = 0;     // taken from the system
  std::int64_t reused_blocks = 0;    // handed out again from the cache
  // Device pools only (the CUDA backend's cudaMemPool: cudaMemPoolAttr-
  // ReservedMemCurrent / -High): memory the pool holds from the driver,
  // handed out or cached. 0 on the host, whose cache is cached_bytes.
  std::size_t reserved_bytes = 0;
  std::size_t peak_reserved_bytes = 0;
  // Host: fresh blocks advised as transparent huge pages (last: the SDK
  // installs this header, so the older fields keep their offsets).
  std::int64_t huge_page_blocks = 0;
  // Device allocators: page-locked host memory handed out by
  // allocate_pinned_host (live and peak bytes), and the copies on a given
  // stream (copy_to_host_on / copy_from_host_on) whose host side was in it
  // or was ordinary pageable memory (which a GPU copies synchronously).
  std::size_t pinned_host_bytes = 0;
  std::size_t peak_pinned_host_bytes = 0;
  std::int64_t pinned_stream_copies = 0;
  std::int64_t pageable_stream_copies = 0;
};

class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  virtual Device device() const = 0;
  // At least `bytes` (0 allowed), aligned for every dtype. The block goes
  // back (stream-ordered, see above) when the last copy of the owner goes.
  virtual std::shared_ptr<void> allocate(std::size_t bytes) = 0;
  // Helpers on this device's memory (Tensor::zeros / clone). The host does
  // them at once; a device allocator enqueues them on its attached stream
  // (below), so they are done before any later work on that stream and the
  // calling thread does not wait.
  virtual void zero(void* dst, std::size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;
  // Between this device's memory and host memory. copy_from_host returns
  // once host_src may be reused (the device copy is stream-ordered like
  // zero); copy_to_host returns once host_dst holds the data.
  virtual void copy_from_host(void* dst, const void* host_src, std::size_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, std::size_t bytes) = 0;
  virtual AllocatorStats stats() const = 0;

  // Device allocators: the stream that allocation, zero, copy and the host
  // copies are ordered on. An ExecutionContext attaches its compute stream
  // when it is made and detaches it when it goes (the newest attached stream
  // is used: a process has one context per rank). The host ignores it.
  virtual void attach_stream(Stream* /*stream*/) {}
  virtual void detach_stream(Stream* /*stream*/) {}
  // Copies enqueued on `stream` (the staged communicator's own stream): the
  // host buffer must stay untouched until the stream passed the copy (its
  // synchronize() or an event recorded after it). The default (the host)
  // waits for the stream, then copies at once.
  virtual void copy_to_host_on(Stream& stream, void* host_dst, const void* src, std::size_t bytes) {
    stream.synchronize();
    copy_to_host(host_dst, src, bytes);
  }
  virtual void copy_from_host_on(Stream& stream, void* dst, const void* host_src, std::size_t bytes) {
    stream.synchronize();
    copy_from_host(dst, host_src, bytes);
  }
  // Host memory this device's copies reach directly (CUDA: page-locked,
  // cudaHostAlloc), so a copy on a stream to or from it returns at once and
  // overlaps the device's work; with pageable memory a GPU copy to the host
  // returns only when done. For long-lived buffers, made outside a step:
  // pinning takes time and, on CUDA, synchronises the device, and so may the
  // release (cudaFreeHost) when the last owner goes, which must come after
  // every copy that uses the block finished (the owner's synchronisation,
  // not stream order). The default (the host backend: no device) is
  // ordinary host memory. Appended after the older virtual functions so
  // their slots keep their places.
  virtual std::shared_ptr<void> allocate_pinned_host(std::size_t bytes);
  // Whether `host_ptr` lies in a block of allocate_pinned_host.
  virtual bool is_pinned_host(const void* /*host_ptr*/) const { return false; }
};

// The allocator for `device`, or nullptr when no backend provides one. The
// host always has one (host_allocator() unless another was registered).
DeviceAllocator* find_allocator(Device device);
// Installs `allocator` for its device (a backend library does this when
// loaded; tests install a debug host allocator); nullptr restores the
// default (none for cuda). Returns the previous one. Tensors keep the
// allocator that made them, so it must outlive them.
DeviceAllocator* register_allocator(Device device, DeviceAllocator* allocator);

// 0x7FC00000 + low bits: a quiet NaN as f32, NaN as bf16 (0x7FC0) in both
// halves; the byte 0xFF.. pattern would be NaN too but reads as -1 in ints.
inline constexpr std::uint32_t kPoisonWord = 0x7FC07FC0u;

// The transparent huge page size of x86-64 and of most aarch64 kernels.
inline constexpr std::size_t kHugePageBytes = std::size_t(2) << 20;

struct HostAllocatorOptions {
  bool debug = false;                              // poison + quarantine
  std::size_t cache_limit_bytes = std::size_t(256) << 20;  // free blocks kept beyond this go back to the system
  std::size_t quarantine_bytes = std::size_t(64) << 20;  // debug: freed bytes held back before reuse
  bool huge_pages = true;  // blocks >= kHugePageBytes: 2 MiB aligned and advised as huge pages
  // Reads FTRAIN_ALLOC_DEBUG and FTRAIN_HOST_HUGE_PAGES (0 or 1 each;
  // anything else is an error naming the variable).
  static HostAllocatorOptions from_environment();
};

class HostAllocator final : public DeviceAllocator {
 public:
  explicit HostAllocator(const HostAllocatorOptions& options = {});
  ~HostAllocator() override;
  HostAllocator(const HostAllocator&) = delete;
  HostAllocator& operator=(const HostAllocator&) = delete;

  Device device() const override { return Device::host; }
  std::shared_ptr<void> allocate(std::size_t bytes) override;
  void zero(void* dst, std::size_t bytes) override;
  void copy(void* dst, const void* src, std::size_t bytes) override;
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override { copy(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override { copy(dst, src, bytes); }
  AllocatorStats stats() const override;
  const HostAllocatorOptions& options() const { return options_; }
  // Gives every cached (free, completed) block back to the system.
  void release_cached();
  // peak_live_bytes starts again from live_bytes, so the next reading is the
  // high-water mark of a window (a log window's training steps) rather than
  // of the whole process, whose loading may have peaked higher.
  void restart_peak();

 private:
  struct Impl;
  void release(void* ptr, std::size_t capacity);
  HostAllocatorOptions options_;
  std::unique_ptr<Impl> impl_;
};

// The process's host allocator (options from the environment), created on
// first use and never destroyed (tensors may outlive static destruction).
HostAllocator& host_allocator();

}  // namespace ftrain
