#include "train/device_peak.hpp"

#include <fstream>
#include <sstream>

namespace ftrain {
namespace {
double max_clock_hz() {
  std::ifstream f("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
  double khz = 0;
  if (f >> khz && khz > 0) return khz * 1e3;
  std::ifstream info("/proc/cpuinfo");
  std::string line;
  while (std::getline(info, line)) {
    if (line.rfind("cpu MHz", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return std::stod(line.substr(colon + 1)) * 1e6;
    }
  }
  return 2.0e9;  // no clock information: say so in the description
}

std::string cpu_flags() {
  std::ifstream info("/proc/cpuinfo");
  std::string line;
  while (std::getline(info, line))
    if (line.rfind("flags", 0) == 0) return line + " ";
  return {};
}
}  // namespace

DevicePeak host_peak(int cores_per_rank) {
  const std::string flags = cpu_flags();
  int flops_per_cycle = 16;
  std::string isa = "SSE";
  if (flags.find(" avx512f ") != std::string::npos) {
    flops_per_cycle = 64;
    isa = "AVX-512";
  } else if (flags.find(" avx2 ") != std::string::npos && flags.find(" fma ") != std::string::npos) {
    flops_per_cycle = 32;
    isa = "AVX2+FMA";
  }
  const double hz = max_clock_hz();
  DevicePeak p;
  p.flops_per_second = static_cast<double>(cores_per_rank) * hz * flops_per_cycle;
  std::ostringstream d;
  d << cores_per_rank << " core(s) x " << hz / 1e9 << " GHz x " << flops_per_cycle << " f32 FLOP/cycle (" << isa
    << ")";
  p.description = d.str();
  return p;
}

double gpu_bf16_peak(const std::string& name) {
  struct Entry {
    const char* key;
    double tflops;
  };
  static constexpr Entry kTable[] = {{"H200", 989.0}, {"H100", 989.0}, {"A100", 312.0}};
  for (const auto& e : kTable)
    if (name.find(e.key) != std::string::npos) return e.tflops * 1e12;
  return 0.0;
}

}  // namespace ftrain
