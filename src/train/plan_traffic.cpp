#include "train/plan_traffic.hpp"

#include <algorithm>
#include <map>
#include <sstream>

#include "train/plan_activations.hpp"

namespace ftrain {

void add_fsdp_traffic(StepTraffic& t, const FsdpOptions& o, const RunPlan& p, double micro_steps) {
  const double s = p.shard_group_size, replicas = static_cast<double>(p.fsdp_group_size) / s;
  const double param_bytes = static_cast<double>(dtype_size(o.param_dtype));
  const double reduce_bytes = static_cast<double>(dtype_size(o.reduce_dtype));
  double gathers = 0;  // per micro-step
  switch (o.strategy) {
    case ShardingStrategy::full_shard:
    case ShardingStrategy::hybrid_shard: gathers = 2; break;
    case ShardingStrategy::shard_grad_op: gathers = 1; break;
    case ShardingStrategy::no_shard: gathers = 0; break;
  }
  const bool deferred = o.no_sync && (o.strategy == ShardingStrategy::no_shard ||
                                      o.strategy == ShardingStrategy::shard_grad_op);
  const double reductions = deferred ? 1 : micro_steps;
  for (const UnitPlan& u : p.units) {
    const double shard = static_cast<double>(u.shard_numel);
    const double grad_shard = p.lora ? static_cast<double>(u.adapter_shard_numel) : shard;
    t.fsdp_gather += micro_steps * gathers * (s - 1) * shard * param_bytes;
    if (o.strategy == ShardingStrategy::no_shard) {
      const double n = p.fsdp_group_size;
      t.fsdp_reduce += reductions * 2 * (n - 1) / n * grad_shard * reduce_bytes;
    } else {
      // reduce-scatter over the shard group, then hybrid_shard's all-reduce of the shard over its replicas
      t.fsdp_reduce += reductions * ((s - 1) * grad_shard + 2 * (replicas - 1) / replicas * grad_shard) * reduce_bytes;
    }
  }
}

StepTraffic plan_traffic(const Model& model, const RunConfig& c, const FsdpOptions& o, const RunPlan& p) {
  StepTraffic t;
  const double micro_steps = static_cast<double>(std::max<std::int64_t>(1, c.batch.grad_accum));
  add_fsdp_traffic(t, o, p, micro_steps);
  if (model.architecture() != "llama" || (p.tensor <= 1 && p.context <= 1)) return t;
  const auto config = model.config();
  const double layers = config_number(config, "num_hidden_layers"), hidden = config_number(config, "hidden_size");
  const double kv = config_number(config, "num_key_value_heads") * config_number(config, "head_dim");
  const double element = c.precision == deck::Precision::fp32 ? 4 : 2;
  const double tokens = static_cast<double>(c.batch.micro_batch) * static_cast<double>(c.batch.seq_len) / p.context;
  const double checkpointed = checkpointed_layers(c, layers);
  if (p.tensor > 1) {
    const double per_micro = 8 * layers + 4 * checkpointed + 4;
    const double buffer = tokens * hidden * element;
    t.tensor_collectives = static_cast<std::int64_t>(per_micro * micro_steps);
    t.tensor = per_micro * micro_steps * (p.tensor - 1.0) / p.tensor * buffer;
  }
  if (p.context > 1) {
    // Per layer: the forward (and its recompute) and the backward each pass
    // K/V C - 1 times in the compute dtype; the backward's running dK/dV
    // sums travel C times (the last pass brings them home) as one f32
    // message (layers/context_parallel_attention.hpp).
    const double kv_sends = (2 * layers + checkpointed) * (p.context - 1);
    const double sum_sends = layers * p.context;
    const double block = tokens * 2 * kv / p.tensor * element;
    const double sums = tokens * 2 * kv / p.tensor * 4;
    t.ring_steps = static_cast<std::int64_t>((kv_sends + sum_sends) * micro_steps);
    t.context = micro_steps * (kv_sends * block + sum_sends * sums);
  }
  return t;
}

std::string format_parallel_plan(const RunPlan& p) {
  std::ostringstream s;
  if (p.tensor > 1 || p.context > 1) {
    s << "  grid              " << p.grid << ": ";
    if (p.tensor > 1) s << "tensor groups of " << p.tensor << " consecutive ranks; ";
    if (p.context > 1) s << "context rings of " << p.context << " ranks " << p.tensor << " apart; ";
    s << "fsdp groups of " << p.fsdp_group_size << " ranks (the data x context ranks of one tensor index)\n";
    if (p.tensor > 1)
      s << "  per tensor rank   " << p.slice_parameters << " (" << human_count(static_cast<double>(p.slice_parameters))
      << ") parameters: the split matrices / " << p.tensor << " + "
      << human_count(static_cast<double>(p.replicated_parameters))
      << " replicated (norm weights); largest unit slice " << human_count(static_cast<double>(p.largest_unit_slice))
      << "\n";
  }
  if (p.world_size <= 1) return s.str();
  const StepTraffic& t = p.traffic;
  s << "  communication     sent per rank and step: fsdp " << human_bytes(t.fsdp_gather + t.fsdp_reduce)
    << " (parameter all-gathers " << human_bytes(t.fsdp_gather) << ", gradient reductions "
    << human_bytes(t.fsdp_reduce) << "; shard group " << p.shard_group_size << ")";
  if (p.tensor > 1)
    s << "; tensor " << human_bytes(t.tensor) << " (" << t.tensor_collectives
      << " sequence-parallel all-gathers and reduce-scatters over " << p.tensor << " ranks)";
  if (p.context > 1)
    s << "; context ring " << human_bytes(t.context) << " (" << t.ring_steps << " sends to the next of "
      << p.context << " ranks: K/V blocks, and the backward's dK/dV sums in f32)";
  s << "\n";
  return s.str();
}

}  // namespace ftrain
