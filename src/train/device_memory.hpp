// Per-rank device memory for runs on a GPU (the header and the
// metrics show memory per rank): the CUDA allocator's stats
// (runtime/allocator.hpp: allocated = live bytes handed out, reserved = what
// its cudaMemPool holds from the driver, peak = the most ever allocated)
// gathered from every rank, formatted for the run header's memory lines and
// added to metrics.jsonl. Host runs report resident memory only, as before:
// the trainer calls these only when the run's device is CUDA.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/allocator.hpp"

namespace ftrain {

class Communicator;

struct DeviceMemorySample {
  double allocated_mib = 0, reserved_mib = 0, peak_mib = 0;
  // Pinned host memory (offloaded state) and the copies on a stream whose
  // host side was pinned or pageable, since the process started.
  double pinned_host_mib = 0, pinned_stream_copies = 0, pageable_stream_copies = 0;
};

DeviceMemorySample device_memory_sample(const AllocatorStats& stats);
// This rank's CUDA allocator, sampled now (an error when no CUDA backend is loaded).
DeviceMemorySample this_rank_device_memory();

// Every rank's sample, in rank order, on every rank (a collective: all ranks call it).
std::vector<DeviceMemorySample> gather_device_memory(Communicator& world, const DeviceMemorySample& mine);

// "device memory <phase>: rank 0 12 MiB allocated, 16 reserved, peak 14 | rank 1 ..."
std::string format_device_memory(const std::string& phase, const std::vector<DeviceMemorySample>& per_rank);

// metrics.jsonl fields: device_allocated_mib_per_rank, device_reserved_mib_per_rank,
// device_peak_mib_per_rank, device_peak_mib_max_rank, host_pinned_mib_per_rank,
// pinned_stream_copies_per_rank, pageable_stream_copies_per_rank.
void add_device_memory_metrics(nlohmann::json& record, const std::vector<DeviceMemorySample>& per_rank);

}  // namespace ftrain
