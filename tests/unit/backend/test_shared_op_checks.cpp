// An op's argument checks run once, in ops::<op> before the backend's entry
// (kernels/op_checks.hpp), so bad input gets the same error on the host
// backend and on the CUDA dispatch path. The CUDA path is the stand-in CUDA
// backend (fake_cuda_backend.cpp): every op entry of it throws "reached the
// fake backend", so an error without those words was raised before dispatch.
#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <string>
#include <type_traits>
#include <utility>

#include "base/error.hpp"
#include "core/tensor.hpp"
#include "kernels/backend_registry.hpp"
#include "kernels/fp8_tensor.hpp"
#include "kernels/op_checks.hpp"
#include "kernels/ops.hpp"
#include "runtime/backend_library.hpp"
#include "runtime/execution_context.hpp"
#include "support/error_of.hpp"

using namespace ftrain;

namespace {

using ftrain::testing::error_of;

// The message with the device word of every tensor description made the host's.
std::string as_if_on_host(std::string m) {
  for (std::size_t at = m.find(" cuda"); at != std::string::npos; at = m.find(" cuda", at)) m.replace(at, 5, " host");
  return m;
}

struct OpCase {
  std::function<void(ExecutionContext&, Device)> call;
  const char* mentions;
};

Tensor make(std::vector<std::int64_t> shape, DType dtype, Device device, const char* name) {
  return Tensor::zeros(std::move(shape), dtype, device, name);
}

// An e4m3 descriptor of `shape` with its f32[1] scale and scale_inv.
Fp8Tensor fp8(std::vector<std::int64_t> shape, Device device, const char* name) {
  return {make(std::move(shape), DType::fp8_e4m3, device, name), make({1}, DType::f32, device, "scale"),
          make({1}, DType::f32, device, "scale_inv"), Tensor(), Tensor()};
}

}  // namespace

// Whether ops::<op>'s call of op_checks::<op> (with the op's parameter types,
// as dispatch.cpp makes it) reaches a shared check or the fallback.
template <class Signature>
struct CheckOf;
template <class... Params>
struct CheckOf<void(Params...)> {
  template <class Call>
  static constexpr bool shared = !std::is_same_v<std::invoke_result_t<Call, Params...>, op_checks::NoSharedCheck>;
};

