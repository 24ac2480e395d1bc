#include "train/device_memory.hpp"

#include <algorithm>
#include <cstdio>

#include "comm/communicator.hpp"
#include "base/error.hpp"
#include "core/tensor.hpp"

namespace ftrain {

namespace {
double mib(std::size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }
}  // namespace

DeviceMemorySample device_memory_sample(const AllocatorStats& stats) {
  return {mib(stats.live_bytes),
          mib(stats.reserved_bytes),
          mib(stats.peak_live_bytes),
          mib(stats.pinned_host_bytes),
          static_cast<double>(stats.pinned_stream_copies),
          static_cast<double>(stats.pageable_stream_copies)};
}

DeviceMemorySample this_rank_device_memory() {
  const DeviceAllocator* allocator = find_allocator(Device::cuda);
  FT_CHECK(allocator != nullptr) << "device memory report: no CUDA allocator is registered (libftrain_cuda not loaded)";
  return device_memory_sample(allocator->stats());
}

std::vector<DeviceMemorySample> gather_device_memory(Communicator& world, const DeviceMemorySample& mine) {
  const int ranks = world.size(), rank = world.rank();
  // Host f64 numbers summed across ranks, each rank filling its own slots.
  constexpr int kFields = 6;
  Tensor all = Tensor::zeros({kFields * static_cast<std::int64_t>(ranks)}, DType::f64, Device::host, "device_memory");
  double* v = all.data_as<double>();
  const double fields[kFields] = {mine.allocated_mib,   mine.reserved_mib,         mine.peak_mib,
                                  mine.pinned_host_mib, mine.pinned_stream_copies, mine.pageable_stream_copies};
  for (int i = 0; i < kFields; ++i) v[kFields * rank + i] = fields[i];
  world.all_reduce_sum(all).wait();
  std::vector<DeviceMemorySample> out(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    const double* x = v + kFields * r;
    out[static_cast<std::size_t>(r)] = {x[0], x[1], x[2], x[3], x[4], x[5]};
  }
  return out;
}

std::string format_device_memory(const std::string& phase, const std::vector<DeviceMemorySample>& per_rank) {
  std::string line = "device memory " + phase + ":";
  for (std::size_t r = 0; r < per_rank.size(); ++r) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "%s rank %zu %.0f MiB allocated, %.0f reserved, peak %.0f", r == 0 ? "" : " |", r,
                  per_rank[r].allocated_mib, per_rank[r].reserved_mib, per_rank[r].peak_mib);
    line += buf;
  }
  return line + "\n";
}

void add_device_memory_metrics(nlohmann::json& record, const std::vector<DeviceMemorySample>& per_rank) {
  std::vector<double> allocated, reserved, peak, pinned, pinned_copies, pageable_copies;
  for (const auto& s : per_rank) {
    allocated.push_back(s.allocated_mib);
    reserved.push_back(s.reserved_mib);
    peak.push_back(s.peak_mib);
    pinned.push_back(s.pinned_host_mib);
    pinned_copies.push_back(s.pinned_stream_copies);
    pageable_copies.push_back(s.pageable_stream_copies);
  }
  record["host_pinned_mib_per_rank"] = pinned;
  record["pinned_stream_copies_per_rank"] = pinned_copies;
  record["pageable_stream_copies_per_rank"] = pageable_copies;
  record["device_allocated_mib_per_rank"] = allocated;
  record["device_reserved_mib_per_rank"] = reserved;
  record["device_peak_mib_per_rank"] = peak;
  record["device_peak_mib_max_rank"] = peak.empty() ? 0.0 : *std::max_element(peak.begin(), peak.end());
}

}  // namespace ftrain
