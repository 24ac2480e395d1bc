// Prints, for every rank, what ftrain's GPU binding would work from and
// what it would choose: the host name, the node-local rank and node size
// (gather_node_visibility, the inputs bind_local_gpu gathers over
// MPI_COMM_TYPE_SHARED), the node ftrain's node layout puts the rank on, and
// the device assign_gpu picks for a node with DEVICES GPUs. The
// multinode tests run it across network-namespace nodes and check each line
// against the hostfile.
//
// Usage: rank_placement DEVICES [nccl|mpi]
// One line per rank, rank 0 printing all of them in rank order:
//   placement rank=R host=H local_rank=L local_size=S node=N node_host=NH device=D
// (device=error:... when no device can be chosen).
#include <mpi.h>
#include <unistd.h>

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "comm/device_communicator.hpp"
#include "comm/gpu_assignment.hpp"
#include "comm/mpi_communicator.hpp"
#include "comm/node_layout.hpp"

using namespace ftrain;

namespace {

std::string line_of_this_rank(Communicator& world, int devices, DeviceComm kind) {
  const NodeVisibility v = gather_node_visibility(world);
  const NodeLayout nodes = gather_node_layout(world);
  const GpuAssignment a = assign_gpu({v.local_rank, v.visible_devices, devices, kind});
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const int node = nodes.node_of_rank[static_cast<std::size_t>(world.rank())];
  std::string device = a.error.empty() ? std::to_string(a.ordinal) : "error:" + a.error;
  for (char& c : device)
    if (c == '\n') c = ' ';
  return "placement rank=" + std::to_string(world.rank()) + " host=" + host +
         " local_rank=" + std::to_string(v.local_rank) + " local_size=" + std::to_string(v.visible_devices.size()) +
         " node=" + std::to_string(node) + " node_host=" + nodes.host_names[static_cast<std::size_t>(node)] +
         " device=" + device;
}

}  // namespace

int main(int argc, char** argv) {
  int level = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &level);
  Kokkos::initialize(argc, argv);
  int status = 0;
  {
    const int devices = argc > 1 ? std::atoi(argv[1]) : 4;
    const DeviceComm kind = argc > 2 && std::strcmp(argv[2], "mpi") == 0 ? DeviceComm::mpi : DeviceComm::nccl;
    MpiCommunicator world(MPI_COMM_WORLD);
    const std::string mine = line_of_this_rank(world, devices, kind);
    // Rank 0 prints every line in rank order: one output, no interleaving.
    const int size = world.size();
    const int length = static_cast<int>(mine.size());
    std::vector<int> lengths(static_cast<std::size_t>(size));
    MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
    std::vector<int> offsets(static_cast<std::size_t>(size), 0);
    int total = 0;
    for (int r = 0; r < size; ++r) {
      offsets[static_cast<std::size_t>(r)] = total;
      total += lengths[static_cast<std::size_t>(r)];
    }
    std::vector<char> all(static_cast<std::size_t>(std::max(total, 1)));
    MPI_Gatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, 0,
                MPI_COMM_WORLD);
    if (world.rank() == 0)
      for (int r = 0; r < size; ++r)
        std::printf("%.*s\n", lengths[static_cast<std::size_t>(r)], all.data() + offsets[static_cast<std::size_t>(r)]);
    std::fflush(stdout);
  }
  Kokkos::finalize();
  MPI_Finalize();
  return status;
}
