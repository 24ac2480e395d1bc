// Micro-benchmark of the host flash attention (not a test: it asserts
// nothing and its numbers depend on the machine).
//
//   bench_attention [B T H D [repeats]]     defaults: 1 512 8 64 5
//
// Times attention_forward and attention_backward for causal and full
// attention in f32 and bf16 storage, best of `repeats`, and prints GFLOP/s
// with FlashAttention's accounting: forward 4 B H T^2 D (the two GEMMs
// Q K^T and P V), backward 2.5 times that (five GEMMs), halved when causal.
#include <Kokkos_Core.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "core/rng.hpp"
#include "core/tensor.hpp"
#include "kernels/host/host_ops.hpp"

namespace {

using namespace ftrain;

Tensor random_tensor(const Shape& shape, DType dtype, std::uint64_t seed) {
  std::vector<float> values(static_cast<std::size_t>(shape_numel(shape)));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(rng::normal(seed, 0, i));
  return from_floats(shape, values, dtype);
}

double best_seconds(int repeats, const std::function<void()>& body) {
  double best = 1e300;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    body();
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    best = std::min(best, elapsed.count());
  }
  return best;
}

void run(std::int64_t B, std::int64_t T, std::int64_t H, std::int64_t D, int repeats, bool causal, DType dtype) {
  const Shape shape{B, T, H, D};
  Tensor q = random_tensor(shape, dtype, 1), k = random_tensor(shape, dtype, 2), v = random_tensor(shape, dtype, 3);
  Tensor dout = random_tensor(shape, dtype, 4);
  Tensor out = Tensor::empty(shape, dtype), dq = Tensor::empty(shape, dtype), dk = Tensor::empty(shape, dtype),
         dv = Tensor::empty(shape, dtype);
  Tensor lse = Tensor::empty({B, H, T}, DType::f32);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));

  host::attention_forward(q, k, v, causal, nullptr, scale, out, lse);  // warm-up
  const double t_fwd = best_seconds(repeats, [&] { host::attention_forward(q, k, v, causal, nullptr, scale, out, lse); });
  const double t_bwd = best_seconds(
      repeats, [&] { host::attention_backward(q, k, v, out, lse, dout, causal, nullptr, scale, dq, dk, dv); });

  const double fwd_flops = 4.0 * static_cast<double>(B * H * D) * static_cast<double>(T * T) * (causal ? 0.5 : 1.0);
  const double bwd_flops = 2.5 * fwd_flops;
  std::printf("%-6s %-6s fwd %8.3f ms %7.2f GFLOP/s | bwd %8.3f ms %7.2f GFLOP/s | fwd+bwd %7.2f GFLOP/s\n",
              std::string(dtype_name(dtype)).c_str(), causal ? "causal" : "full", t_fwd * 1e3, fwd_flops / t_fwd * 1e-9,
              t_bwd * 1e3, bwd_flops / t_bwd * 1e-9, (fwd_flops + bwd_flops) / (t_fwd + t_bwd) * 1e-9);
}

}  // namespace

int main(int argc, char** argv) {
  Kokkos::initialize(argc, argv);
  {
    std::int64_t B = 1, T = 512, H = 8, D = 64;
    int repeats = 5;
    if (argc >= 5) {
      B = std::atoll(argv[1]);
      T = std::atoll(argv[2]);
      H = std::atoll(argv[3]);
      D = std::atoll(argv[4]);
    }
    if (argc >= 6) repeats = std::atoi(argv[5]);
    std::printf("host flash attention B=%lld T=%lld H=%lld D=%lld (best of %d)\n", static_cast<long long>(B),
                static_cast<long long>(T), static_cast<long long>(H), static_cast<long long>(D), repeats);
    for (DType dtype : {DType::f32, DType::bf16})
      for (bool causal : {true, false}) run(B, T, H, D, repeats, causal, dtype);
  }
  Kokkos::finalize();
  return 0;
}
