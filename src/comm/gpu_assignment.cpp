#include "comm/gpu_assignment.hpp"

#include <sstream>

namespace ftrain {

const char* device_comm_name(DeviceComm c) { return c == DeviceComm::nccl ? "nccl" : "mpi"; }

std::vector<std::string> split_visible_devices(const std::string& value) {
  std::vector<std::string> entries;
  if (value.find_first_not_of(" \t") == std::string::npos) return entries;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = value.find(',', start);
    std::string entry = value.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const auto first = entry.find_first_not_of(" \t");
    const auto last = entry.find_last_not_of(" \t");
    entries.push_back(first == std::string::npos ? std::string() : entry.substr(first, last - first + 1));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return entries;
}

std::string GpuAssignment::describe() const {
  if (!error.empty()) return error;
  std::ostringstream s;
  s << "device " << ordinal;
  if (physical != std::to_string(ordinal)) s << " (CUDA_VISIBLE_DEVICES entry " << physical << ")";
  if (ranks_sharing > 1) s << ", shared by " << ranks_sharing << " ranks of this node (device_comm mpi)";
  return s.str();
}

namespace {

std::string quoted_setting(const std::optional<std::string>& v) {
  return v ? "CUDA_VISIBLE_DEVICES='" + *v + "'" : std::string("CUDA_VISIBLE_DEVICES unset");
}

struct Placement {
  int index = 0;       // position among the ranks with the same CUDA_VISIBLE_DEVICES
  int group_size = 0;  // how many node-local ranks have that value
};

Placement placement(const std::vector<std::optional<std::string>>& visible, int local_rank) {
  Placement p;
  for (int j = 0; j < static_cast<int>(visible.size()); ++j) {
    if (visible[j] != visible[local_rank]) continue;
    if (j < local_rank) ++p.index;
    ++p.group_size;
  }
  return p;
}

// The physical device local rank j ends on, shared round robin when its
// group has more ranks than devices; `count` is how many devices it sees.
std::string physical_device(const std::optional<std::string>& visible, int index, int count) {
  const int ordinal = count > 0 ? index % count : index;
  if (visible) {
    const auto entries = split_visible_devices(*visible);
    if (ordinal < static_cast<int>(entries.size())) return entries[ordinal];
  }
  return std::to_string(ordinal);
}

}  // namespace

GpuAssignment assign_gpu(const GpuAssignmentInput& in) {
  GpuAssignment out;
  const int local_size = static_cast<int>(in.visible_devices.size());
  if (in.local_rank < 0 || in.local_rank >= local_size) {
    out.error = "node-local rank " + std::to_string(in.local_rank) + " is outside the " + std::to_string(local_size) +
                " node-local ranks (internal error)";
    return out;
  }
  const auto& mine = in.visible_devices[in.local_rank];
  const std::string prefix = "node-local rank " + std::to_string(in.local_rank) + " of " + std::to_string(local_size);
  if (in.device_count <= 0) {
    out.error = prefix + ": no CUDA device is visible (" + quoted_setting(mine) + ")";
    return out;
  }
  const Placement p = placement(in.visible_devices, in.local_rank);
  const bool may_share = in.device_comm == DeviceComm::mpi;
  if (p.group_size > in.device_count && !may_share) {
    std::ostringstream s;
    s << prefix << ": " << p.group_size << " ranks on this node use " << quoted_setting(mine) << " but only "
      << in.device_count << " GPU" << (in.device_count == 1 ? " is" : "s are")
      << " visible; NCCL needs a GPU of its own per rank (it refuses two ranks on one device): start at most "
      << in.device_count << " ranks per node, or set `device_comm mpi` to stage collectives through host memory";
    out.error = s.str();
    return out;
  }
  out.ordinal = p.index % in.device_count;
  out.physical = physical_device(mine, p.index, in.device_count);

  // Ranks of other groups may name the same physical device (CUDA_VISIBLE_DEVICES
  // '0,1' on one rank and '1' on another): count everyone who lands on ours.
  std::vector<int> sharing;
  for (int j = 0; j < local_size; ++j) {
    const auto& theirs = in.visible_devices[j];
    const Placement q = placement(in.visible_devices, j);
    // Their device count: the entries of their list (the runtime may count
    // fewer, which only makes our answer stricter), ours when unset.
    int count = in.device_count;
    if (theirs && theirs != mine) count = static_cast<int>(split_visible_devices(*theirs).size());
    if (count == 0) continue;  // an empty list hides every GPU: that rank uses none
    if (physical_device(theirs, q.index, count) == out.physical) sharing.push_back(j);
  }
  out.ranks_sharing = static_cast<int>(sharing.size());
  if (out.ranks_sharing > 1 && !may_share) {
    std::ostringstream s;
    s << prefix << ": node-local ranks";
    for (int j : sharing) s << " " << j << " (" << quoted_setting(in.visible_devices[j]) << ")";
    s << " all land on GPU " << out.physical
      << "; NCCL needs a GPU of its own per rank: give each rank a different device, or set `device_comm mpi`";
    out.error = s.str();
    out.ordinal = -1;
  }
  return out;
}

}  // namespace ftrain
