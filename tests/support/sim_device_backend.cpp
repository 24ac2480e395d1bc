// The simulated device: a test-only ops backend library that registers for
// Device::cuda and proves, on a machine without a GPU, that the training
// path treats device memory as device memory.
//
// Load it like libftrain_cuda.so: FTRAIN_CUDA_BACKEND=<path of this library>
// (runtime/backend_library.cpp), then `device cuda` in a deck, or
// ExecutionOptions{.device = Device::cuda} in a test.
//
// What it does, and why each part makes a mistake visible:
//  * Memory: each block comes from the host allocator (so stream-ordered
//    release, the debug allocator's poison and quarantine all apply), but
//    the pointer a Tensor holds is the real address with bit 62 flipped: a
//    non-canonical x86-64 address. Any host code that dereferences "device"
//    memory (data_as<float>()[i], memcpy, MPI on the raw pointer) faults at
//    once instead of reading plausible numbers. Fresh blocks are filled with
//    the NaN poison (kPoisonWord), so reading memory nobody wrote shows too.
//  * Copies: the allocator's zero/copy/copy_to_host/copy_from_host undo the
//    flip: the explicit copies (to_device, copy_tensor, host_readable) are
//    the only way between host and device, as with cudaMemcpy. The copies
//    on a given stream (copy_to_host_on / copy_from_host_on) run on that
//    stream, as cudaMemcpyAsync does: a caller that reuses the host buffer
//    before the stream passed the copy races it (ThreadSanitizer sees it on
//    asynchronous host streams).
//  * Accounting: stats() counts the device's own blocks in live_bytes and
//    peak_live_bytes (the rest is the host allocator's), so a test sees
//    what a run keeps in device memory and what it moved to the host.
//  * Pinned host memory (allocate_pinned_host): real host memory (the host
//    reads it), its blocks remembered, so stats() counts the pinned bytes
//    and, for every copy on a stream, whether its host side was pinned or
//    pageable: a test sees that offloaded state is in pinned memory and
//    that the offload copies use it, as a GPU needs for copies that do not
//    block the host.
//  * Ops: the table is generated from FTRAIN_OP_LIST. Each entry turns every
//    Tensor / Tensor* / Fp8Tensor / Fp8Casts argument into a host-tagged alias of the
//    same memory (Tensor::external) and calls the host backend's entry, so
//    the results are bit for bit the host's (same kernels, same order). A
//    HOST tensor handed to an op on this device is refused, naming the op and
//    the tensor: a real GPU kernel would be given a host pointer.
//  * Streams: host streams (synchronous, or asynchronous worker threads with
//    FTRAIN_HOST_STREAM=async), as the host backend's.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>

#include "base/error.hpp"
#include "kernels/backend_registry.hpp"
#include "runtime/allocator.hpp"
#include "runtime/execution_context.hpp"
#include "runtime/ftrain_backend.h"
#include "runtime/pinned_host_blocks.hpp"
#include "runtime/stream.hpp"

namespace {
using namespace ftrain;

// Bit 62: a user-space address (< 2^47) with it set is non-canonical, so
// loads and stores through it fault; adding a view's byte offset never
// carries into it.
constexpr std::uintptr_t kDeviceTag = std::uintptr_t{1} << 62;

void* to_device_address(void* host) { return reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(host) ^ kDeviceTag); }
void* to_host_address(const void* device) {
  const auto bits = reinterpret_cast<std::uintptr_t>(device);
  FT_CHECK((bits & kDeviceTag) != 0 || device == nullptr)
      << "sim device: " << device << " is not a simulated device address (a host pointer given as device memory)";
  return reinterpret_cast<void*>(bits ^ kDeviceTag);
}

