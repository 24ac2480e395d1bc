// An op's argument checks run once, in ops::<op> before the backend's entry
// (kernels/op_checks.hpp), so bad input gets the same error on the host
// backend and on the CUDA dispatch path. The CUDA path is the stand-in CUDA
// backend (fake_cuda_backend.cpp): every op entry of it throws "reached the
// fake backend", so an error without those words was raised before dispatch.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "core/error.hpp"
#include "core/tensor.hpp"
#include "kernels/backend_registry.hpp"
#include "kernels/ops.hpp"
#include "runtime/backend_library.hpp"
#include "runtime/execution_context.hpp"

using namespace ftrain;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

// The message with the device word of every tensor description made the host's.
std::string as_if_on_host(std::string m) {
  for (std::size_t at = m.find(" cuda"); at != std::string::npos; at = m.find(" cuda", at)) m.replace(at, 5, " host");
  return m;
}

struct LinearCase {
  std::function<void(ExecutionContext&, Device)> call;
  const char* mentions;
};

Tensor make(std::vector<std::int64_t> shape, DType dtype, Device device, const char* name) {
  return Tensor::zeros(std::move(shape), dtype, device, name);
}

}  // namespace

TEST(SharedOpChecks, BadInputGetsTheSameErrorOnEveryBackendBeforeDispatch) {
  load_backend_library(FTRAIN_TEST_FAKE_BACKEND);
  ASSERT_NE(find_backend(Device::cuda), nullptr);
  ExecutionOptions o;
  o.device = Device::cuda;
  ExecutionContext cuda_ctx(o);

  const std::vector<LinearCase> cases = {
      {[](ExecutionContext& ctx, Device d) {
         Tensor x = make({4, 6}, DType::f32, d, "act"), w = make({3, 5}, DType::f32, d, "proj.weight");
         Tensor y = make({4, 3}, DType::f32, d, "y");
         ops::linear_forward(ctx, x, w, nullptr, y);
       },
       "must be [..., 5] to match w"},
      {[](ExecutionContext& ctx, Device d) {
         Tensor x = make({4, 6}, DType::f32, d, "act"), w = make({3, 6}, DType::f32, d, "proj.weight");
         Tensor y = make({4, 3}, DType::f32, d, "y"), b = make({4}, DType::f32, d, "proj.bias");
         ops::linear_forward(ctx, x, w, &b, y);
       },
       "proj.bias"},
      {[](ExecutionContext& ctx, Device d) {
         // x of width 0 against a w of width 0: no rows, never a division by zero.
         Tensor x = make({4, 0}, DType::f32, d, "act"), w = make({3, 0}, DType::f32, d, "proj.weight");
         Tensor y = make({4, 3}, DType::f32, d, "y");
         ops::linear_forward(ctx, x, w, nullptr, y);
       },
       "must have 0 rows like x"},
      {[](ExecutionContext& ctx, Device d) {
         Tensor x = make({4, 6}, DType::f32, d, "act"), w = make({3, 6}, DType::f32, d, "proj.weight");
         Tensor dy = make({4, 3}, DType::f32, d, "dy"), dw = make({3, 6}, DType::i32, d, "grad");
         ops::linear_backward(ctx, x, w, dy, nullptr, dw, nullptr);
       },
       "grad"},
      {[](ExecutionContext& ctx, Device d) {
         Tensor x = make({4, 6}, DType::f32, d, "act"), w = make({3, 6}, DType::f32, d, "proj.weight");
         Tensor dy = make({4, 3}, DType::f32, d, "dy"), dw = make({3, 6}, DType::f32, d, "dw");
         Tensor db = make({4}, DType::f32, d, "proj.bias.grad");
         ops::linear_backward(ctx, x, w, dy, nullptr, dw, &db);
       },
       "one per output feature of w"},
  };
  for (const LinearCase& c : cases) {
    const std::string on_host = error_of([&] { c.call(host_context(), Device::host); });
    const std::string on_cuda = error_of([&] { c.call(cuda_ctx, Device::cuda); });
    EXPECT_NE(on_host.find(c.mentions), std::string::npos) << on_host;
    EXPECT_EQ(on_cuda.find("reached the fake backend"), std::string::npos) << on_cuda;
    EXPECT_EQ(as_if_on_host(on_cuda), on_host);
  }

  // Good input passes the checks and reaches the backend.
  Tensor x = make({4, 6}, DType::f32, Device::cuda, "act"), w = make({3, 6}, DType::f32, Device::cuda, "w");
  Tensor y = make({4, 3}, DType::f32, Device::cuda, "y");
  const std::string m = error_of([&] { ops::linear_forward(cuda_ctx, x, w, nullptr, y); });
  EXPECT_NE(m.find("op linear_forward reached the fake backend"), std::string::npos) << m;
  unregister_backend(Device::cuda);
}
