#include "comm/process_grid.hpp"

#include <sstream>

#include "base/error.hpp"

namespace ftrain {

namespace {
std::string prefix(const std::string& where) { return where.empty() ? std::string() : where + ": "; }
}  // namespace

ProcessGrid::ProcessGrid(int world_size, int tensor, int context, int ranks_per_node, const std::string& where)
    : world_size_(world_size), tensor_(tensor), context_(context) {
  FT_CHECK(world_size >= 1) << "process grid over " << world_size << " ranks";
  if (tensor < 1 || context < 1)
    FT_USER_ERROR() << prefix(where) << "parallel tensor " << tensor << " context " << context
                    << ": both must be at least 1";
  if (world_size % (tensor * context) != 0)
    FT_USER_ERROR() << prefix(where) << "parallel tensor " << tensor << " context " << context << " needs a multiple of "
                    << tensor * context << " ranks (tensor x context), but the job has " << world_size;
  if (ranks_per_node > 0 && ranks_per_node % tensor != 0)
    FT_USER_ERROR() << prefix(where) << "parallel tensor " << tensor << ": a tensor group would span two nodes ("
                    << ranks_per_node << " ranks per node is not a multiple of " << tensor
                    << "); its per-layer collectives need a node's links: use a tensor size that divides the ranks "
                    << "per node";
}

GridCoordinates ProcessGrid::coordinates(int rank) const {
  FT_CHECK(rank >= 0 && rank < world_size_) << "rank " << rank << " outside a grid of " << world_size_;
  GridCoordinates c;
  c.tensor = rank % tensor_;
  c.context = (rank / tensor_) % context_;
  c.data = rank / (tensor_ * context_);
  return c;
}

int ProcessGrid::rank_of(const GridCoordinates& c) const {
  FT_CHECK(c.tensor >= 0 && c.tensor < tensor_ && c.context >= 0 && c.context < context_ && c.data >= 0 &&
           c.data < data_size())
      << "grid coordinates (data " << c.data << ", context " << c.context << ", tensor " << c.tensor
      << ") outside " << describe();
  return (c.data * context_ + c.context) * tensor_ + c.tensor;
}

int ProcessGrid::tensor_group_color(int rank) const { return rank / tensor_; }

int ProcessGrid::context_group_color(int rank) const {
  const GridCoordinates c = coordinates(rank);
  return c.data * tensor_ + c.tensor;
}

int ProcessGrid::fsdp_group_color(int rank) const { return coordinates(rank).tensor; }

int ProcessGrid::fsdp_rank(int rank) const {
  const GridCoordinates c = coordinates(rank);
  return c.data * context_ + c.context;
}

std::string ProcessGrid::describe() const {
  std::ostringstream s;
  s << "data " << data_size() << " x context " << context_ << " x tensor " << tensor_ << " (" << world_size_
    << " ranks)";
  return s.str();
}

}  // namespace ftrain
