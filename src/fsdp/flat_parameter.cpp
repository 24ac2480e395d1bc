#include "fsdp/flat_parameter.hpp"

#include <algorithm>

#include "base/error.hpp"

namespace ftrain {

FlatParameter::FlatParameter(int unit_index, std::string unit_name, const std::vector<ParamSpec>& own_specs,
                             int shard_group_size, int shard_rank, int tensor_rank)
    : unit_index_(unit_index), unit_name_(std::move(unit_name)) {
  FT_CHECK(shard_group_size >= 1 && shard_rank >= 0 && shard_rank < shard_group_size)
      << "unit " << unit_name_ << ": shard rank " << shard_rank << " of " << shard_group_size;
  for (const auto& spec : own_specs) {
    FlatEntry e;
    e.name = spec.name;
    e.shape = spec.shape;
    e.offset = numel_;
    e.numel = shape_numel(spec.shape);
    e.init = spec.init;
    e.init_std = spec.init_std;
    e.init_bound = spec.init_bound;
    e.weight_decay = spec.weight_decay;
    if (spec.tensor_split_dim >= 0) {
      const auto d = static_cast<std::size_t>(spec.tensor_split_dim);
      FT_CHECK(d < spec.shape.size() && spec.full_shape.size() == spec.shape.size() && spec.shape[d] > 0 &&
               spec.full_shape[d] % spec.shape[d] == 0 && tensor_rank < spec.full_shape[d] / spec.shape[d])
          << "unit " << unit_name_ << ": parameter '" << spec.name << "' " << shape_string(spec.shape)
          << " split along dimension " << spec.tensor_split_dim << " is not tensor rank " << tensor_rank
          << "'s slice of " << shape_string(spec.full_shape);
      for (std::size_t k = 0; k < spec.shape.size(); ++k)
        FT_CHECK(k == d || spec.shape[k] == spec.full_shape[k])
            << "parameter '" << spec.name << "' " << shape_string(spec.shape) << " differs from its full shape "
            << shape_string(spec.full_shape) << " outside the split dimension " << spec.tensor_split_dim;
      e.tensor_split_dim = spec.tensor_split_dim;
      e.full_shape = spec.full_shape;
      e.tensor_rank = tensor_rank;
    }
    numel_ += e.numel;
    entries_.push_back(std::move(e));
  }
  const std::int64_t s = shard_group_size;
  padded_numel_ = ((numel_ + s - 1) / s) * s;
  if (padded_numel_ == 0) padded_numel_ = s;  // keeps every collective non-empty
  shard_numel_ = padded_numel_ / s;
  shard_offset_ = shard_rank * shard_numel_;
}

void for_each_full_run(const FlatEntry& e, std::int64_t first, std::int64_t count,
                       const std::function<void(std::int64_t, std::int64_t, std::int64_t)>& fn) {
  if (!e.tensor_split()) {
    if (count > 0) fn(first, count, 0);
    return;
  }
  // The slice is prod(shape[:d]) blocks of shape[d] * inner contiguous
  // elements; block o starts in the full tensor at o * full[d] * inner plus
  // the rank's offset along d.
  const auto d = static_cast<std::size_t>(e.tensor_split_dim);
  std::int64_t inner = 1;
  for (std::size_t k = d + 1; k < e.shape.size(); ++k) inner *= e.shape[k];
  const std::int64_t block = e.shape[d] * inner, full_block = e.full_shape[d] * inner;
  std::int64_t at = 0;
  while (at < count) {
    const std::int64_t i = first + at, o = i / block, j = i % block;
    const std::int64_t len = std::min(count - at, block - j);
    fn(o * full_block + e.tensor_rank * block + j, len, at);
    at += len;
  }
}

FlatEntry full_entry(const FlatEntry& e) {
  if (!e.tensor_split()) return e;
  FlatEntry full = e;
  full.shape = e.full_shape;
  full.numel = shape_numel(e.full_shape);
  full.tensor_split_dim = -1;
  full.tensor_rank = 0;
  return full;
}

void for_each_slice_run(const Shape& full_shape, int split_dim, int tensor_size, std::int64_t full_first,
                        std::int64_t count,
                        const std::function<void(int, std::int64_t, std::int64_t, std::int64_t)>& fn) {
  if (split_dim < 0 || tensor_size <= 1) {
    if (count > 0) fn(0, full_first, count, 0);
    return;
  }
  const auto d = static_cast<std::size_t>(split_dim);
  FT_CHECK(d < full_shape.size() && full_shape[d] % tensor_size == 0)
      << "shape " << shape_string(full_shape) << " split " << tensor_size << " ways along dimension " << split_dim;
  std::int64_t inner = 1;
  for (std::size_t k = d + 1; k < full_shape.size(); ++k) inner *= full_shape[k];
  const std::int64_t block = full_shape[d] / tensor_size * inner, full_block = full_shape[d] * inner;
  std::int64_t at = 0;
  while (at < count) {
    const std::int64_t i = full_first + at, o = i / full_block, j = i % full_block;
    const int rank = static_cast<int>(j / block);
    const std::int64_t k = j % block, len = std::min(count - at, block - k);
    fn(rank, o * block + k, len, at);
    at += len;
  }
}

Tensor master_host_f32(const FlatParameter& flat) {
  Tensor host = host_readable(flat.master);
  if (host.dtype() == DType::f32) return host;
  Tensor wide = Tensor::empty(host.shape(), DType::f32, Device::host, flat.unit_name() + ".master_f32");
  copy_convert(host, wide);
  return wide;
}

}  // namespace ftrain
