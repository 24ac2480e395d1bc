// The simulated device (tests/support/sim_device_backend.cpp), the backend
// the engine's device tests run on (tests/regression/sim_device_test.py):
// its memory cannot be read by the host except through the explicit copies,
// its ops give the host kernels' results bit for bit, and an op given a host
// tensor is refused naming it. If any of these did not hold, a passing
// device curve would prove nothing.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "core/tensor.hpp"
#include "kernels/adamw_chunks.hpp"
#include "kernels/backend_registry.hpp"
#include "kernels/ops.hpp"
#include "runtime/allocator.hpp"
#include "runtime/backend_library.hpp"
#include "runtime/execution_context.hpp"
#include "support/error_of.hpp"

using namespace ftrain;

namespace {
using ftrain::testing::error_of;

class SimDevice : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (find_backend(Device::cuda) == nullptr) load_backend_library(FTRAIN_TEST_SIM_DEVICE);
  }
};
}  // namespace

TEST_F(SimDevice, HostReadsOfDeviceMemoryCrashAndCopiesWork) {
  Tensor host = from_floats({4}, {1.0f, -2.0f, 3.5f, 0.25f});
  Tensor dev = to_device(host, Device::cuda);
  EXPECT_EQ(dev.device(), Device::cuda);
  EXPECT_EQ(to_float_vector(to_device(dev, Device::host)), to_float_vector(host));
  EXPECT_EQ(to_float_vector(host_readable(dev)), to_float_vector(host));
  Tensor back = Tensor::zeros({4}, DType::f32);
  copy_tensor(dev, back);
  EXPECT_EQ(to_float_vector(back), to_float_vector(host));
  // The host cannot read or write device memory directly.
  EXPECT_DEATH({ volatile float v = dev.data_as<float>()[0]; (void)v; }, "");
  EXPECT_DEATH({ dev.data_as<float>()[1] = 0.0f; }, "");
  EXPECT_NE(error_of([&] { to_float_vector(dev); }).find("is not on the host"), std::string::npos);
}

TEST_F(SimDevice, OpsGiveTheHostResultsAndRefuseHostTensors) {
  for (bool asynchronous : {false, true}) {
    ExecutionOptions o;
    o.device = Device::cuda;
    o.asynchronous = asynchronous;
    ExecutionContext ctx(o);
    std::vector<float> a(37), b(37);
    for (std::size_t i = 0; i < a.size(); ++i) {
      a[i] = 0.1f * static_cast<float>(i) - 1.3f;
      b[i] = 1.0f / (1.0f + static_cast<float>(i));
    }
    Tensor ha = from_floats({37}, a), hb = from_floats({37}, b), hy = Tensor::zeros({37}, DType::f32);
    ops::add(host_context(), ha, hb, hy);
    Tensor da = to_device(ha, Device::cuda), db = to_device(hb, Device::cuda);
    Tensor dy = Tensor::empty({37}, DType::f32, Device::cuda, "dy");
    ops::add(ctx, da, db, dy);
    Tensor dsum = Tensor::empty({1}, DType::f32, Device::cuda, "dsum");
    ops::sum(ctx, dy, dsum);
    EXPECT_EQ(ops::sum_squares(ctx, dy), ops::sum_squares(host_context(), hy)) << "waits for the stream";
    ctx.synchronize();
    EXPECT_EQ(to_float_vector(host_readable(dy)), to_float_vector(hy));
    Tensor hsum = Tensor::zeros({1}, DType::f32);
    ops::sum(host_context(), hy, hsum);
    EXPECT_EQ(to_float_vector(host_readable(dsum)), to_float_vector(hsum));

    // A host tensor as a non-dispatching argument (what a GPU kernel would
    // get as a host pointer) is refused, naming the op and the tensor.
    Tensor host_side = Tensor::zeros({37}, DType::f32, Device::host, "host_side");
    const std::string m = error_of([&] {
      ops::add(ctx, da, host_side, dy);
      ctx.synchronize();
    });
    EXPECT_NE(m.find("op add"), std::string::npos) << m;
    EXPECT_NE(m.find("host_side"), std::string::npos) << m;
    EXPECT_NE(m.find("not device memory"), std::string::npos) << m;
  }
}

