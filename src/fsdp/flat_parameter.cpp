#include "fsdp/flat_parameter.hpp"

#include "base/error.hpp"

namespace ftrain {

FlatParameter::FlatParameter(int unit_index, std::string unit_name, const std::vector<ParamSpec>& own_specs,
                             int shard_group_size, int shard_rank)
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
    numel_ += e.numel;
    entries_.push_back(std::move(e));
  }
  const std::int64_t s = shard_group_size;
  padded_numel_ = ((numel_ + s - 1) / s) * s;
  if (padded_numel_ == 0) padded_numel_ = s;  // keeps every collective non-empty
  shard_numel_ = padded_numel_ / s;
  shard_offset_ = shard_rank * shard_numel_;
}

Tensor master_host_f32(const FlatParameter& flat) {
  Tensor host = host_readable(flat.master);
  if (host.dtype() == DType::f32) return host;
  Tensor wide = Tensor::empty(host.shape(), DType::f32, Device::host, flat.unit_name() + ".master_f32");
  copy_convert(host, wide);
  return wide;
}

}  // namespace ftrain
