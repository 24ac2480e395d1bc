// FP8 GEMM throughput of the CUDA backend (cuBLASLt FP8 plans, E4M3 x E4M3
// forward with fast accumulation; E4M3 x E5M2 dgrad and wgrad on the
// transposed copies) next to the BF16 linear on the same shapes, in TFLOP/s.
// share/bench/fp8_gemm_vs_torch.sh runs it beside torch._scaled_mm.
//
//   bench_fp8_gemm [iterations]         (shapes: Llama 3.2 1B / 3B linears at 4096 tokens)
//
// Without a usable CUDA GPU it says why and exits 2: no number is made up.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/backend_registry.hpp"
#include "kernels/ops.hpp"
#include "runtime/backend_library.hpp"
#include "runtime/execution_context.hpp"

using namespace ftrain;

namespace {

struct Shape3 {
  const char* name;
  std::int64_t tokens, in, out;
};

template <class F>
double seconds_per_call(ExecutionContext& ctx, int iterations, F f) {
  f();  // plan, heuristic, workspace
  ctx.synchronize();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) f();
  ctx.synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iterations;
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 50;
  if (find_backend(Device::cuda) == nullptr) {
    std::fprintf(stderr, "bench_fp8_gemm: no usable CUDA GPU: %s\n", describe_backend_search().c_str());
    return 2;
  }
  ExecutionOptions o;
  o.device = Device::cuda;
  ExecutionContext ctx(o);
  const std::vector<Shape3> shapes = {
      {"1B q/o_proj", 4096, 2048, 2048},  {"1B k/v_proj", 4096, 2048, 512},  {"1B gate/up", 4096, 2048, 8192},
      {"1B down", 4096, 8192, 2048},      {"3B q/o_proj", 4096, 3072, 3072}, {"3B gate/up", 4096, 3072, 8192},
      {"3B down", 4096, 8192, 3072},      {"8192^3", 8192, 8192, 8192},
  };
  std::printf("%-14s %6s %6s %6s  %12s %12s %12s %12s\n", "shape", "tokens", "in", "out", "bf16 fwd", "fp8 fwd",
              "fp8 dgrad", "fp8 wgrad");
  for (const Shape3& s : shapes) {
    const double flops = 2.0 * static_cast<double>(s.tokens) * static_cast<double>(s.in) * static_cast<double>(s.out);
    Tensor x = Tensor::empty({s.tokens, s.in}, DType::bf16, Device::cuda);
    Tensor w = Tensor::empty({s.out, s.in}, DType::bf16, Device::cuda);
    Tensor dy = Tensor::empty({s.tokens, s.out}, DType::bf16, Device::cuda);
    ops::fill(ctx, x, 0.5f);
    ops::fill(ctx, w, 0.25f);
    ops::fill(ctx, dy, 0.125f);
    Tensor y = Tensor::empty({s.tokens, s.out}, DType::bf16, Device::cuda);
    Tensor dx = Tensor::empty({s.tokens, s.in}, DType::bf16, Device::cuda);
    Tensor dw = Tensor::zeros({s.out, s.in}, DType::f32, Device::cuda);
    auto scalar = [&](float v) {
      Tensor t = Tensor::empty({1}, DType::f32, Device::cuda);
      ops::fill(ctx, t, v);
      return t;
    };
    auto fp8 = [&](const Tensor& src, DType format) {
      Fp8Tensor q{Tensor::empty(src.shape(), format, Device::cuda), scalar(1.0f), scalar(1.0f), Tensor(),
                  Tensor::empty({src.dim(1), src.dim(0)}, format, Device::cuda)};
      ops::cast_to_fp8(ctx, src, q);
      return q;
    };
    Fp8Tensor xq = fp8(x, DType::fp8_e4m3), wq = fp8(w, DType::fp8_e4m3), dyq = fp8(dy, DType::fp8_e5m2);
    const double bf16 = seconds_per_call(ctx, iterations, [&] { ops::linear_forward(ctx, x, w, nullptr, y); });
    const double fwd = seconds_per_call(ctx, iterations, [&] { ops::fp8_linear_forward(ctx, xq, wq, nullptr, y); });
    // Backward = dgrad + wgrad; wgrad alone by passing no dx.
    const double wgrad =
        seconds_per_call(ctx, iterations, [&] { ops::fp8_linear_backward(ctx, xq, wq, dyq, dy, nullptr, dw, nullptr); });
    const double both =
        seconds_per_call(ctx, iterations, [&] { ops::fp8_linear_backward(ctx, xq, wq, dyq, dy, &dx, dw, nullptr); });
    const double dgrad = both - wgrad;
    std::printf("%-14s %6lld %6lld %6lld  %9.1f TF %9.1f TF %9.1f TF %9.1f TF\n", s.name,
                static_cast<long long>(s.tokens), static_cast<long long>(s.in), static_cast<long long>(s.out),
                flops / bf16 / 1e12, flops / fwd / 1e12, flops / dgrad / 1e12, flops / wgrad / 1e12);
  }
  return 0;
}