// The multi-tensor AdamW reads its chunk table through a device address
// like any tensor: the table the engine keeps on the device gives the host
// result bit for bit, and a table left on the host is refused.
TEST_F(SimDevice, AdamwChunksReadTheirTableFromTheDevice) {
  ExecutionOptions o;
  o.device = Device::cuda;
  ExecutionContext ctx(o);
  std::vector<float> p(50), g(50), zeros(50, 0.0f);
  for (std::size_t i = 0; i < p.size(); ++i) {
    p[i] = 0.03f * static_cast<float>(i) - 0.7f;
    g[i] = 0.5f - 0.02f * static_cast<float>(i);
  }
  const std::vector<AdamwSegment> segments = {{1, 20, true}, {21, 9, false}, {40, 8, true}};
  auto run = [&](ExecutionContext& c, const Tensor& chunks) {
    Tensor tp = to_device(from_floats({50}, p), c.device()), tg = to_device(from_floats({50}, g), c.device());
    Tensor tm = to_device(from_floats({50}, zeros), c.device()), tv = to_device(from_floats({50}, zeros), c.device());
    Tensor scale = to_device(from_floats({1}, {0.5f}), c.device());
    Tensor clear = to_device(Tensor::zeros({1}, DType::i64), c.device());
    ops::adamw_update_chunks_guarded(c, tp, tg, tm, tv, chunks, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, scale, clear);
    c.synchronize();
    return to_float_vector(host_readable(tp));
  };
  const auto host = run(host_context(), adamw_chunk_table(segments, Device::host, "chunks", 8));
  EXPECT_EQ(run(ctx, adamw_chunk_table(segments, Device::cuda, "chunks", 8)), host);
  EXPECT_EQ(host[0], p[0]) << "padding";
  const std::string m = error_of([&] { run(ctx, adamw_chunk_table(segments, Device::host, "host_chunks", 8)); });
  EXPECT_NE(m.find("op adamw_update_chunks_guarded"), std::string::npos) << m;
  EXPECT_NE(m.find("host_chunks"), std::string::npos) << m;
}

// Pinned host memory (DeviceAllocator::allocate_pinned_host, what offloaded
// state lives in): host memory the host reads and writes, counted while it
// lives, and every copy on a stream counted by whether its host side was in
// it, so an offload run can show that its copies use pinned memory.
TEST_F(SimDevice, PinnedHostMemoryIsCountedAndSoAreTheCopiesThatUseIt) {
  DeviceAllocator& device = *find_allocator(Device::cuda);
  const AllocatorStats before = device.stats();
  Tensor dev = to_device(from_floats({3}, {1.0f, 2.0f, 3.0f}), Device::cuda);
  {
    Tensor pinned = Tensor::pinned_host({3}, DType::f32, Device::cuda, "pinned");
    EXPECT_EQ(pinned.device(), Device::host);
    EXPECT_EQ(to_float_vector(pinned), (std::vector<float>{0.0f, 0.0f, 0.0f})) << "zeroed, readable by the host";
    EXPECT_TRUE(device.is_pinned_host(pinned.data()));
    EXPECT_TRUE(device.is_pinned_host(static_cast<char*>(pinned.data()) + 11));
    EXPECT_EQ(device.stats().pinned_host_bytes, before.pinned_host_bytes + 12);
    Tensor pageable = Tensor::zeros({3}, DType::f32, Device::host, "pageable");
    EXPECT_FALSE(device.is_pinned_host(pageable.data()));

    std::unique_ptr<Stream> copies = make_device_stream(Device::cuda, "copies");
    device.copy_to_host_on(*copies, pinned.data(), dev.data(), 12);
    device.copy_to_host_on(*copies, pageable.data(), dev.data(), 12);
    device.copy_from_host_on(*copies, dev.data(), pinned.data(), 12);
    copies->synchronize();
    EXPECT_EQ(to_float_vector(pinned), (std::vector<float>{1.0f, 2.0f, 3.0f}));
    const AllocatorStats after = device.stats();
    EXPECT_EQ(after.pinned_stream_copies, before.pinned_stream_copies + 2);
    EXPECT_EQ(after.pageable_stream_copies, before.pageable_stream_copies + 1);
    EXPECT_GE(after.peak_pinned_host_bytes, after.pinned_host_bytes);
  }
  EXPECT_EQ(device.stats().pinned_host_bytes, before.pinned_host_bytes) << "released with its last owner";
  // The host backend has no device: its "pinned" memory is ordinary host memory.
  EXPECT_FALSE(host_allocator().is_pinned_host(Tensor::pinned_host({2}, DType::f32, Device::host).data()));
}
