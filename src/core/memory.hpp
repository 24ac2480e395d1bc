// Process memory as the kernel counts it (resident set), for the per-rank
// memory lines of the run header and the metrics (seed 001 reports the same).
#pragma once

#include <cstdint>

namespace ftrain {

std::int64_t current_rss_bytes();  // VmRSS
std::int64_t peak_rss_bytes();     // VmHWM: high-water mark since start (or last reset)

inline double to_mib(std::int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

}  // namespace ftrain