class SimDeviceAllocator final : public DeviceAllocator {
 public:
  Device device() const override { return Device::cuda; }
  std::shared_ptr<void> allocate(std::size_t bytes) override {
    std::shared_ptr<void> block = host_allocator().allocate(bytes);
    // Never-written device memory reads as NaN (f32 and bf16) if anything
    // reads it: a real allocator hands out whatever was there.
    auto* words = static_cast<std::uint32_t*>(block.get());
    for (std::size_t i = 0; i < bytes / sizeof(std::uint32_t); ++i) words[i] = kPoisonWord;
    // The host block (released in stream order by the host allocator)
    // goes with the last owner of the tagged address.
    const std::size_t now = live_.fetch_add(bytes) + bytes;
    for (std::size_t peak = peak_.load(); now > peak && !peak_.compare_exchange_weak(peak, now);) {
    }
    return std::shared_ptr<void>(to_device_address(block.get()), [this, block, bytes](void*) mutable {
      live_.fetch_sub(bytes);
      block.reset();
    });
  }
  void zero(void* dst, std::size_t bytes) override { std::memset(to_host_address(dst), 0, bytes); }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    std::memmove(to_host_address(dst), to_host_address(src), bytes);
  }
  void copy_from_host(void* dst, const void* host_src, std::size_t bytes) override {
    std::memcpy(to_host_address(dst), host_src, bytes);
  }
  void copy_to_host(void* host_dst, const void* src, std::size_t bytes) override {
    std::memcpy(host_dst, to_host_address(src), bytes);
  }
  void copy_to_host_on(Stream& stream, void* host_dst, const void* src, std::size_t bytes) override {
    const void* from = to_host_address(src);
    count_stream_copy(host_dst, bytes);
    stream.enqueue([host_dst, from, bytes] { std::memcpy(host_dst, from, bytes); });
  }
  void copy_from_host_on(Stream& stream, void* dst, const void* host_src, std::size_t bytes) override {
    void* to = to_host_address(dst);
    count_stream_copy(host_src, bytes);
    stream.enqueue([to, host_src, bytes] { std::memcpy(to, host_src, bytes); });
  }
  std::shared_ptr<void> allocate_pinned_host(std::size_t bytes) override {
    std::shared_ptr<void> block = host_allocator().allocate(bytes);
    pinned_.add(block.get(), bytes);
    void* data = block.get();
    return std::shared_ptr<void>(data, [this, block, bytes](void* p) mutable {
      pinned_.remove(p, bytes);
      block.reset();
    });
  }
  bool is_pinned_host(const void* host_ptr) const override { return pinned_.contains(host_ptr); }
  AllocatorStats stats() const override {
    AllocatorStats s = host_allocator().stats();
    s.live_bytes = live_.load();
    s.peak_live_bytes = peak_.load();
    s.pinned_host_bytes = pinned_.live_bytes();
    s.peak_pinned_host_bytes = pinned_.peak_bytes();
    s.pinned_stream_copies = pinned_copies_.load();
    s.pageable_stream_copies = pageable_copies_.load();
    return s;
  }

 private:
  void count_stream_copy(const void* host_side, std::size_t bytes) {
    if (bytes == 0) return;
    (is_pinned_host(host_side) ? pinned_copies_ : pageable_copies_).fetch_add(1);
  }
  std::atomic<std::size_t> live_{0};
  std::atomic<std::size_t> peak_{0};
  // allocate_pinned_host's blocks (addresses, live and peak bytes).
  PinnedHostBlocks pinned_;
  std::atomic<std::int64_t> pinned_copies_{0}, pageable_copies_{0};
};

// The host-tagged alias of one op argument.
Tensor host_alias(const char* op, const Tensor& t) {
  if (!t.defined()) return t;  // an undefined optional output (frozen gradient)
  if (t.device() != Device::cuda)
    FT_THROW() << "sim device: op " << op << " was given " << t.describe()
               << ", which is not device memory (a GPU kernel would receive a host pointer)";
  return Tensor::external(to_host_address(t.data()), t.shape(), t.dtype(), Device::host, t.name());
}

struct TensorArg {
  Tensor alias;
  Tensor& get() { return alias; }
};
struct OptionalTensorArg {
  Tensor alias;
  bool present = false;
  Tensor* get() { return present ? &alias : nullptr; }
};
struct Fp8Arg {
  Fp8Tensor alias;
  Fp8Tensor& get() { return alias; }
};
struct Fp8CastsArg {
  Fp8Casts alias;
  Fp8Casts& get() { return alias; }
};
template <class S>
struct ScalarArg {
  S value;
  S get() const { return value; }
};

