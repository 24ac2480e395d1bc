// Micro-benchmark of the host flash attention (not a test: it asserts
// nothing and its numbers depend on the machine).
//
//   bench_attention [--documents N] [B T H D [repeats]]     defaults: 1 512 8 64 5
//
// --documents N adds causal rows with the document mask of a packed window
// cut into N equal documents (issue 39), and the time saved against the
// plain causal row: key tiles outside a query tile's document are skipped.
//
// Times attention_forward and attention_backward for causal and full
// attention in f32 and bf16 storage, best of `repeats`, and prints GFLOP/s
// with FlashAttention's accounting: forward 4 B H T^2 D (the two GEMMs
// Q K^T and P V), backward 2.5 times that (five GEMMs), halved when causal.
#include <Kokkos_Core.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
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

struct Timing {
  double forward = 0, backward = 0;
};

// documents: 0 = no mask, else N equal documents per row (the last takes the
// remainder).
Timing run(std::int64_t B, std::int64_t T, std::int64_t H, std::int64_t D, int repeats, bool causal, DType dtype,
           std::int64_t documents) {
  const Shape shape{B, T, H, D};
  Tensor q = random_tensor(shape, dtype, 1), k = random_tensor(shape, dtype, 2), v = random_tensor(shape, dtype, 3);
  Tensor dout = random_tensor(shape, dtype, 4);
  Tensor out = Tensor::empty(shape, dtype), dq = Tensor::empty(shape, dtype), dk = Tensor::empty(shape, dtype),
         dv = Tensor::empty(shape, dtype);
  Tensor lse = Tensor::empty({B, H, T}, DType::f32);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  Tensor ids = Tensor::empty({B, T}, DType::i32);
  const std::int64_t length = documents > 0 ? std::max<std::int64_t>(T / documents, 1) : T;
  for (std::int64_t i = 0; i < B * T; ++i)
    ids.data_as<std::int32_t>()[i] = static_cast<std::int32_t>(std::min((i % T) / length, std::max<std::int64_t>(documents - 1, 0)));
  const Tensor* docs = documents > 0 ? &ids : nullptr;

  host::attention_forward(q, k, v, causal, docs, scale, out, lse);  // warm-up
  const double t_fwd = best_seconds(repeats, [&] { host::attention_forward(q, k, v, causal, docs, scale, out, lse); });
  const double t_bwd = best_seconds(
      repeats, [&] { host::attention_backward(q, k, v, out, lse, dout, causal, docs, scale, dq, dk, dv); });

  // The FLOPs the mask needs: causal T^2/2 per document of T/N tokens.
  const double pairs = documents > 0 ? static_cast<double>(T * T) * 0.5 / static_cast<double>(documents)
                                      : static_cast<double>(T * T) * (causal ? 0.5 : 1.0);
  const double fwd_flops = 4.0 * static_cast<double>(B * H * D) * pairs;
  const double bwd_flops = 2.5 * fwd_flops;
  char label[32];
  std::snprintf(label, sizeof label, documents > 0 ? "docs%lld" : (causal ? "causal" : "full"),
                static_cast<long long>(documents));
  std::printf("%-6s %-6s fwd %8.3f ms %7.2f GFLOP/s | bwd %8.3f ms %7.2f GFLOP/s | fwd+bwd %7.2f GFLOP/s\n",
              std::string(dtype_name(dtype)).c_str(), label, t_fwd * 1e3, fwd_flops / t_fwd * 1e-9,
              t_bwd * 1e3, bwd_flops / t_bwd * 1e-9, (fwd_flops + bwd_flops) / (t_fwd + t_bwd) * 1e-9);
  return {t_fwd, t_bwd};
}

}  // namespace

int main(int argc, char** argv) {
  Kokkos::initialize(argc, argv);
  {
    std::int64_t B = 1, T = 512, H = 8, D = 64, documents = 0;
    int repeats = 5;
    if (argc >= 3 && std::string(argv[1]) == "--documents") {
      documents = std::atoll(argv[2]);
      argv[2] = argv[0];
      argv += 2;
      argc -= 2;
    }
    if (argc >= 5) {
      B = std::atoll(argv[1]);
      T = std::atoll(argv[2]);
      H = std::atoll(argv[3]);
      D = std::atoll(argv[4]);
    }
    if (argc >= 6) repeats = std::atoi(argv[5]);
    std::printf("host flash attention B=%lld T=%lld H=%lld D=%lld (best of %d)\n", static_cast<long long>(B),
                static_cast<long long>(T), static_cast<long long>(H), static_cast<long long>(D), repeats);
    for (DType dtype : {DType::f32, DType::bf16}) {
      const Timing causal = run(B, T, H, D, repeats, true, dtype, 0);
      run(B, T, H, D, repeats, false, dtype, 0);
      if (documents > 0) {
        const Timing masked = run(B, T, H, D, repeats, true, dtype, documents);
        std::printf("%-6s %lld documents: fwd %.2fx, bwd %.2fx faster than causal (%.0f%% of fwd+bwd time saved)\n",
                    std::string(dtype_name(dtype)).c_str(), static_cast<long long>(documents),
                    causal.forward / masked.forward, causal.backward / masked.backward,
                    100.0 * (1.0 - (masked.forward + masked.backward) / (causal.forward + causal.backward)));
      }
    }
  }
  Kokkos::finalize();
  return 0;
}
