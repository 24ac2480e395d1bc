// The data x context x tensor grid (comm/process_grid.hpp): coordinates,
// groups and the layouts it refuses.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "comm/process_grid.hpp"

namespace ftrain {
namespace {

TEST(ProcessGrid, TensorIsInnermostThenContextThenData) {
  const ProcessGrid grid(16, 2, 4);
  EXPECT_EQ(grid.data_size(), 2);
  EXPECT_EQ(grid.fsdp_size(), 8);
  const GridCoordinates c = grid.coordinates(13);  // 13 = (1 * 4 + 2) * 2 + 1
  EXPECT_EQ(c.data, 1);
  EXPECT_EQ(c.context, 2);
  EXPECT_EQ(c.tensor, 1);
  for (int rank = 0; rank < 16; ++rank) EXPECT_EQ(grid.rank_of(grid.coordinates(rank)), rank);
  EXPECT_EQ(grid.describe(), "data 2 x context 4 x tensor 2 (16 ranks)");
}

// Every group: the right size, its members differ only in the coordinate it
// spans, and the key orders them by that coordinate.
TEST(ProcessGrid, GroupsPartitionTheWorld) {
  const ProcessGrid grid(24, 2, 3);
  std::map<int, std::vector<int>> tensor, context, fsdp;
  for (int rank = 0; rank < 24; ++rank) {
    tensor[grid.tensor_group_color(rank)].push_back(rank);
    context[grid.context_group_color(rank)].push_back(rank);
    fsdp[grid.fsdp_group_color(rank)].push_back(rank);
  }
  EXPECT_EQ(tensor.size(), 12u);
  EXPECT_EQ(context.size(), 8u);
  EXPECT_EQ(fsdp.size(), 2u);
  for (const auto& [color, members] : tensor) {
    ASSERT_EQ(members.size(), 2u);
    EXPECT_EQ(members[1], members[0] + 1) << "tensor ranks are consecutive";
  }
  for (const auto& [color, members] : context) {
    ASSERT_EQ(members.size(), 3u);
    for (std::size_t i = 0; i < members.size(); ++i) {
      EXPECT_EQ(grid.coordinates(members[i]).context, static_cast<int>(i));
      EXPECT_EQ(grid.coordinates(members[i]).tensor, grid.coordinates(members[0]).tensor);
      EXPECT_EQ(grid.coordinates(members[i]).data, grid.coordinates(members[0]).data);
    }
  }
  for (const auto& [color, members] : fsdp) {
    ASSERT_EQ(members.size(), 12u);
    std::set<int> fsdp_ranks;
    for (int rank : members) {
      EXPECT_EQ(grid.coordinates(rank).tensor, color);
      fsdp_ranks.insert(grid.fsdp_rank(rank));
    }
    EXPECT_EQ(fsdp_ranks.size(), 12u);
    EXPECT_EQ(*fsdp_ranks.rbegin(), 11);
  }
}

TEST(ProcessGrid, OneByOneIsPlainDataParallel) {
  const ProcessGrid grid(4, 1, 1);
  EXPECT_FALSE(grid.model_parallel());
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(grid.coordinates(rank).data, rank);
    EXPECT_EQ(grid.fsdp_rank(rank), rank);
  }
}

std::string refusal(int world, int tensor, int context, int ranks_per_node) {
  try {
    ProcessGrid(world, tensor, context, ranks_per_node, "deck.in:7");
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(ProcessGrid, RefusesWhatDoesNotTile) {
  EXPECT_NE(refusal(6, 4, 1, 0).find("deck.in:7: parallel tensor 4 context 1 needs a multiple of 4 ranks"),
            std::string::npos)
      << refusal(6, 4, 1, 0);
  EXPECT_NE(refusal(12, 4, 1, 6).find("a tensor group would span two nodes"), std::string::npos)
      << refusal(12, 4, 1, 6);
  EXPECT_EQ(refusal(16, 8, 2, 8), "");
}

}  // namespace
}  // namespace ftrain
