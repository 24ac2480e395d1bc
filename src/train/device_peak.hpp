// Peak FLOP/s of one device, for MFU. For the host a data-sheet peak is unknowable
// from inside a VM (boost clocks, AVX-512 executed at 256-bit width on some
// cores), so ftrain measures it: the best f32 SGEMM rate of one core
// (1024^3, OpenBLAS) times the cores a rank computes on. MFU on the host is
// therefore "fraction of what this machine's BLAS reaches". The deck's
// `peak_tflops` overrides it. (The CUDA backend will add the dense BF16
// data-sheet peaks of its GPUs here.) share/doc/performance.md explains MFU.
#pragma once

#include <string>

namespace ftrain {

struct DevicePeak {
  double flops_per_second = 0;  // per rank
  std::string description;      // how it was obtained
};

// cores_per_rank: CPU cores one rank computes on. Takes ~0.1 s.
DevicePeak host_peak(int cores_per_rank);

}  // namespace ftrain
