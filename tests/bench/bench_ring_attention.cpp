// Ring attention (layers/context_parallel_attention.hpp) on the ranks of
// MPI_COMM_WORLD as one context group (not a test: it asserts nothing and
// its numbers depend on the machine).
//
//   mpirun -np C bench_ring_attention [T Hq Hkv D repeats]    defaults: 8192 8 8 64 3
//
// Every rank holds its T/C tokens (the causal load-balancing chunks) and
// runs the causal ring forward and backward in bf16 storage; printed: the
// fwd+bwd time (best of `repeats`, slowest rank), tokens/s of the whole
// sequence, and per rank the growth of the resident set's high-water mark
// during one fwd+bwd beyond its inputs (outputs, gradients and the ring's
// buffers: what falls by C) next to the bytes those take by their shapes. At np 1 it also times the single-sequence
// attention op, the kernel a run without context parallelism uses.
#include <Kokkos_Core.hpp>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "core/memory.hpp"
#include "core/rng.hpp"
#include "fsdp/parallel_groups.hpp"
#include "kernels/ops.hpp"
#include "layers/context_parallel_attention.hpp"

using namespace ftrain;

namespace {

Tensor random_tensor(const Shape& shape, std::uint64_t seed) {
  std::vector<float> values(static_cast<std::size_t>(shape_numel(shape)));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(rng::normal(seed, 0, i));
  return from_floats(shape, values, DType::bf16);
}

// Resets VmHWM to the current resident set (Linux: clear_refs 5).
void reset_peak_rss() { std::ofstream("/proc/self/clear_refs") << "5"; }

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Kokkos::initialize(argc, argv);
  {
    const auto arg = [&](int i, std::int64_t fallback) { return argc > i ? std::atoll(argv[i]) : fallback; };
    const std::int64_t T = arg(1, 8192), Hq = arg(2, 8), Hkv = arg(3, 8), D = arg(4, 64);
    const int repeats = static_cast<int>(arg(5, 3));
    CommunicatorGroup group(std::make_unique<MpiCommunicator>(MPI_COMM_WORLD), "context group");
    const int C = group.size(), r = group.rank();
    const std::int64_t n = T / C;
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    ExecutionContext& ctx = host_context();
    Tensor positions = layers::context_parallel_positions(1, T, C, r);

    double best = 1e300, peak_growth = 0;
    for (int rep = 0; rep < repeats; ++rep) {
      const Shape qs{1, n, Hq, D}, ks{1, n, Hkv, D};
      Tensor q = random_tensor(qs, 1 + r), k = random_tensor(ks, 2 + r), v = random_tensor(ks, 3 + r);
      Tensor dout = random_tensor(qs, 4 + r);
      // The inputs exist before (they are the layer's inputs, T/C long too);
      // the growth is what the attention adds: outputs, gradients, buffers.
      MPI_Barrier(MPI_COMM_WORLD);
      reset_peak_rss();
      const std::int64_t before = current_rss_bytes();
      const auto start = std::chrono::steady_clock::now();
      {
        Tensor out = Tensor::empty(qs, DType::bf16), lse = Tensor::empty({1, Hq, n}, DType::f32);
        Tensor dq = Tensor::empty(qs, DType::bf16), dk = Tensor::empty(ks, DType::bf16), dv = Tensor::empty(ks, DType::bf16);
        layers::context_parallel_attention_forward(ctx, group, q, k, v, positions, nullptr, true, scale, out, lse);
        layers::context_parallel_attention_backward(ctx, group, q, k, v, out, lse, dout, positions, nullptr, true, scale,
                                                    dq, dk, dv);
        ctx.synchronize();
        group.drain();
      }
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      double slowest = 0;
      MPI_Allreduce(&seconds, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      best = std::min(best, slowest);
      peak_growth = std::max(peak_growth, static_cast<double>(peak_rss_bytes() - before));
    }
    double growth_max = 0;
    MPI_Allreduce(&peak_growth, &growth_max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    // By shape, at the backward's peak, beyond the inputs: out, dq, dk, dv
    // (bf16) of n tokens, lse and the f32 dq accumulator, the two K/V
    // receive buffers (bf16) and the three f32 [dK | dV] buffers of the ring.
    const double q_elems = static_cast<double>(n * Hq * D), kv_elems = static_cast<double>(n * Hkv * D);
    const double tensors = 2 * (2 * q_elems + 2 * kv_elems) + 4.0 * Hq * n + 4 * q_elems + 2 * 2 * 2 * kv_elems +
                           6 * 4 * kv_elems;
    if (r == 0)
      std::printf("C %d  T %lld  Hq %lld  Hkv %lld  D %lld  ring fwd+bwd %.3f s  %.0f tokens/s  "
                  "peak RSS growth/rank %.1f MiB  tensors by shape/rank %.1f MiB\n",
                  C, static_cast<long long>(T), static_cast<long long>(Hq), static_cast<long long>(Hkv),
                  static_cast<long long>(D), best, static_cast<double>(T) / best, to_mib(static_cast<std::int64_t>(growth_max)),
                  tensors / (1024.0 * 1024.0));
    if (C == 1) {
      double op_best = 1e300;
      for (int rep = 0; rep < repeats; ++rep) {
        const Shape qs{1, T, Hq, D}, ks{1, T, Hkv, D};
        Tensor q = random_tensor(qs, 1), k = random_tensor(ks, 2), v = random_tensor(ks, 3), dout = random_tensor(qs, 4);
        Tensor out = Tensor::empty(qs, DType::bf16), lse = Tensor::empty({1, Hq, T}, DType::f32);
        Tensor dq = Tensor::empty(qs, DType::bf16), dk = Tensor::empty(ks, DType::bf16), dv = Tensor::empty(ks, DType::bf16);
        const auto start = std::chrono::steady_clock::now();
        ops::attention_forward(ctx, q, k, v, true, nullptr, scale, out, lse);
        ops::attention_backward(ctx, q, k, v, out, lse, dout, true, nullptr, scale, dq, dk, dv);
        ctx.synchronize();
        op_best = std::min(op_best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
      std::printf("single-sequence attention op fwd+bwd %.3f s  %.0f tokens/s\n", op_best, static_cast<double>(T) / op_best);
    }
  }
  Kokkos::finalize();
  MPI_Finalize();
  return 0;
}
