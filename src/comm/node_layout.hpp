// Which ranks share a node. A node is what the MPI library calls one:
// the ranks of one MPI_COMM_TYPE_SHARED split (Communicator::split_node()),
// which Open MPI forms per launch daemon and so per host of the hostfile or
// allocation; the host name (gethostname) only labels it in messages, so two
// nodes with one name are still two nodes.
//
// hybrid_shard's default shard group is a node's ranks, kept as a block of
// consecutive world ranks (checkpoints store shard s of every unit in the
// file of rank s, fsdp/engine.hpp): that needs every node to hold the same
// number of consecutive ranks, which hybrid_shard_problem() checks.
#pragma once

#include <string>
#include <vector>

namespace ftrain {

class Communicator;

struct NodeLayout {
  std::vector<int> node_of_rank;        // by world rank: the node's index (nodes numbered by their lowest rank)
  std::vector<int> local_rank_of_rank;  // by world rank: its rank within its node
  std::vector<std::string> host_names;  // by node index
  bool planned = false;                 // --check --ranks: a layout of the planned job, not of running processes

  int world_size() const { return static_cast<int>(node_of_rank.size()); }
  int node_count() const { return static_cast<int>(host_names.size()); }
  std::vector<int> ranks_on(int node) const;
  int most_ranks_per_node() const;
  bool even() const;  // every node has as many ranks
  // "node1: ranks 0-1, node2: ranks 2-3"; past 8 nodes the first 4, "...", the last 2
  std::string describe() const;
  // "2" when even, else every node's count: "3+1"
  std::string ranks_per_node_text() const;
};

// Collective over `world`: every rank learns every rank's node and host name.
NodeLayout gather_node_layout(Communicator& world);

// The layout `--check --ranks N --ranks-per-node M` plans: N/M nodes of M
// consecutive ranks, named "node 1", "node 2"...
NodeLayout planned_node_layout(int world_size, int ranks_per_node);

// Why hybrid_shard cannot take its shard groups from these nodes ("" when it
// can): nodes with different rank counts, or a node whose ranks are not
// consecutive (mpirun --map-by node). Says what to change.
std::string hybrid_shard_problem(const NodeLayout& layout);

// "[0-1] [2-3]": groups of `size` consecutive ranks; "[0,2] [1,3]": the
// replica groups (same position in every group). Past 8 groups the first 4,
// "...", the last 2. With a stride the `world_size` ranks grouped are every
// stride-th world rank (an fsdp group under parallel tensor T: stride T).
std::string describe_rank_groups(int world_size, int size, bool replicas, int stride = 1);

// "0-2", "3", "0,2,5", "0,8,...,56" (evenly spaced, more than 3)
std::string describe_ranks(const std::vector<int>& ranks);

}  // namespace ftrain
