#include "train/device_peak.hpp"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <sstream>
#include <vector>

namespace ftrain {

DevicePeak host_peak(int cores_per_rank) {
  constexpr int n = 1024;
  std::vector<float> a(static_cast<std::size_t>(n) * n, 0.001f), b(a), c(a.size());
  const int threads = openblas_get_num_threads();
  openblas_set_num_threads(1);
  double best = 0;
  for (int rep = 0; rep < 6; ++rep) {  // first repetition warms caches and clocks
    const auto t0 = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0) best = std::max(best, 2.0 * n * n * n / s);
  }
  openblas_set_num_threads(threads);
  DevicePeak p;
  p.flops_per_second = best * cores_per_rank;
  std::ostringstream d;
  d << cores_per_rank << " core(s) x " << static_cast<int>(best / 1e9) << " GFLOP/s measured f32 SGEMM per core";
  p.description = d.str();
  return p;
}

}  // namespace ftrain
