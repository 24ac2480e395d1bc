// Collective error agreement (see collective_errors.hpp).
#include "ckpt/collective_errors.hpp"

#include <cstdint>
#include <cstring>

#include "core/tensor.hpp"

namespace ftrain::ckpt {

std::string broadcast_text(Communicator& world, const std::string& text, int root) {
  // A sum to which only `root` contributes is a broadcast; the Communicator
  // interface has no broadcast of its own and these texts are short.
  const bool mine = world.rank() == root;
  const std::int64_t length = world.all_reduce_sum(static_cast<std::int64_t>(mine ? text.size() : 0));
  if (length == 0) return {};
  const std::int64_t words = (length + 7) / 8;
  Tensor buffer = Tensor::zeros({words}, DType::i64);
  if (mine) std::memcpy(buffer.data_as<std::int64_t>(), text.data(), text.size());
  world.all_reduce_sum(buffer).wait();
  return std::string(reinterpret_cast<const char*>(buffer.data_as<std::int64_t>()), static_cast<std::size_t>(length));
}

std::string agree_on_failure(Communicator& world, const std::string& mine) {
  const bool failed = !mine.empty();
  const std::int64_t failures = world.all_reduce_sum(static_cast<std::int64_t>(failed));
  if (failures == 0) return {};
  // Lowest failing rank: the largest (size - rank) among the failing ones.
  const double top = world.all_reduce_max(failed ? static_cast<double>(world.size() - world.rank()) : 0.0);
  const int first = world.size() - static_cast<int>(top);
  std::string message = broadcast_text(world, mine, first);
  if (world.size() > 1) message = "rank " + std::to_string(first) + ": " + message;
  if (failures > 1) message += " (and " + std::to_string(failures - 1) + " other rank(s))";
  return message;
}

}  // namespace ftrain::ckpt
