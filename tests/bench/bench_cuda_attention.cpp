// Micro-benchmark of the CUDA attention ops (not a test: it asserts nothing
// and its numbers depend on the GPU), the ftrain side of
// share/bench/gpu_attention.sh (PyTorch SDPA is the other).
//
//   bench_cuda_attention [B T Hq Hkv D [repeats [backend...]]] [--documents N]
//     defaults: 2 4096 32 8 64 (Llama 3.2 1B at seq 4096), 20, cudnn
//     backend: cudnn (attention_backend cudnn: the fused cuDNN SDPA) or reference
//     --documents N: each row is N packed documents of T / N tokens (the
//       last takes the remainder) under the document mask
//
// Times ops::attention_forward and attention_backward in bf16, causal and
// full, through the real op table (libftrain_cuda.so, so the cuDNN plan
// cache and the context's workspace are what a training step uses): each
// timing is `repeats` back-to-back calls between two synchronizations
// (launch overhead amortised), after one warm-up call that builds the plan.
// Prints TFLOP/s with FlashAttention's accounting: forward 4 B Hq T^2 D,
// backward 2.5 times that, halved when causal; with documents, the sum of
// each document's own (the work the mask leaves). Without a usable GPU it
// says so and exits 2.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <stdexcept>
#include <functional>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "core/rng.hpp"
#include "core/tensor.hpp"
#include "kernels/backend_registry.hpp"
#include "kernels/ops.hpp"
#include "runtime/backend_library.hpp"
#include "runtime/execution_context.hpp"

namespace {

using namespace ftrain;

Tensor random_bf16(const Shape& shape, std::uint64_t seed) {
  std::vector<float> values(static_cast<std::size_t>(shape_numel(shape)));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(rng::normal(seed, 0, i));
  return to_device(from_floats(shape, values, DType::bf16), Device::cuda);
}

double seconds_per_call(ExecutionContext& ctx, int repeats, const std::function<void()>& body) {
  body();  // warm-up: builds and caches the plan
  ctx.synchronize();
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < repeats; ++r) body();
  ctx.synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / repeats;
}

void run(const std::string& backend, std::int64_t B, std::int64_t T, std::int64_t Hq, std::int64_t Hkv,
         std::int64_t D, int repeats, bool causal, std::int64_t documents) {
  ExecutionOptions o;
  o.device = Device::cuda;
  if (backend != "auto" && backend != "cudnn" && backend != "reference")
    throw std::runtime_error("attention backend '" + backend + "': expected auto, cudnn or reference");
  o.attention_backend = backend == "cudnn"       ? AttentionBackend::cudnn
                        : backend == "reference" ? AttentionBackend::reference
                                                 : AttentionBackend::automatic;
  ExecutionContext ctx(o);
  const Shape qs{B, T, Hq, D}, ks{B, T, Hkv, D};
  Tensor q = random_bf16(qs, 1), k = random_bf16(ks, 2), v = random_bf16(ks, 3), dout = random_bf16(qs, 4);
  Tensor out = Tensor::zeros(qs, DType::bf16, Device::cuda), lse = Tensor::zeros({B, Hq, T}, DType::f32, Device::cuda);
  Tensor dq = Tensor::zeros(qs, DType::bf16, Device::cuda), dk = Tensor::zeros(ks, DType::bf16, Device::cuda),
         dv = Tensor::zeros(ks, DType::bf16, Device::cuda);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  // Document ids: N documents of T / N tokens per row, the last one longer.
  Tensor ids;
  double squares = static_cast<double>(T) * static_cast<double>(T);  // sum of each document's length^2
  if (documents > 0) {
    const std::int64_t length = std::max<std::int64_t>(T / documents, 1);
    std::vector<std::int32_t> host(static_cast<std::size_t>(B * T));
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t b = 0; b < B; ++b)
        host[static_cast<std::size_t>(b * T + t)] = static_cast<std::int32_t>(std::min(t / length, documents - 1));
    ids = Tensor::empty({B, T}, DType::i32);
    std::memcpy(ids.data(), host.data(), host.size() * sizeof(std::int32_t));
    ids = to_device(ids, Device::cuda);
    const double last = static_cast<double>(T - (documents - 1) * length);
    squares = static_cast<double>(documents - 1) * static_cast<double>(length * length) + last * last;
  }
  const Tensor* docs = documents > 0 ? &ids : nullptr;
  const double t_fwd =
      seconds_per_call(ctx, repeats, [&] { ops::attention_forward(ctx, q, k, v, causal, docs, scale, out, lse); });
  const double t_bwd = seconds_per_call(
      ctx, repeats, [&] { ops::attention_backward(ctx, q, k, v, out, lse, dout, causal, docs, scale, dq, dk, dv); });
  const double fwd_flops = 4.0 * static_cast<double>(B * Hq * D) * squares * (causal ? 0.5 : 1.0);
  const double bwd_flops = 2.5 * fwd_flops;
  if (documents > 0) std::printf("%lld documents/row ", static_cast<long long>(documents));
  std::printf("ftrain %-9s bf16 %-6s fwd %8.3f ms %7.1f TFLOP/s | bwd %8.3f ms %7.1f TFLOP/s | fwd+bwd %7.1f TFLOP/s\n",
              backend.c_str(), causal ? "causal" : "full", t_fwd * 1e3, fwd_flops / t_fwd * 1e-12, t_bwd * 1e3,
              bwd_flops / t_bwd * 1e-12, (fwd_flops + bwd_flops) / (t_fwd + t_bwd) * 1e-12);
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t B = 2, T = 4096, Hq = 32, Hkv = 8, D = 64, documents = 0;
  int repeats = 20;
  std::vector<std::string> backends;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--documents") {
      documents = std::atoll(argv[i + 1]);
      for (int j = i; j + 2 <= argc; ++j) argv[j] = argv[j + 2];
      argc -= 2;
      break;
    }
  if (argc >= 6) {
    B = std::atoll(argv[1]);
    T = std::atoll(argv[2]);
    Hq = std::atoll(argv[3]);
    Hkv = std::atoll(argv[4]);
    D = std::atoll(argv[5]);
  }
  if (argc >= 7) repeats = std::atoi(argv[6]);
  for (int i = 7; i < argc; ++i) backends.emplace_back(argv[i]);
  if (backends.empty()) backends.emplace_back("cudnn");
  if (find_backend(Device::cuda) == nullptr) {
    std::fprintf(stderr, "bench_cuda_attention: refusing to run: no usable CUDA GPU: %s\n",
                 describe_backend_search().c_str());
    return 2;
  }
  std::printf("ftrain CUDA attention B=%lld T=%lld Hq=%lld Hkv=%lld D=%lld (mean of %d calls)\n",
              static_cast<long long>(B), static_cast<long long>(T), static_cast<long long>(Hq),
              static_cast<long long>(Hkv), static_cast<long long>(D), repeats);
  try {
    for (const std::string& backend : backends)
      for (bool causal : {true, false}) run(backend, B, T, Hq, Hkv, D, repeats, causal, documents);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_cuda_attention: %s\n", e.what());
    return 1;
  }
  return 0;
}
