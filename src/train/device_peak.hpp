// Peak FLOP/s of one device, for MFU. GPUs come from a table of dense BF16
// peaks (NVIDIA data sheets); the host is estimated from the CPU itself:
// cores used by one rank x max clock x f32 FLOPs per cycle per core (FMA
// width: 64 with AVX-512, 32 with AVX2+FMA, 16 with SSE only). The deck's
// `peak_tflops` overrides either. share/doc/performance.md explains MFU.
#pragma once

#include <string>

namespace ftrain {

struct DevicePeak {
  double flops_per_second = 0;  // per rank
  std::string description;      // how it was obtained
};

// cores_per_rank: CPU cores one rank computes on.
DevicePeak host_peak(int cores_per_rank);
// Dense BF16 peak for a GPU name ("H100", "H200", "A100"); 0 if unknown.
double gpu_bf16_peak(const std::string& device_name);

}  // namespace ftrain
