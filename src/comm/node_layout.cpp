#include "comm/node_layout.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <sstream>

#include "comm/communicator.hpp"

namespace ftrain {

std::vector<int> NodeLayout::ranks_on(int node) const {
  std::vector<int> ranks;
  for (int r = 0; r < world_size(); ++r)
    if (node_of_rank[static_cast<std::size_t>(r)] == node) ranks.push_back(r);
  return ranks;
}

int NodeLayout::most_ranks_per_node() const {
  int most = 0;
  for (int n = 0; n < node_count(); ++n) most = std::max(most, static_cast<int>(ranks_on(n).size()));
  return most;
}

bool NodeLayout::even() const {
  for (int n = 0; n < node_count(); ++n)
    if (static_cast<int>(ranks_on(n).size()) != most_ranks_per_node()) return false;
  return true;
}

std::string describe_ranks(const std::vector<int>& ranks) {
  const bool consecutive = !ranks.empty() && ranks.back() - ranks.front() + 1 == static_cast<int>(ranks.size());
  if (consecutive && ranks.size() > 1) return std::to_string(ranks.front()) + "-" + std::to_string(ranks.back());
  // A replica group of a many-node job: "0,8,...,1016".
  bool strided = ranks.size() > 3;
  for (std::size_t i = 2; strided && i < ranks.size(); ++i) strided = ranks[i] - ranks[i - 1] == ranks[1] - ranks[0];
  if (strided)
    return std::to_string(ranks[0]) + "," + std::to_string(ranks[1]) + ",...," + std::to_string(ranks.back());
  std::string s;
  for (int r : ranks) {
    if (!s.empty()) s += ',';
    s += std::to_string(r);
  }
  return s;
}

namespace {

// Whether item i of `count` is listed: all of up to 8, else the first 4
// and the last 2 (a header line for a 1000-node job stays one line).
bool listed(int i, int count) { return count <= 8 || i < 4 || i >= count - 2; }

}  // namespace

std::string NodeLayout::describe() const {
  std::ostringstream s;
  for (int n = 0; n < node_count(); ++n) {
    if (!listed(n, node_count())) {
      if (n == 4) s << ", ...";
      continue;
    }
    const auto ranks = ranks_on(n);
    s << (n > 0 ? ", " : "") << host_names[static_cast<std::size_t>(n)] << ": rank" << (ranks.size() > 1 ? "s " : " ")
      << describe_ranks(ranks);
  }
  return s.str();
}

std::string NodeLayout::ranks_per_node_text() const {
  if (even()) return std::to_string(most_ranks_per_node());
  std::string s;
  for (int n = 0; n < node_count(); ++n) {
    if (n > 0) s += '+';
    s += std::to_string(ranks_on(n).size());
  }
  return s;
}

NodeLayout gather_node_layout(Communicator& world) {
  auto node = world.split_node();
  // Nodes are numbered by their lowest world rank: every rank of a node
  // agrees on it without a further exchange.
  const auto lowest = static_cast<std::int32_t>(-node->all_reduce_max(-static_cast<double>(world.rank())));
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  constexpr std::int64_t kHostChars = 64;  // labels only: a longer name is cut
  constexpr std::int64_t kWidth = 2 + kHostChars;
  Tensor mine = Tensor::zeros({kWidth}, DType::i32, Device::host, "node_layout.mine");
  auto* m = mine.data_as<std::int32_t>();
  m[0] = lowest;
  m[1] = node->rank();
  for (std::int64_t i = 0; i < kHostChars && host[i] != '\0'; ++i) m[2 + i] = static_cast<unsigned char>(host[i]);
  const int n = world.size();
  Tensor all = Tensor::empty({kWidth * n}, DType::i32, Device::host, "node_layout.all");
  world.all_gather(mine, all).wait();

  NodeLayout out;
  std::vector<int> lowest_of_node;  // node index -> its lowest rank
  const auto* a = all.data_as<std::int32_t>();
  for (int r = 0; r < n; ++r) {
    const std::int32_t* row = a + kWidth * r;
    auto it = std::find(lowest_of_node.begin(), lowest_of_node.end(), row[0]);
    if (it == lowest_of_node.end()) {
      lowest_of_node.push_back(row[0]);
      std::string name;
      for (std::int64_t i = 0; i < kHostChars && row[2 + i] != 0; ++i) name += static_cast<char>(row[2 + i]);
      out.host_names.push_back(name.empty() ? "(no host name)" : name);
      it = lowest_of_node.end() - 1;
    }
    out.node_of_rank.push_back(static_cast<int>(it - lowest_of_node.begin()));
    out.local_rank_of_rank.push_back(row[1]);
  }
  return out;
}

NodeLayout planned_node_layout(int world_size, int ranks_per_node) {
  NodeLayout out;
  out.planned = true;
  const int per = std::max(1, ranks_per_node);
  for (int r = 0; r < world_size; ++r) {
    out.node_of_rank.push_back(r / per);
    out.local_rank_of_rank.push_back(r % per);
  }
  for (int node = 0; node * per < world_size; ++node) out.host_names.push_back("node " + std::to_string(node + 1));
  return out;
}

std::string hybrid_shard_problem(const NodeLayout& layout) {
  if (!layout.even())
    return "its shard group is a node's ranks, and the nodes hold different numbers of ranks (" +
           layout.describe() + "). Start the same number of ranks on every node (mpirun --map-by ppr:N:node, srun --ntasks-per-node=N), "
           "or set shard_group_size";
  for (int n = 0; n < layout.node_count(); ++n) {
    const auto ranks = layout.ranks_on(n);
    if (ranks.back() - ranks.front() + 1 != static_cast<int>(ranks.size()))
      return "its shard group is a node's ranks, which must be consecutive, and " +
             layout.host_names[static_cast<std::size_t>(n)] + " holds ranks " + describe_ranks(ranks) + " (" +
             layout.describe() + "). Place ranks by slot (mpirun --map-by slot or ppr:N:node, srun's default "
             "block distribution), or set shard_group_size";
  }
  return "";
}

std::string describe_rank_groups(int world_size, int size, bool replicas, int stride) {
  std::string s;
  const int groups = size > 0 ? world_size / size : 0;
  const int count = replicas ? size : groups;
  for (int g = 0; g < count; ++g) {
    if (!listed(g, count)) {
      if (g == 4) s += " ...";
      continue;
    }
    std::vector<int> ranks;
    if (replicas)
      for (int k = 0; k < groups; ++k) ranks.push_back((k * size + g) * stride);
    else
      for (int k = 0; k < size; ++k) ranks.push_back((g * size + k) * stride);
    s += (g > 0 ? " [" : "[") + describe_ranks(ranks) + "]";
  }
  return s;
}

}  // namespace ftrain
