// Loading an ops backend library (runtime/backend_library.hpp) and
// dispatching to it (kernels/backend_registry.hpp), with a stand-in CUDA
// backend (fake_cuda_backend.cpp): before it is loaded a CUDA tensor is
// refused naming the tensor; after, CUDA tensors are allocated by its
// allocator and ops on them reach its table, while host ops are unchanged.
#include <gtest/gtest.h>

#include <string>

#include "base/error.hpp"
#include "core/tensor.hpp"
#include "kernels/backend_registry.hpp"
#include "kernels/ops.hpp"
#include "runtime/backend_library.hpp"
#include "runtime/execution_context.hpp"
#include "support/backend_test.hpp"
#include "support/error_of.hpp"

using namespace ftrain;

namespace {
using ftrain::testing::error_of;
}  // namespace

TEST(BackendLibrary, CudaBackendArrivesOnlyWhenItsLibraryIsLoaded) {
  // FTRAIN_CUDA_BACKEND=none (tests/unit/backend/CMakeLists.txt): host only,
  // even with a real libftrain_cuda.so beside libftrain and a GPU.
  EXPECT_EQ(find_backend(Device::cuda), nullptr);
  EXPECT_EQ(registered_backends().size(), 1u);
  std::string m = error_of([] { Tensor::empty({4}, DType::f32, Device::cuda, "activations"); });
  EXPECT_NE(m.find("'activations'"), std::string::npos) << m;
  EXPECT_NE(m.find("no CUDA backend is loaded"), std::string::npos) << m;

  m = error_of([] { load_backend_library("/nonexistent/libftrain_cuda.so"); });
  EXPECT_NE(m.find("cannot load ops backend /nonexistent/libftrain_cuda.so"), std::string::npos) << m;

  load_backend_library(FTRAIN_TEST_FAKE_BACKEND);
  ASSERT_NE(find_backend(Device::cuda), nullptr);
  EXPECT_EQ(registered_backends().size(), 2u);
  EXPECT_EQ(ftrain::testing::backend_cases().size(), 4u) << "host, host_async, cuda, cuda_async";

  for (bool asynchronous : {false, true}) {
    ExecutionOptions o;
    o.device = Device::cuda;
    o.asynchronous = asynchronous;
    ExecutionContext ctx(o);
    Tensor t = Tensor::empty({6}, DType::f32, Device::cuda, "on_device");
    ops::fill(ctx, t, 2.5f);
    EXPECT_EQ(ops::sum_squares(ctx, t), 6 * 2.5 * 2.5) << "sum_squares waits for the fill on the backend's stream";
    ctx.synchronize();
    EXPECT_EQ(to_float_vector(to_device(t, Device::host)), std::vector<float>(6, 2.5f));

    Tensor y = Tensor::empty({6}, DType::f32, Device::cuda, "y");
    m = error_of([&] {
      ops::add(ctx, t, t, y);
      ctx.synchronize();
    });
    EXPECT_NE(m.find("op add reached the fake backend"), std::string::npos) << m;

    Tensor host_tensor = Tensor::zeros({6}, DType::f32, Device::host, "host_side");
    m = error_of([&] { ops::fill(ctx, host_tensor, 1.0f); });
    EXPECT_NE(m.find("host_side"), std::string::npos) << m;
    EXPECT_NE(m.find("execution context runs on cuda"), std::string::npos) << m;
  }
  // The host backend is untouched.
  Tensor h = Tensor::zeros({3}, DType::f32);
  ops::fill(host_context(), h, 1.0f);
  EXPECT_EQ(ops::sum_squares(host_context(), h), 3.0);
  unregister_backend(Device::cuda);
}
