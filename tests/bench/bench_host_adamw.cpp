// Micro-benchmark of the host AdamW (not a test: it asserts nothing and its
// numbers depend on the machine): the engine's multi-tensor update
// (ops::adamw_update_chunks over one flat shard, f32 param, grad, m, v) on
// the host backend, the op a CPU-side optimizer step (ZeRO-Offload) runs.
//
//   bench_host_adamw [elements [repeats]]     defaults: 67108864 (64M), 5
//
// Threads: the host backend's (OMP_NUM_THREADS / the rank's bound cores),
// printed. Prints the best of `repeats` updates as elements (parameters)
// per second in all and per thread, and the memory traffic it implies
// (16 bytes read + 12 written per element).
#include <Kokkos_Core.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/tensor.hpp"
#include "kernels/adamw_chunks.hpp"
#include "kernels/ops.hpp"
#include "runtime/execution_context.hpp"

int main(int argc, char** argv) {
  Kokkos::initialize(argc, argv);
  {
    using namespace ftrain;
    const std::int64_t n = argc > 1 ? std::atoll(argv[1]) : std::int64_t{64} << 20;
    const int repeats = argc > 2 ? std::atoi(argv[2]) : 5;
    ExecutionContext& ctx = host_context();
    Tensor param = Tensor::empty({n}, DType::f32), grad = Tensor::empty({n}, DType::f32);
    Tensor m = Tensor::zeros({n}, DType::f32), v = Tensor::zeros({n}, DType::f32);
    for (std::int64_t i = 0; i < n; ++i) {  // touch every page before timing
      param.data_as<float>()[i] = 0.01f * static_cast<float>(i % 97);
      grad.data_as<float>()[i] = 1e-3f * static_cast<float>(i % 89) - 0.04f;
    }
    // Two segments, with and without weight decay, as a block's flat shard has.
    const Tensor chunks = adamw_chunk_table({{0, n / 2, true}, {n / 2, n - n / 2, false}}, Device::host, "bench.chunks");
    double best = 1e300;
    for (int r = 0; r <= repeats; ++r) {  // r == 0: warm-up
      const auto start = std::chrono::steady_clock::now();
      ops::adamw_update_chunks(ctx, param, grad, m, v, chunks, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, r + 1, 1.0f);
      ctx.synchronize();
      const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
      if (r > 0) best = std::min(best, elapsed.count());
    }
    const int threads = Kokkos::DefaultHostExecutionSpace().concurrency();
    const double per_second = static_cast<double>(n) / best;
    std::printf("host AdamW (adamw_update_chunks, f32): %lld elements, %d thread(s): %.4f s per update, "
                "%.3g elements/s, %.3g elements/s per thread, %.1f GB/s\n",
                static_cast<long long>(n), threads, best, per_second, per_second / threads, per_second * 28.0 / 1e9);
  }
  Kokkos::finalize();
  return 0;
}