TEST(SharedOpChecks, EveryOpIsCheckedBeforeDispatch) {
  std::set<std::string> fallback;
#define FTRAIN_LIST_FALLBACK(R, NAME, PARAMS, ARGS, DEVICE_TENSOR)                                           \
  if (!CheckOf<void(FTRAIN_UNPAREN PARAMS)>::shared<decltype([](auto&&... a) { return op_checks::NAME(a...); })>) \
    fallback.insert(#NAME);
  FTRAIN_OP_LIST(FTRAIN_LIST_FALLBACK)
#undef FTRAIN_LIST_FALLBACK
  // Every op is checked once, in ops::<op>; none only inside each backend.
  EXPECT_EQ(fallback, std::set<std::string>{});
}

TEST(SharedOpChecks, BadInputGetsTheSameErrorOnEveryBackendBeforeDispatch) {
  load_backend_library(FTRAIN_TEST_FAKE_BACKEND);
  ASSERT_NE(find_backend(Device::cuda), nullptr);
  ExecutionOptions o;
  o.device = Device::cuda;
  ExecutionContext cuda_ctx(o);

  const std::vector<OpCase> cases = {
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
      {[](ExecutionContext& ctx, Device d) {
         Tensor x = make({2, 4}, DType::f32, d, "x"), w = make({3}, DType::f32, d, "norm.weight");
         Tensor y = make({2, 4}, DType::f32, d, "y"), rstd = make({2}, DType::f32, d, "rstd");
         ops::rmsnorm_forward(ctx, x, w, 1e-5f, y, rstd);
       },
       "norm.weight"},
      {[](ExecutionContext& ctx, Device d) {
         Tensor x = make({2, 4}, DType::f32, d, "x"), w = make({4}, DType::f32, d, "w");
         Tensor mean = make({2}, DType::bf16, d, "mean"), rstd = make({2}, DType::f32, d, "rstd");
         Tensor dy = make({2, 4}, DType::f32, d, "dy"), dx = make({2, 4}, DType::f32, d, "dx");
         Tensor dw = make({4}, DType::f32, d, "dw");
         ops::layernorm_backward(ctx, x, w, mean, rstd, dy, dx, dw, nullptr);
       },
       "must be f32"},
      {[](ExecutionContext& ctx, Device d) {
         Tensor gate = make({2, 4}, DType::f32, d, "gate"), up = make({2, 5}, DType::f32, d, "up");
         Tensor out = make({2, 4}, DType::f32, d, "out");
         ops::swiglu_forward(ctx, gate, up, out);
       },
       "must have the shape of gate"},
      {[](ExecutionContext& ctx, Device d) {
         Tensor x = make({3}, DType::f32, d, "x"), dy = make({3}, DType::f32, d, "dy");
         Tensor dx = make({3}, DType::i32, d, "dx");
         ops::gelu_backward(ctx, x, dy, GeluApproximation::tanh, dx);
       },
       "must be f32 or bf16"},
      {[](ExecutionContext& ctx, Device d) {
         Tensor tokens = make({2}, DType::f32, d, "tokens"), table = make({5, 3}, DType::f32, d, "embed");
         Tensor out = make({2, 3}, DType::f32, d, "out");
         ops::embedding_forward(ctx, tokens, table, out);
       },
       "must be i32"},
      {[](ExecutionContext& ctx, Device d) {
         Tensor x = make({1, 2, 1, 3}, DType::f32, d, "q"), inv_freq = make({1}, DType::f32, d, "inv_freq");
         ops::rope_forward(ctx, x, inv_freq, 0, nullptr, x);
       },
       "must be even"},
      {[](ExecutionContext& ctx, Device d) {
         Tensor x = make({2, 3}, DType::f32, d, "x"), y = make({2, 3}, DType::f32, d, "y");
         ops::dropout(ctx, x, 1.0f, 7, 0, 0, y);
       },
       "is outside [0, 1)"},
      {[](ExecutionContext& ctx, Device d) {
         Tensor images = make({1, 4, 6, 3}, DType::f32, d, "pixels"), patches = make({6, 12}, DType::f32, d, "p");
         ops::patchify_forward(ctx, images, 4, patches);
       },
       "is not a whole number of 4x4 patches"},
      {[](ExecutionContext& ctx, Device d) {
         Tensor prefix = make({1, 5}, DType::f32, d, "cls"), x = make({2, 3, 4}, DType::f32, d, "x");
         Tensor out = make({2, 4, 4}, DType::f32, d, "out");
         ops::prepend_rows_forward(ctx, prefix, x, out);
       },
       "must be [R, 4]"},
      {[](ExecutionContext& ctx, Device d) {
         Tensor dout = make({2, 3, 4}, DType::f32, d, "dout"), dbias = make({3, 5}, DType::f32, d, "pos.grad");
         ops::broadcast_add_backward(ctx, dout, dbias);
       },
       "pos.grad"},
      {[](ExecutionContext& ctx, Device d) {
         Tensor x = make({2, 3, 4}, DType::f32, d, "x"), out = make({2, 2, 4}, DType::f32, d, "cls_out");
         ops::slice_rows_forward(ctx, x, 2, out);
       },
       "is not rows 2 .. 4"},
      {[](ExecutionContext& ctx, Device d) {
         Tensor a = make({2, 3}, DType::f32, d, "a"), b = make({3, 2}, DType::f32, d, "residual");
         Tensor out = make({2, 3}, DType::f32, d, "out");
         ops::add(ctx, a, b, out);
       },
       "residual"},
      {[](ExecutionContext& ctx, Device d) {
         Tensor x = make({4}, DType::i32, d, "counts");
         ops::fill(ctx, x, 1.0f);
       },
       "must have a float dtype"},
      {[](ExecutionContext& ctx, Device d) {
         Tensor src = make({4}, DType::f32, d, "src"), dst = make({5}, DType::bf16, d, "dst");
         ops::cast(ctx, src, dst);
       },
       "same as src"},
      {[](ExecutionContext& ctx, Device d) {
         Tensor x = make({4}, DType::f32, d, "x"), out = make({2}, DType::f32, d, "loss");
         ops::sum(ctx, x, out);
       },
       "must be f32[1]"},
      {[](ExecutionContext& ctx, Device d) {
         Tensor sum_sq = make({1}, DType::f64, d, "sum_sq"), norm = make({1}, DType::f64, d, "norm");
         Tensor scale = make({1}, DType::f32, d, "scale"), flag = make({1}, DType::i64, d, "flag");
         ops::clip_coefficient(ctx, sum_sq, 1.0, 0, norm, scale, flag);
       },
       "must be >= 1"},
      {[](ExecutionContext& ctx, Device d) {
         Tensor p = make({8}, DType::f32, d, "shard"), g = make({8}, DType::f32, d, "g");
         Tensor m = make({8}, DType::f32, d, "m"), v = make({8}, DType::f32, d, "v");
         Tensor chunks = make({1, 2}, DType::i64, d, "chunks");
         ops::adamw_update_chunks(ctx, p, g, m, v, chunks, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 1, 1.0f);
       },
       "must be [chunks, 3]"},
      {[](ExecutionContext& ctx, Device d) {
         Tensor q = make({1, 4, 3, 8}, DType::f32, d, "q"), k = make({1, 4, 2, 8}, DType::f32, d, "k");
         Tensor out = make({1, 4, 3, 8}, DType::f32, d, "out"), lse = make({1, 3, 4}, DType::f32, d, "lse");
         ops::attention_forward(ctx, q, k, k, true, nullptr, 1.0f, out, lse);
       },
       "must be a multiple of the kv heads"},
      {[](ExecutionContext& ctx, Device d) {
         Tensor h = make({4, 6}, DType::f32, d, "h"), w = make({10, 6}, DType::f32, d, "lm_head");
         Tensor targets = make({4}, DType::f32, d, "labels");
         Tensor losses = make({4}, DType::f32, d, "losses"), lse = make({4}, DType::f32, d, "lse");
         ops::cross_entropy_forward(ctx, h, w, nullptr, targets, 8, losses, lse);
       },
       "labels"},
      {[](ExecutionContext& ctx, Device d) {
         Tensor h = make({4, 6}, DType::f32, d, "h"), w = make({10, 6}, DType::f32, d, "lm_head");
         Tensor targets = make({4}, DType::i32, d, "labels"), lse = make({4}, DType::f32, d, "lse");
         Tensor loss_scale = make({1}, DType::f32, d, "dy"), dh = make({4, 5}, DType::f32, d, "dh");
         Tensor dw = make({10, 6}, DType::f32, d, "dw");
         ops::cross_entropy_backward(ctx, h, w, nullptr, targets, lse, loss_scale, 8, dh, dw, nullptr);
       },
       "must have the shape of h"},
      {[](ExecutionContext& ctx, Device d) {
         Tensor x = make({2, 4}, DType::f32, d, "x");
         Fp8Tensor out = fp8({2, 4}, d, "codes");
         out.data = make({2, 4}, DType::bf16, d, "codes");
         ops::cast_to_fp8(ctx, x, out);
       },
       "must be fp8_e4m3 or fp8_e5m2"},
      {[](ExecutionContext& ctx, Device d) {
         Tensor data = make({2, 4}, DType::fp8_e4m3, d, "codes"), data_t = make({2, 4}, DType::fp8_e4m3, d, "t");
         ops::fp8_transpose(ctx, data, data_t);
       },
       "must be the transposed copy"},
      {[](ExecutionContext& ctx, Device d) {
         Tensor x = make({2, 4}, DType::f32, d, "x"), w = make({4}, DType::f32, d, "norm.weight");
         Tensor y = make({2, 4}, DType::bf16, d, "y"), rstd = make({2}, DType::f32, d, "rstd");
         Fp8Casts none;
         ops::rmsnorm_forward_fp8(ctx, x, w, 1e-5f, y, rstd, none);
       },
       "0 casts"},
      {[](ExecutionContext& ctx, Device d) {
         Tensor gate = make({2, 4}, DType::f32, d, "gate"), up = make({2, 4}, DType::f32, d, "up");
         Tensor out = make({2, 4}, DType::bf16, d, "out");
         Fp8Tensor cast = fp8({2, 4}, d, "codes");
         cast.data_t = make({4, 2}, DType::fp8_e4m3, d, "codes_t");
         ops::swiglu_forward_fp8(ctx, gate, up, out, cast);
       },
       "writes no transposed copy"},
      {[](ExecutionContext& ctx, Device d) {
         Fp8Tensor x = fp8({4, 6}, d, "x_codes"), w = fp8({3, 6}, d, "w_codes");
         Tensor y = make({4, 5}, DType::f32, d, "y_wrong");
         ops::fp8_linear_forward(ctx, x, w, nullptr, y);
       },
       "y_wrong"},
      {[](ExecutionContext& ctx, Device d) {
         Fp8Tensor x = fp8({4, 6}, d, "x_codes"), w = fp8({3, 6}, d, "w_codes"), dy = fp8({4, 3}, d, "dy_codes");
         Tensor dy_source = make({4, 3}, DType::bf16, d, "dy"), dw = make({3, 6}, DType::bf16, d, "proj.weight.grad");
         ops::fp8_linear_backward(ctx, x, w, dy, dy_source, nullptr, dw, nullptr);
       },
       "proj.weight.grad"},
      {[](ExecutionContext& ctx, Device d) {
         Tensor history = make({4, 3}, DType::f32, d, "amax_history"), scale = make({3}, DType::f32, d, "scale");
         Tensor scale_inv = make({3}, DType::f32, d, "scale_inv");
         ops::fp8_update_scales(ctx, history, scale, scale_inv, DType::fp8_e4m3, DType::fp8_e5m2, 65,
                                Fp8AmaxAlgo::max);
       },
       "must be in [0, 64]"},
  };
  for (const OpCase& c : cases) {
    const std::string on_host = error_of([&] { c.call(host_context(), Device::host); });
    const std::string on_cuda = error_of([&] { c.call(cuda_ctx, Device::cuda); });
    EXPECT_NE(on_host.find(c.mentions), std::string::npos) << on_host;
    EXPECT_EQ(on_host.find("reached the fake backend"), std::string::npos) << on_host;
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
