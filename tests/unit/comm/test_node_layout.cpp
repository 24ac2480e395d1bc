// Which ranks share a node (comm/node_layout.hpp) as tables: how a layout is
// described, and which layouts hybrid_shard can take its shard groups from
// (equal, consecutive nodes) and which it refuses naming the nodes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm/node_layout.hpp"

namespace ftrain {
namespace {

// A layout from each rank's host name; nodes numbered by their lowest rank.
NodeLayout layout_of(const std::vector<std::string>& host_of_rank) {
  NodeLayout l;
  for (const auto& host : host_of_rank) {
    int node = 0;
    while (node < l.node_count() && l.host_names[static_cast<std::size_t>(node)] != host) ++node;
    if (node == l.node_count()) l.host_names.push_back(host);
    int local = 0;
    for (int n : l.node_of_rank) local += n == node ? 1 : 0;
    l.node_of_rank.push_back(node);
    l.local_rank_of_rank.push_back(local);
  }
  return l;
}

TEST(NodeLayout, DescribesNodesAndTheirRanks) {
  const NodeLayout even = layout_of({"a", "a", "b", "b"});
  EXPECT_EQ(even.describe(), "a: ranks 0-1, b: ranks 2-3");
  EXPECT_EQ(even.ranks_per_node_text(), "2");
  EXPECT_TRUE(even.even());
  const NodeLayout uneven = layout_of({"a", "a", "a", "b"});
  EXPECT_EQ(uneven.describe(), "a: ranks 0-2, b: rank 3");
  EXPECT_EQ(uneven.ranks_per_node_text(), "3+1");
  EXPECT_EQ(uneven.most_ranks_per_node(), 3);
  EXPECT_FALSE(uneven.even());
  const NodeLayout round_robin = layout_of({"a", "b", "a", "b"});
  EXPECT_EQ(round_robin.describe(), "a: ranks 0,2, b: ranks 1,3");
  EXPECT_EQ(round_robin.local_rank_of_rank, (std::vector<int>{0, 0, 1, 1}));
}

TEST(NodeLayout, HybridShardNeedsEqualConsecutiveNodes) {
  EXPECT_EQ(hybrid_shard_problem(layout_of({"a", "a", "b", "b"})), "");
  EXPECT_EQ(hybrid_shard_problem(layout_of({"a", "a", "a", "a"})), "");
  EXPECT_EQ(hybrid_shard_problem(layout_of({"a", "b", "c"})), "");
  const std::string uneven = hybrid_shard_problem(layout_of({"a", "a", "a", "b"}));
  EXPECT_NE(uneven.find("different numbers of ranks (a: ranks 0-2, b: rank 3)"), std::string::npos) << uneven;
  EXPECT_NE(uneven.find("shard_group_size"), std::string::npos) << uneven;
  const std::string scattered = hybrid_shard_problem(layout_of({"a", "b", "a", "b"}));
  EXPECT_NE(scattered.find("must be consecutive, and a holds ranks 0,2"), std::string::npos) << scattered;
  EXPECT_NE(scattered.find("--map-by slot"), std::string::npos) << scattered;
}

TEST(NodeLayout, PlannedLayoutAndGroups) {
  const NodeLayout planned = planned_node_layout(8, 4);
  EXPECT_TRUE(planned.planned);
  EXPECT_EQ(planned.describe(), "node 1: ranks 0-3, node 2: ranks 4-7");
  EXPECT_EQ(hybrid_shard_problem(planned), "");
  EXPECT_EQ(describe_rank_groups(4, 2, false), "[0-1] [2-3]");
  EXPECT_EQ(describe_rank_groups(4, 2, true), "[0,2] [1,3]");
  EXPECT_EQ(describe_rank_groups(6, 3, true), "[0,3] [1,4] [2,5]");
  // The fsdp group of tensor rank 0 at parallel tensor 2 on 8 ranks: every other rank.
  EXPECT_EQ(describe_rank_groups(4, 2, false, 2), "[0,2] [4,6]");
  EXPECT_EQ(describe_rank_groups(4, 2, true, 2), "[0,4] [2,6]");
  EXPECT_EQ(describe_ranks({5}), "5");
  EXPECT_EQ(describe_ranks({0, 8, 16, 24}), "0,8,...,24");
  EXPECT_EQ(describe_ranks({0, 2, 5}), "0,2,5");
  // A big job's header stays one line.
  EXPECT_EQ(planned_node_layout(80, 8).describe(),
            "node 1: ranks 0-7, node 2: ranks 8-15, node 3: ranks 16-23, node 4: ranks 24-31, ..., "
            "node 9: ranks 64-71, node 10: ranks 72-79");
  EXPECT_EQ(describe_rank_groups(20, 2, false), "[0-1] [2-3] [4-5] [6-7] ... [16-17] [18-19]");
}

}  // namespace
}  // namespace ftrain
