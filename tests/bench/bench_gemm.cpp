// Micro-benchmark of the host GEMM providers (not a test: it asserts nothing
// and its numbers depend on the machine): this machine's f32 and bf16 matmul
// peaks, which share/bench/host_bf16.sh uses as the denominator of CPU-MFU.
//
//   bench_gemm [n [threads [repeats]]]      defaults: 3072, all cores, 5
//
// Prints GFLOP/s (2 n^3 per product, best of `repeats`) for OpenBLAS f32
// sgemm, oneDNN bf16 matmul with f32 accumulation (the route precision bf16
// takes), and, for the provider rule in kernels/host/gemm.hpp, oneDNN f32.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "base/dtype.hpp"
#include "kernels/blas_threads.hpp"
#include "kernels/host/gemm.hpp"

#if defined(FTRAIN_BENCH_HAVE_ONEDNN)
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace {

double best_seconds(int repeats, const std::function<void()>& body) {
  body();  // warm-up: primitive creation, page faults, thread pools
  double best = 1e300;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    body();
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    best = std::min(best, elapsed.count());
  }
  return best;
}

void report(const char* what, double flops, double seconds) {
  std::printf("%-44s %8.1f GFLOP/s\n", what, flops / seconds / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ftrain;
  const std::int64_t n = argc > 1 ? std::atoll(argv[1]) : 3072;
  const int threads = argc > 2 ? std::atoi(argv[2]) : static_cast<int>(std::thread::hardware_concurrency());
  const int repeats = argc > 3 ? std::atoi(argv[3]) : 5;
  configure_blas_threads(threads);
  std::printf("n %lld, %d thread(s); %s\n", static_cast<long long>(n), threads, host::gemm::describe().c_str());

  const std::size_t count = static_cast<std::size_t>(n * n);
  std::vector<float> a(count), b(count), c(count);
  std::vector<bf16> a16(count), b16(count);
  for (std::size_t i = 0; i < count; ++i) {
    a[i] = static_cast<float>((i * 7919) % 1000) / 1000.0f - 0.5f;
    b[i] = static_cast<float>((i * 104729) % 1000) / 1000.0f - 0.5f;
    a16[i] = to_bf16(a[i]);
    b16[i] = to_bf16(b[i]);
  }
  const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  // y = x . w^T: the forward linear's layout.
  const host::gemm::Dims dims{host::gemm::Op::none, host::gemm::Op::transpose, n, n, n, n, n, n};
  report("OpenBLAS f32 sgemm", flops, best_seconds(repeats, [&] { host::gemm::f32(dims, a.data(), b.data(), 0.0f, c.data()); }));
  if (host::gemm::bf16_native()) {
    report("oneDNN bf16 matmul (f32 accumulation)", flops,
           best_seconds(repeats, [&] { host::gemm::bf16(dims, a16.data(), b16.data(), 0.0f, c.data()); }));
  } else {
    std::printf("oneDNN bf16 matmul: not native here\n");
  }
#if defined(FTRAIN_BENCH_HAVE_ONEDNN)
  {
    using dt = dnnl::memory::data_type;
    dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    dnnl::stream stream(engine);
    const dnnl::memory::desc md_a({n, n}, dt::f32, dnnl::memory::dims{n, 1});
    const dnnl::memory::desc md_b({n, n}, dt::f32, dnnl::memory::dims{1, n});
    const dnnl::memory::desc md_c({n, n}, dt::f32, dnnl::memory::dims{n, 1});
    dnnl::matmul mm(dnnl::matmul::primitive_desc(dnnl::matmul::desc(md_a, md_b, md_c), engine));
    dnnl::memory ma(md_a, engine, a.data()), mb(md_b, engine, b.data()), mc(md_c, engine, c.data());
    report("oneDNN f32 matmul (not used: see gemm.hpp)", flops, best_seconds(repeats, [&] {
             mm.execute(stream, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
             stream.wait();
           }));
  }
#endif
  return 0;
}