TensorArg translate(const char* op, const Tensor& t) { return {host_alias(op, t)}; }
OptionalTensorArg translate(const char* op, const Tensor* t) {
  return t != nullptr ? OptionalTensorArg{host_alias(op, *t), true} : OptionalTensorArg{};
}
Fp8Arg translate(const char* op, const Fp8Tensor& t) {
  Fp8Tensor out = t;
  out.data = host_alias(op, t.data);
  out.scale = host_alias(op, t.scale);
  out.scale_inv = host_alias(op, t.scale_inv);
  out.amax = host_alias(op, t.amax);
  out.data_t = host_alias(op, t.data_t);  // undefined unless the caller asked for the transposed copy
  return {out};
}
Fp8CastsArg translate(const char* op, const Fp8Casts& t) {
  Fp8CastsArg out{t};
  for (int i = 0; i < t.count && i < Fp8Casts::kMax; ++i) out.alias.out[i] = translate(op, t.out[i]).alias;
  return out;
}
template <class S>
  requires(std::is_arithmetic_v<S> || std::is_enum_v<S>)
ScalarArg<S> translate(const char*, S value) {
  return {value};
}

// Every entry: the same op of the host table on the aliases, with the
// caller's context (its streams are host streams; the host entries use
// nothing else of it).
#define SIM_ENTRY(R, NAME, PARAMS, ARGS, DEVICE_TENSOR)                                                     \
  R sim_##NAME(ExecutionContext& ctx, FTRAIN_UNPAREN PARAMS) {                                              \
    FT_CHECK(ctx.device() == Device::cuda) << "sim device: op " #NAME " with a context on " << device_name(ctx.device()); \
    auto held = std::make_tuple(SIM_TRANSLATE_ARGS ARGS);                                                  \
    return std::apply([&ctx](auto&... h) { return host_op_table().NAME(ctx, h.get()...); }, held);        \
  }
#define SIM_TRANSLATE_ARGS(...) SIM_TRANSLATE_EACH(__VA_ARGS__)
// translate(op, a) for each argument of the op's argument list.
#define SIM_T(op, a) translate(op, a)
#define SIM_TRANSLATE_EACH(...) SIM_FOR_EACH(SIM_T, __VA_ARGS__)

// A small preprocessor for-each (up to 16 arguments; the op list's longest
// has 12), passing the op name through the enclosing `sim_op_name`.
#define SIM_EXPAND(x) x
#define SIM_GET_MACRO(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16, NAME, ...) NAME
#define SIM_FE_1(F, x) F(sim_op_name, x)
#define SIM_FE_2(F, x, ...) F(sim_op_name, x), SIM_EXPAND(SIM_FE_1(F, __VA_ARGS__))
#define SIM_FE_3(F, x, ...) F(sim_op_name, x), SIM_EXPAND(SIM_FE_2(F, __VA_ARGS__))
#define SIM_FE_4(F, x, ...) F(sim_op_name, x), SIM_EXPAND(SIM_FE_3(F, __VA_ARGS__))
#define SIM_FE_5(F, x, ...) F(sim_op_name, x), SIM_EXPAND(SIM_FE_4(F, __VA_ARGS__))
#define SIM_FE_6(F, x, ...) F(sim_op_name, x), SIM_EXPAND(SIM_FE_5(F, __VA_ARGS__))
#define SIM_FE_7(F, x, ...) F(sim_op_name, x), SIM_EXPAND(SIM_FE_6(F, __VA_ARGS__))
#define SIM_FE_8(F, x, ...) F(sim_op_name, x), SIM_EXPAND(SIM_FE_7(F, __VA_ARGS__))
#define SIM_FE_9(F, x, ...) F(sim_op_name, x), SIM_EXPAND(SIM_FE_8(F, __VA_ARGS__))
#define SIM_FE_10(F, x, ...) F(sim_op_name, x), SIM_EXPAND(SIM_FE_9(F, __VA_ARGS__))
#define SIM_FE_11(F, x, ...) F(sim_op_name, x), SIM_EXPAND(SIM_FE_10(F, __VA_ARGS__))
#define SIM_FE_12(F, x, ...) F(sim_op_name, x), SIM_EXPAND(SIM_FE_11(F, __VA_ARGS__))
#define SIM_FE_13(F, x, ...) F(sim_op_name, x), SIM_EXPAND(SIM_FE_12(F, __VA_ARGS__))
#define SIM_FE_14(F, x, ...) F(sim_op_name, x), SIM_EXPAND(SIM_FE_13(F, __VA_ARGS__))
#define SIM_FE_15(F, x, ...) F(sim_op_name, x), SIM_EXPAND(SIM_FE_14(F, __VA_ARGS__))
#define SIM_FE_16(F, x, ...) F(sim_op_name, x), SIM_EXPAND(SIM_FE_15(F, __VA_ARGS__))
#define SIM_FOR_EACH(F, ...)                                                                                  \
  SIM_EXPAND(SIM_GET_MACRO(__VA_ARGS__, SIM_FE_16, SIM_FE_15, SIM_FE_14, SIM_FE_13, SIM_FE_12, SIM_FE_11,     \
                           SIM_FE_10, SIM_FE_9, SIM_FE_8, SIM_FE_7, SIM_FE_6, SIM_FE_5, SIM_FE_4, SIM_FE_3,   \
                           SIM_FE_2, SIM_FE_1)(F, __VA_ARGS__))

