// A stand-in "CUDA" backend library for the backend-loading tests: it
// registers what libftrain_cuda.so will (an allocator, a stream factory and
// an op table for Device::cuda) but keeps its "device" memory on the host.
// Only fill and sum_squares compute; every other op throws naming itself, so
// a test can tell that a call reached this table.
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "base/error.hpp"
#include "kernels/backend_registry.hpp"
#include "runtime/allocator.hpp"
#include "runtime/execution_context.hpp"
#include "runtime/ftrain_backend.h"

namespace {
using namespace ftrain;

class FakeDeviceAllocator final : public DeviceAllocator {
 public:
  Device device() const override { return Device::cuda; }
  std::shared_ptr<void> allocate(std::size_t bytes) override {
    void* p = std::aligned_alloc(64, ((bytes + 63) / 64 + 1) * 64);
    return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  }
  void zero(void* dst, std::size_t bytes) override { std::memset(dst, 0, bytes); }
  void copy(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  AllocatorStats stats() const override { return {}; }
};

#define FAKE_UNIMPLEMENTED(R, NAME, PARAMS, ARGS, DEVICE_TENSOR)                           \
  [[noreturn]] R fake_##NAME(ExecutionContext&, FTRAIN_UNPAREN PARAMS) {                   \
    FT_THROW() << "fake cuda backend: op " #NAME " reached the fake backend (not implemented)"; \
  }
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
FTRAIN_OP_LIST(FAKE_UNIMPLEMENTED)
#pragma GCC diagnostic pop
#undef FAKE_UNIMPLEMENTED

void fill(ExecutionContext& ctx, Tensor& x, float value) {
  FT_CHECK(x.dtype() == DType::f32) << "fake fill: " << x.describe();
  float* p = x.data_as<float>();
  ctx.compute().enqueue([p, n = x.numel(), value] {
    for (std::int64_t i = 0; i < n; ++i) p[i] = value;
  });
}

double sum_squares(ExecutionContext& ctx, const Tensor& x) {
  ctx.compute().synchronize();
  const float* p = x.data_as<float>();
  double s = 0;
  for (std::int64_t i = 0; i < x.numel(); ++i) s += static_cast<double>(p[i]) * p[i];
  return s;
}

std::unique_ptr<Stream> make_stream(bool asynchronous, const char* name) { return make_host_stream(asynchronous, name); }

const char* register_all() {
  static FakeDeviceAllocator allocator;
  static const OpTable table = [] {
    OpTable t;
    t.name = "cuda";
    t.device = Device::cuda;
#define FAKE_ENTRY(R, NAME, PARAMS, ARGS, DEVICE_TENSOR) t.NAME = &fake_##NAME;
    FTRAIN_OP_LIST(FAKE_ENTRY)
#undef FAKE_ENTRY
    t.fill = &fill;
    t.sum_squares = &sum_squares;
    return t;
  }();
  register_allocator(Device::cuda, &allocator);
  register_stream_factory(Device::cuda, &make_stream);
  register_backend(table);
  return nullptr;
}

const ftrain_backend_descriptor kDescriptor = {FTRAIN_BACKEND_ABI_VERSION, "cuda", &register_all};
}  // namespace

extern "C" __attribute__((visibility("default"))) const ftrain_backend_descriptor* ftrain_backend_entry(void) {
  return &kDescriptor;
}
