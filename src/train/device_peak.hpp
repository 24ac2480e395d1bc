// Peak FLOP/s of one device, for MFU: a stated number, not one re-measured at
// every start (a busy moment once halved it and doubled the MFU printed).
//
// Where the peak comes from, first match wins (the run header prints which):
//   1. the deck's `peak_tflops X` (per device, at the compute precision);
//   2. the environment's FTRAIN_PEAK_TFLOPS (same meaning);
//   3. a recorded host benchmark: FTRAIN_PEAK_FILE, default
//      $XDG_CACHE_HOME/ftrain/host_peak.json (~/.cache/...), one entry per
//      CPU model and BLAS kernel set;
//   4. otherwise the benchmark runs now (~0.5 s: best single-core f32 SGEMM
//      rate, 1024^3, OpenBLAS) and is recorded there for later runs.
// For the host a data-sheet peak is unknowable from inside a VM (boost
// clocks, AVX-512 executed at 256-bit width on some cores), so MFU on the
// host is "fraction of what this machine's BLAS reaches" times the cores a
// rank computes on. (The CUDA backend will add a table of data-sheet dense
// BF16 peaks per GPU here.) share/doc/performance.md explains MFU.
#pragma once

#include <optional>
#include <string>

#include "train/console.hpp"

namespace ftrain {

struct DevicePeak {
  double flops_per_second = 0;  // per rank
  std::string description;      // how it was obtained
};

// cores_per_rank: CPU cores one rank computes on. Throws UserError for a bad
// FTRAIN_PEAK_TFLOPS. Benchmarks (and writes the record) only when no
// stated peak exists.
DevicePeak resolve_host_peak(std::optional<double> deck_peak_tflops, const EnvironmentLookup& env,
                             int cores_per_rank);

// The record file resolve_host_peak reads and writes.
std::string host_peak_record_path(const EnvironmentLookup& env);

// Model FLOPs utilisation, achieved / peak (both per rank). nullopt when the
// achieved rate exceeds the peak: then the peak is wrong (understated), and
// a percentage above 100 would be a false statement.
std::optional<double> model_flops_utilisation(double achieved_flops_per_second, double peak_flops_per_second);

}  // namespace ftrain
