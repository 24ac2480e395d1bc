// All-gather time of one Llama decoder block's flat parameter: bf16 (the
// plain FSDP gather: cast the f32 master shard to bf16, all_gather) vs the
// FP8 all-gather (fsdp/fp8_all_gather.hpp: cast the shard to bf16 then to
// FP8 with each linear's weight scale, two all_gather_v). Run under mpirun
// by share/bench/fp8_all_gather.sh; not a test (prints numbers only).
//   mpirun -np 2 bench_fp8_all_gather [hidden intermediate kv_heads head_dim iterations]
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "fp8/recipe.hpp"
#include "fsdp/flat_parameter.hpp"
#include "fsdp/fp8_all_gather.hpp"
#include "kernels/ops.hpp"

using namespace ftrain;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Kokkos::initialize(argc, argv);
  {
    const auto arg = [&](int i, std::int64_t fallback) { return argc > i ? std::atoll(argv[i]) : fallback; };
    // Llama 3.2 1B's block by default: hidden 2048, intermediate 8192, 8 KV heads of 64.
    const std::int64_t h = arg(1, 2048), inter = arg(2, 8192), kv = arg(3, 8), hd = arg(4, 64);
    const int iterations = static_cast<int>(arg(5, 10));
    MpiCommunicator world(MPI_COMM_WORLD);
    const std::string p = "model.layers.0.";
    auto linear = [](std::string name, std::int64_t out, std::int64_t in) {
      ParamSpec s;
      s.name = std::move(name);
      s.shape = {out, in};
      return s;
    };
    ParamSpec norm;
    norm.name = p + "input_layernorm.weight";
    norm.shape = {h};
    ParamSpec norm2 = norm;
    norm2.name = p + "post_attention_layernorm.weight";
    const std::vector<ParamSpec> specs = {norm,
                                          linear(p + "self_attn.q_proj.weight", h, h),
                                          linear(p + "self_attn.k_proj.weight", kv * hd, h),
                                          linear(p + "self_attn.v_proj.weight", kv * hd, h),
                                          linear(p + "self_attn.o_proj.weight", h, h),
                                          norm2,
                                          linear(p + "mlp.gate_proj.weight", inter, h),
                                          linear(p + "mlp.up_proj.weight", inter, h),
                                          linear(p + "mlp.down_proj.weight", h, inter)};
    FlatParameter flat(1, "model.layers.0", specs, world.size(), world.rank());
    flat.master = Tensor::zeros({flat.shard_numel()}, DType::f32);
    float* m = flat.master.data_as<float>();
    for (std::int64_t i = 0; i < flat.shard_numel(); ++i) m[i] = 0.02f * static_cast<float>((i * 7919) % 1000 - 500) / 500.0f;
    std::vector<fp8::LinearState> states(specs.size());
    std::vector<Fp8AllGather::Weight> weights;
    for (std::size_t e = 0; e < specs.size(); ++e)
      if (specs[e].shape.size() == 2) {
        states[e] = fp8::LinearState::create(16);
        states[e].scale.data_as<float>()[fp8::kWeight] = 448.0f / 0.02f;
        weights.push_back({static_cast<int>(e), &states[e]});
      }
    const Fp8AllGather fp8_gather(flat, weights, world.size(), world.rank());
    ExecutionContext& exec = host_context();

    // Each returns the bytes received; cast_s / gather_s get the time of the
    // casts (the host context runs ops as they are enqueued, so they are
    // done when the call returns) and of the collective (wait), max over ranks.
    double cast_s = 0, gather_s = 0;
    using clock = std::chrono::steady_clock;
    const auto seconds = [](clock::time_point a, clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
    auto bf16_gather = [&] {
      const auto t0 = clock::now();
      Tensor send = Tensor::empty({flat.shard_numel()}, DType::bf16);
      ops::cast(exec, flat.master, send);
      flat.gathered = Tensor::empty({flat.padded_numel()}, DType::bf16);
      exec.synchronize();
      const auto t1 = clock::now();
      world.all_gather(send, flat.gathered, exec.compute().record()).wait();
      cast_s = seconds(t0, t1), gather_s = seconds(t1, clock::now());
      return flat.gathered.nbytes();
    };
    // The same bf16 bytes through all_gather_v (MPI_Iallgatherv), the
    // collective the FP8 path uses: separates the byte count from the
    // algorithm MPI picks for each call.
    const std::vector<std::int64_t> equal_counts(static_cast<std::size_t>(world.size()), flat.shard_numel());
    auto bf16_gather_v = [&] {
      const auto t0 = clock::now();
      Tensor send = Tensor::empty({flat.shard_numel()}, DType::bf16);
      ops::cast(exec, flat.master, send);
      flat.gathered = Tensor::empty({flat.padded_numel()}, DType::bf16);
      exec.synchronize();
      const auto t1 = clock::now();
      world.all_gather_v(send, flat.gathered, equal_counts, exec.compute().record()).wait();
      cast_s = seconds(t0, t1), gather_s = seconds(t1, clock::now());
      return flat.gathered.nbytes();
    };
    // The bf16 bytes moved as raw bytes (MPI_BYTE, as the FP8 segment is):
    // the engine's bf16 gathers use a derived MPI datatype (2-byte
    // contiguous), which Open MPI may move more slowly than plain bytes.
    auto bf16_as_bytes = [&] {
      Tensor send = Tensor::empty({2 * flat.shard_numel()}, DType::fp8_e4m3);
      ops::cast(exec, Tensor::empty({2 * flat.shard_numel()}, DType::fp8_e4m3), send);
      Tensor recv = Tensor::empty({2 * flat.padded_numel()}, DType::fp8_e4m3);
      exec.synchronize();
      const auto t1 = clock::now();
      world.all_gather(send, recv, exec.compute().record()).wait();
      gather_s = seconds(t1, clock::now());
      return recv.nbytes();
    };
    auto fp8_all_gather = [&] {
      const auto t0 = clock::now();
      Request r = fp8_gather.start(exec, world, flat, flat.master, DType::bf16, DType::fp8_e4m3, /*record=*/true);
      exec.synchronize();
      const auto t1 = clock::now();
      r.wait();
      cast_s = seconds(t0, t1), gather_s = seconds(t1, clock::now());
      return flat.gathered.nbytes() + flat.gathered_fp8.nbytes();
    };
    // Alternating, so that a load change on the machine hits both alike.
    std::vector<double> cast_bf16, cast_fp8, comm_bf16, comm_fp8, comm_bf16_v, comm_bf16_bytes;
    std::int64_t bytes_bf16 = 0, bytes_fp8 = 0;
    for (int it = -1; it < iterations; ++it) {  // it = -1: warm-up
      for (int which = 0; which < 4; ++which) {
        world.barrier();
        const std::int64_t bytes = which == 0   ? bf16_gather()
                                   : which == 1 ? fp8_all_gather()
                                   : which == 2 ? bf16_gather_v()
                                                : bf16_as_bytes();
        if (which >= 2) {
          const double g = world.all_reduce_max(gather_s);
          if (it >= 0) (which == 2 ? comm_bf16_v : comm_bf16_bytes).push_back(g);
          continue;
        }
        const double c = world.all_reduce_max(cast_s), g = world.all_reduce_max(gather_s);
        if (it < 0) continue;
        (which == 0 ? cast_bf16 : cast_fp8).push_back(c);
        (which == 0 ? comm_bf16 : comm_fp8).push_back(g);
        (which == 0 ? bytes_bf16 : bytes_fp8) = bytes;
      }
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    auto minimum = [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); };
    if (world.rank() == 0) {
      std::printf("block: hidden %lld intermediate %lld kv_heads %lld head_dim %lld: %lld parameters (%lld in the FP8 linears), %d ranks, %d iterations\n",
                  static_cast<long long>(h), static_cast<long long>(inter), static_cast<long long>(kv),
                  static_cast<long long>(hd), static_cast<long long>(flat.numel()),
                  static_cast<long long>(fp8_gather.fp8_numel()), world.size(), iterations);
      std::printf("%-16s %12s %16s %16s %16s\n", "gather", "bytes recv", "collective ms", "(min ms)", "casts ms");
      std::printf("%-16s %12lld %16.2f %16.2f %16.2f\n", "bf16", static_cast<long long>(bytes_bf16),
                  1e3 * median(comm_bf16), 1e3 * minimum(comm_bf16), 1e3 * median(cast_bf16));
      std::printf("%-16s %12lld %16.2f %16.2f %16s\n", "bf16 gather_v", static_cast<long long>(bytes_bf16),
                  1e3 * median(comm_bf16_v), 1e3 * minimum(comm_bf16_v), "same");
      std::printf("%-16s %12lld %16.2f %16.2f %16s\n", "bf16 as bytes", static_cast<long long>(bytes_bf16),
                  1e3 * median(comm_bf16_bytes), 1e3 * minimum(comm_bf16_bytes), "-");
      std::printf("%-16s %12lld %16.2f %16.2f %16.2f\n", "fp8 all-gather", static_cast<long long>(bytes_fp8),
                  1e3 * median(comm_fp8), 1e3 * minimum(comm_fp8), 1e3 * median(cast_fp8));
      std::printf("fp8/bf16-as-bytes collective time: %.3f (median) %.3f (min)\n",
                  median(comm_fp8) / median(comm_bf16_bytes), minimum(comm_fp8) / minimum(comm_bf16_bytes));
      std::printf("fp8/bf16 gather_v collective time: %.3f (median) %.3f (min)\n", median(comm_fp8) / median(comm_bf16_v),
                  minimum(comm_fp8) / minimum(comm_bf16_v));
      std::printf("fp8/bf16: bytes %.3f, collective time %.3f (median) %.3f (min), casts %.2f\n",
                  static_cast<double>(bytes_fp8) / static_cast<double>(bytes_bf16), median(comm_fp8) / median(comm_bf16),
                  minimum(comm_fp8) / minimum(comm_bf16), median(cast_fp8) / median(cast_bf16));
    }
  }
  Kokkos::finalize();
  MPI_Finalize();
  return 0;
}
