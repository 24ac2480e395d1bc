#include "train/plan.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/error.hpp"

namespace ftrain {

FsdpOptions fsdp_options_from(const RunConfig& c) {
  FsdpOptions o;
  if (!parse_sharding_strategy(c.fsdp.strategy, o.strategy))
    FT_USER_ERROR() << c.fsdp.where.str() << ": unknown fsdp strategy '" << c.fsdp.strategy << "'";
  // fp8: linears inside blocks run FP8 GEMMs; everything else (embedding,
  // norms, attention, head) computes with bf16 parameters and activations.
  const std::string precision = c.precision == "fp8" ? "bf16" : c.precision;
  const std::string param = c.fsdp.param_dtype.empty() ? precision : c.fsdp.param_dtype;
  o.fp8 = c.precision == "fp8";
  if (!fp8::parse_format(c.fp8.format, o.fp8_recipe.format) ||
      !fp8::parse_amax_algo(c.fp8.amax_algo, o.fp8_recipe.amax_algo))
    FT_USER_ERROR() << c.fp8.where.str() << ": bad fp8 format '" << c.fp8.format << "' or amax_algo '"
                    << c.fp8.amax_algo << "'";
  o.fp8_recipe.amax_history_len = c.fp8.amax_history;
  o.fp8_recipe.margin = static_cast<int>(c.fp8.margin);
  if (!parse_dtype(param, o.param_dtype) || (o.param_dtype != DType::f32 && o.param_dtype != DType::bf16))
    FT_USER_ERROR() << c.fsdp.where.str() << ": param_dtype must be fp32 or bf16, got '" << param << "'";
  if (!parse_dtype(c.fsdp.reduce_dtype, o.reduce_dtype) ||
      (o.reduce_dtype != DType::f32 && o.reduce_dtype != DType::bf16))
    FT_USER_ERROR() << c.fsdp.where.str() << ": reduce_dtype must be fp32 or bf16, got '" << c.fsdp.reduce_dtype << "'";
  if (c.fsdp.backward_prefetch == "backward_pre") o.backward_prefetch = BackwardPrefetch::backward_pre;
  else if (c.fsdp.backward_prefetch == "backward_post") o.backward_prefetch = BackwardPrefetch::backward_post;
  else if (c.fsdp.backward_prefetch == "none") o.backward_prefetch = BackwardPrefetch::none;
  else FT_USER_ERROR() << c.fsdp.where.str() << ": unknown backward_prefetch '" << c.fsdp.backward_prefetch << "'";
  o.forward_prefetch = c.fsdp.forward_prefetch;
  o.limit_all_gathers = static_cast<int>(c.fsdp.limit_all_gathers);
  o.shard_group_size = static_cast<int>(c.fsdp.shard_group_size);
  if (c.activation_checkpointing == "on") o.checkpoint_every = 1;
  else if (c.activation_checkpointing == "off") o.checkpoint_every = 0;
  else o.checkpoint_every = static_cast<int>(c.activation_checkpointing_every);
  o.vocab_chunk = c.vocab_chunk;
  return o;
}

int shard_group_size_for(const FsdpOptions& o, int world_size, int ranks_per_node) {
  switch (o.strategy) {
    case ShardingStrategy::no_shard: return 1;
    case ShardingStrategy::hybrid_shard: return o.shard_group_size > 0 ? o.shard_group_size : ranks_per_node;
    default: return world_size;
  }
}

RunPlan make_plan(Model& model, const RunConfig& c, const FsdpOptions& o, int world_size, int ranks_per_node) {
  RunPlan p;
  p.world_size = world_size;
  p.shard_group_size = shard_group_size_for(o, world_size, ranks_per_node);
  const std::int64_t s = p.shard_group_size;
  for (int u = 0; u < model.num_units(); ++u) {
    UnitPlan up;
    up.name = model.unit(u).name();
    for (const auto& spec : model.unit(u).params())
      if (spec.tied_to.empty()) up.numel += shape_numel(spec.shape);
    up.shard_numel = std::max<std::int64_t>(1, (up.numel + s - 1) / s);
    p.parameters += up.numel;
    p.largest_unit = std::max(p.largest_unit, up.numel);
    p.state_bytes_per_rank += 16 * up.shard_numel;
    p.units.push_back(up);
  }
  p.global_batch = c.batch.micro_batch * c.batch.grad_accum * world_size;
  // Images have no sequence length from the deck (tokens per image are the
  // model's business, counted in its FLOPs): report samples only.
  p.tokens_per_step = model.data_kind() == DataKind::tokens ? p.global_batch * c.batch.seq_len : 0;
  p.flops_per_step = model.training_flops_per_sample(c.batch.seq_len) * static_cast<double>(p.global_batch);
  const double param_bytes = static_cast<double>(dtype_size(o.param_dtype));
  // In flight at once: limit_all_gathers gathered units, plus one full f32
  // gradient buffer of the unit in backward.
  const std::int64_t in_flight = o.strategy == ShardingStrategy::no_shard || s == 1 ? 0 : o.limit_all_gathers;
  p.gathered_bytes_peak = static_cast<std::int64_t>(in_flight * p.largest_unit * param_bytes) + 4 * p.largest_unit;
  return p;
}

std::string human_count(double n) {
  char buf[64];
  if (n >= 1e9) std::snprintf(buf, sizeof buf, "%.2fB", n / 1e9);
  else if (n >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
  else if (n >= 1e3) std::snprintf(buf, sizeof buf, "%.1fK", n / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", n);
  return buf;
}

std::string human_bytes(double b) {
  char buf[64];
  if (b >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  else if (b >= 1024.0 * 1024) std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024));
  else std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  return buf;
}

std::string format_plan(const RunPlan& p) {
  std::ostringstream s;
  s << "plan:\n";
  s << "  parameters        " << p.parameters << " (" << human_count(static_cast<double>(p.parameters)) << ") in "
    << p.units.size() << " units; largest unit " << human_count(static_cast<double>(p.largest_unit)) << "\n";
  s << "  ranks             " << p.world_size << ", shard group " << p.shard_group_size << ", replicas "
    << p.world_size / p.shard_group_size << "\n";
  s << "  global batch      " << p.global_batch << " samples";
  if (p.tokens_per_step > 0) s << ", " << p.tokens_per_step << " tokens per step";
  s << "\n";
  char flops[64];
  std::snprintf(flops, sizeof flops, "%.4g", p.flops_per_step);
  s << "  FLOPs per step    " << flops << " (forward + backward, model FLOPs)\n";
  s << "  memory per rank   " << human_bytes(static_cast<double>(p.state_bytes_per_rank))
    << " sharded state (f32 master + grad + AdamW m, v) + " << human_bytes(static_cast<double>(p.gathered_bytes_peak))
    << " gathered units in flight; activations are measured at run time\n";
  return s.str();
}

}  // namespace ftrain