#define SIM_ENTRY_NAMED(R, NAME, PARAMS, ARGS, DEVICE_TENSOR) \
  namespace op_##NAME {                                       \
  [[maybe_unused]] constexpr const char* sim_op_name = #NAME; \
  SIM_ENTRY(R, NAME, PARAMS, ARGS, DEVICE_TENSOR)             \
  }
FTRAIN_OP_LIST(SIM_ENTRY_NAMED)
#undef SIM_ENTRY_NAMED

// The CUDA backend's FP8 GEMMs are TN only: its backward reads the
// transposed copies of x, w and dy (kernels/cuda/cuda_fp8_ops.cpp) and stops
// when one is missing. The host GEMMs need none, so the simulation checks
// them here: each must exist and hold exactly the transpose of its codes
// (after the work queued before this op: the context is drained first).
void require_transposed_copy(ExecutionContext& ctx, const Fp8Tensor& t, const char* role) {
  FT_CHECK(t.data_t.defined()) << "sim device: fp8_linear_backward: " << role << " " << t.data.describe()
                               << " has no transposed copy (the CUDA backend's TN FP8 GEMMs read it)";
  ctx.synchronize();
  const Tensor codes = host_alias("fp8_linear_backward", t.data), copy = host_alias("fp8_linear_backward", t.data_t);
  const std::int64_t cols = codes.dim(-1), rows = cols > 0 ? codes.numel() / cols : 0;
  FT_CHECK(copy.ndim() == 2 && copy.dim(0) == cols && copy.dim(1) == rows)
      << "sim device: fp8_linear_backward: " << role << "'s transposed copy " << copy.describe() << " is not ["
      << cols << ", " << rows << "]";
  const auto* a = static_cast<const std::uint8_t*>(codes.data());
  const auto* b = static_cast<const std::uint8_t*>(copy.data());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      FT_CHECK(b[c * rows + r] == a[r * cols + c])
          << "sim device: fp8_linear_backward: " << role << "'s transposed copy differs from its codes at row " << r
          << ", column " << c << " (" << t.data.describe() << ")";
}

void sim_fp8_linear_backward_checked(ExecutionContext& ctx, const Fp8Tensor& x, const Fp8Tensor& w,
                                     const Fp8Tensor& dy, const Tensor& dy_source, Tensor* dx, Tensor& dw,
                                     Tensor* db) {
  require_transposed_copy(ctx, x, "x");
  require_transposed_copy(ctx, w, "w");
  require_transposed_copy(ctx, dy, "dy");
  op_fp8_linear_backward::sim_fp8_linear_backward(ctx, x, w, dy, dy_source, dx, dw, db);
}

std::unique_ptr<Stream> make_stream(bool asynchronous, const char* name) { return make_host_stream(asynchronous, name); }

const char* register_all() {
  static SimDeviceAllocator allocator;
  static const OpTable table = [] {
    OpTable t;
    t.name = "cuda (simulated device: host kernels behind device addresses)";
    t.device = Device::cuda;
#define SIM_TABLE(R, NAME, PARAMS, ARGS, DEVICE_TENSOR) t.NAME = &op_##NAME::sim_##NAME;
    FTRAIN_OP_LIST(SIM_TABLE)
#undef SIM_TABLE
    t.fp8_linear_backward = &sim_fp8_linear_backward_checked;
    return t;
  }();
  register_allocator(Device::cuda, &allocator);
  register_stream_factory(Device::cuda, &make_stream);
  register_backend(table);
  return nullptr;
}

const ftrain_backend_descriptor kDescriptor = {FTRAIN_BACKEND_ABI_VERSION, "cuda (simulated device)", &register_all};
}  // namespace

extern "C" __attribute__((visibility("default"))) const ftrain_backend_descriptor* ftrain_backend_entry(void) {
  return &kDescriptor;
}
