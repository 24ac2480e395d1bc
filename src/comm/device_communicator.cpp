#include "comm/device_communicator.hpp"

#include <array>
#include <cstdlib>
#include <mutex>

#include "comm/staged_communicator.hpp"
#include "base/error.hpp"
#include "runtime/execution_context.hpp"

namespace ftrain {

namespace {
std::mutex g_mutex;
std::array<const DeviceCommBackend*, 2> g_backends{};  // by Device

std::size_t slot(Device d) { return d == Device::host ? 0 : 1; }
}  // namespace

void register_device_comm_backend(Device device, const DeviceCommBackend* backend) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_backends[slot(device)] = backend;
}

const DeviceCommBackend* find_device_comm_backend(Device device) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_backends[slot(device)];
}

NodeVisibility gather_node_visibility(Communicator& world) {
  auto node = world.split_node();
  const int n = node->size();
  const char* mine = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string text = mine != nullptr ? mine : "";
  // Lengths first (-1: unset), then the characters, one i32 each, padded.
  Tensor length = Tensor::empty({1}, DType::i64, Device::host, "visible_devices.length");
  length.data_as<std::int64_t>()[0] = mine != nullptr ? static_cast<std::int64_t>(text.size()) : -1;
  Tensor lengths = Tensor::empty({n}, DType::i64, Device::host, "visible_devices.lengths");
  node->all_gather(length, lengths).wait();
  std::int64_t longest = 0;
  for (int j = 0; j < n; ++j) longest = std::max(longest, lengths.data_as<std::int64_t>()[j]);
  NodeVisibility out;
  out.local_rank = node->rank();
  out.visible_devices.assign(static_cast<std::size_t>(n), std::nullopt);
  Tensor chars = Tensor::zeros({longest}, DType::i32, Device::host, "visible_devices.chars");
  for (std::size_t i = 0; i < text.size(); ++i) chars.data_as<std::int32_t>()[i] = static_cast<unsigned char>(text[i]);
  Tensor all = Tensor::empty({longest * n}, DType::i32, Device::host, "visible_devices.all");
  node->all_gather(chars, all).wait();
  for (int j = 0; j < n; ++j) {
    const std::int64_t len = lengths.data_as<std::int64_t>()[j];
    if (len < 0) continue;
    std::string s(static_cast<std::size_t>(len), '\0');
    for (std::int64_t i = 0; i < len; ++i) s[static_cast<std::size_t>(i)] = static_cast<char>(all.data_as<std::int32_t>()[j * longest + i]);
    out.visible_devices[static_cast<std::size_t>(j)] = std::move(s);
  }
  return out;
}

GpuAssignment bind_local_gpu(Communicator& world, DeviceComm kind, Device device) {
  const DeviceCommBackend* backend = find_device_comm_backend(device);
  const NodeVisibility v = gather_node_visibility(world);  // collective: before any rank can throw
  FT_CHECK(backend != nullptr) << "rank " << world.rank() << ": no device backend registered communicators for "
                               << device_name(device) << " (libftrain_cuda.so not loaded)";
  const GpuAssignment a = assign_gpu({v.local_rank, v.visible_devices, backend->device_count(), kind});
  if (!a.error.empty()) FT_THROW() << "rank " << world.rank() << ": " << a.error;
  backend->set_device(a.ordinal);
  return a;
}

std::unique_ptr<Communicator> make_device_communicator(DeviceComm kind, MPI_Comm world, ExecutionContext& context) {
  if (kind == DeviceComm::mpi) return std::make_unique<StagedCommunicator>(world);
  const DeviceCommBackend* backend = find_device_comm_backend(context.device());
  FT_CHECK(backend != nullptr && backend->make_communicator != nullptr)
      << "device_comm nccl: no NCCL communicator is registered for " << device_name(context.device())
      << " (libftrain_cuda.so not loaded, or built without NCCL); `device_comm mpi` stages through host memory";
  return backend->make_communicator(world, context);
}

}  // namespace ftrain
