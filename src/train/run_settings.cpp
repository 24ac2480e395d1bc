#include "train/run_settings.hpp"

#include <sstream>
#include <utility>

#include "base/error.hpp"
#include "fsdp/fp8_all_gather.hpp"
#include "runtime/attention_backend.hpp"

namespace ftrain {

namespace {

// The deck's words and the engine's enums are separate types (the deck
// depends on nothing above core); each switch below is the only place a
// deck choice becomes an engine value.
ShardingStrategy engine_strategy(deck::ShardingStrategy s) {
  switch (s) {
    case deck::ShardingStrategy::full_shard: return ShardingStrategy::full_shard;
    case deck::ShardingStrategy::shard_grad_op: return ShardingStrategy::shard_grad_op;
    case deck::ShardingStrategy::no_shard: return ShardingStrategy::no_shard;
    case deck::ShardingStrategy::hybrid_shard: return ShardingStrategy::hybrid_shard;
  }
  FT_THROW() << "unhandled deck sharding strategy " << static_cast<int>(s);
  return ShardingStrategy::full_shard;
}

BackwardPrefetch engine_prefetch(deck::BackwardPrefetch p) {
  switch (p) {
    case deck::BackwardPrefetch::backward_pre: return BackwardPrefetch::backward_pre;
    case deck::BackwardPrefetch::backward_post: return BackwardPrefetch::backward_post;
    case deck::BackwardPrefetch::none: return BackwardPrefetch::none;
  }
  FT_THROW() << "unhandled deck backward_prefetch " << static_cast<int>(p);
  return BackwardPrefetch::backward_pre;
}

Offload engine_offload(deck::Offload o) {
  switch (o) {
    case deck::Offload::none: return Offload::none;
    case deck::Offload::optimizer: return Offload::optimizer;
    case deck::Offload::all: return Offload::all;
  }
  FT_THROW() << "unhandled deck offload " << static_cast<int>(o);
  return Offload::none;
}

// What `offload` does where the run computes, for the fsdp header line.
std::string describe_offload(const RunConfig& c, const FsdpOptions& o) {
  if (o.offload == Offload::none) return "";
  const std::string setting = ", offload " + std::string(deck::word(c.fsdp.offload));
  if (o.device == Device::host)
    return setting + " (no effect on the host backend: the sharded state already is host memory)";
  return setting + (o.offload == Offload::all ? " (f32 state, AdamW and the compute-dtype shard in host memory)"
                                              : " (f32 state and AdamW in host memory)");
}

DType comm_dtype(deck::CommDtype d) { return d == deck::CommDtype::bf16 ? DType::bf16 : DType::f32; }

AttentionBackend engine_attention(deck::AttentionBackend a) {
  switch (a) {
    case deck::AttentionBackend::automatic: return AttentionBackend::automatic;
    case deck::AttentionBackend::cudnn: return AttentionBackend::cudnn;
    case deck::AttentionBackend::reference: return AttentionBackend::reference;
  }
  FT_THROW() << "unhandled deck attention_backend " << static_cast<int>(a);
  return AttentionBackend::automatic;
}

int checkpoint_interval(const RunConfig& c) {
  switch (c.activation_checkpointing) {
    case deck::ActivationCheckpointing::off: return 0;
    case deck::ActivationCheckpointing::on: return 1;
    case deck::ActivationCheckpointing::every: return static_cast<int>(c.activation_checkpointing_every);
  }
  FT_THROW() << "unhandled deck activation_checkpointing " << static_cast<int>(c.activation_checkpointing);
  return 0;
}

// The rules that relate the lora lines to the rest of the deck.
void check_lora_lines(const RunConfig& c) {
  const std::pair<const std::string*, const DeckLocation*> needs_lora[] = {
      {&c.lora.adapter_path, &c.lora.adapter_where},
      {&c.lora.save_adapter_path, &c.lora.save_adapter_where}};
  for (const auto& [value, where] : needs_lora)
    if (!value->empty() && !c.lora.enabled)
      FT_USER_ERROR() << where->str() << ": adapters need a 'lora' line (lora rank R alpha A targets ...)";
  if (c.lora.merge && !c.lora.enabled)
    FT_USER_ERROR() << c.lora.merge_where.str() << ": 'merge_adapter on' needs a 'lora' line";
  if (c.lora.enabled && c.precision == deck::Precision::fp8)
    FT_USER_ERROR() << c.lora.where.str() << ": 'lora' with precision fp8 is not supported (the frozen base "
                                             "linears would need FP8 dgrad-only GEMMs); use precision bf16 or fp32";
}

}  // namespace

FsdpOptions resolve_fsdp_options(const RunConfig& c, Device device) {
  FsdpOptions o;
  o.strategy = engine_strategy(c.fsdp.strategy);
  // fp8: linears inside blocks run FP8 GEMMs; everything else (embedding,
  // norms, attention, head) computes with bf16 parameters and activations.
  o.fp8 = c.precision == deck::Precision::fp8;
  const DType compute = c.precision == deck::Precision::fp32 ? DType::f32 : DType::bf16;
  o.param_dtype = c.fsdp.param_dtype.has_value() ? comm_dtype(*c.fsdp.param_dtype) : compute;
  o.reduce_dtype = comm_dtype(c.fsdp.reduce_dtype);
  o.fp8_recipe.format = c.fp8.format == deck::Fp8Format::hybrid ? fp8::Format::hybrid : fp8::Format::e4m3;
  o.fp8_recipe.amax_algo = c.fp8.amax_algo == deck::AmaxAlgo::max ? fp8::AmaxAlgo::max : fp8::AmaxAlgo::most_recent;
  o.fp8_recipe.amax_history_len = c.fp8.amax_history;
  o.fp8_recipe.margin = static_cast<int>(c.fp8.margin);
  o.fp8_all_gather = c.fp8.all_gather;
  o.backward_prefetch = engine_prefetch(c.fsdp.backward_prefetch);
  o.forward_prefetch = c.fsdp.forward_prefetch;
  o.limit_all_gathers = static_cast<int>(c.fsdp.limit_all_gathers);
  o.shard_group_size = static_cast<int>(c.fsdp.shard_group_size);
  o.checkpoint_every = checkpoint_interval(c);
  o.vocab_chunk = c.vocab_chunk;
  o.seed = c.seed;
  o.no_sync = c.fsdp.no_sync;
  if (o.no_sync && o.strategy != ShardingStrategy::no_shard && o.strategy != ShardingStrategy::shard_grad_op)
    FT_USER_ERROR() << c.fsdp.where.str() << ": no_sync on needs strategy no_shard or shard_grad_op (with "
                    << c.fsdp.strategy << " it would keep a full f32 gradient per unit, defeating the sharding)";
  if (o.no_sync && c.lora.enabled)
    FT_USER_ERROR() << c.fsdp.where.str() << ": no_sync on with lora is not supported";
  // Without a host_streams line FTRAIN_HOST_STREAM decides (the engine reads it).
  if (!c.host_streams_where.file.empty())
    o.host_streams = c.host_streams == deck::HostStreams::async ? HostStreams::async : HostStreams::sync;
  check_lora_lines(c);
  if (c.lora.enabled) {
    o.lora.enabled = true;
    o.lora.rank = static_cast<int>(c.lora.rank);
    o.lora.alpha = c.lora.alpha;
    o.lora.dropout = c.lora.dropout;
    o.lora.rslora = c.lora.rslora;
    o.lora_base_f32 = c.lora.base_dtype == deck::LoraBaseDtype::f32;
    o.lora.init = c.lora.init == deck::LoraInit::gaussian ? lora::AInit::gaussian : lora::AInit::kaiming;
    o.lora.all_linear = c.lora.all_linear;
    o.lora.targets = c.lora.all_linear ? std::vector<std::string>{} : c.lora.targets;
  }
  o.device = device;
  o.offload = engine_offload(c.fsdp.offload);
  o.attention_backend = engine_attention(c.attention_backend);
  o.device_comm = c.device_comm == deck::DeviceComm::mpi ? DeviceComm::mpi : DeviceComm::nccl;
  return o;
}

int shard_group_size_for(const FsdpOptions& o, int world_size, int ranks_per_node) {
  switch (o.strategy) {
    case ShardingStrategy::no_shard: return 1;
    case ShardingStrategy::hybrid_shard: return o.shard_group_size > 0 ? o.shard_group_size : ranks_per_node;
    default: return world_size;
  }
}

int resolve_shard_group_size(const RunConfig& c, const FsdpOptions& o, int world_size, int ranks_per_node) {
  const int group = shard_group_size_for(o, world_size, ranks_per_node);
  if (group < 1 || world_size % group != 0)
    FT_USER_ERROR() << c.fsdp.where.str() << ": fsdp " << c.fsdp.strategy << " shard_group_size " << group
                    << " does not divide the " << world_size << " ranks";
  return group;
}

optim::Schedule schedule_of(const RunConfig& c) {
  optim::Schedule s;
  switch (c.schedule.kind) {
    case deck::ScheduleKind::constant: s.kind = optim::ScheduleKind::constant; break;
    case deck::ScheduleKind::linear: s.kind = optim::ScheduleKind::linear; break;
    case deck::ScheduleKind::cosine: s.kind = optim::ScheduleKind::cosine; break;
  }
  s.warmup_steps = c.schedule.warmup_steps;
  s.warmup_ratio = c.schedule.warmup_ratio;
  s.min_lr = c.schedule.min_lr;
  return s;
}

optim::Schedule resolve_schedule(const RunConfig& c) {
  optim::Schedule s = schedule_of(c);
  optim::validate_schedule(s, c.optimizer.lr, c.max_steps);
  return s;
}

DType saved_dtype(const RunConfig& c) {
  return c.save_final.dtype == deck::SavedDtype::bf16 ? DType::bf16 : DType::f32;
}

std::string describe_settings(const RunConfig& c, const FsdpOptions& o, int shard_group_size) {
  std::ostringstream h;
  h << "fsdp: " << c.fsdp.strategy << ", param " << dtype_name(o.param_dtype) << ", reduce "
    << dtype_name(o.reduce_dtype) << ", backward_prefetch " << c.fsdp.backward_prefetch << ", forward_prefetch "
    << (o.forward_prefetch ? "on" : "off") << ", limit_all_gathers " << o.limit_all_gathers
    << ", activation_checkpointing " << c.activation_checkpointing
    << (c.activation_checkpointing == deck::ActivationCheckpointing::every
            ? " " + std::to_string(c.activation_checkpointing_every)
            : "")
    << (o.fp8 ? ", fp8 all_gather " + decide_fp8_all_gather(o, shard_group_size).text : "")
    << (o.no_sync ? ", no_sync on (gradients reduced once per step)" : "") << describe_offload(c, o) << "\n";
  h << "training: batch micro " << c.batch.micro_batch << " accumulate " << c.batch.grad_accum << " seq_len "
    << c.batch.seq_len << " | optimizer " << c.optimizer.name << " lr " << c.optimizer.lr << " beta1 "
    << c.optimizer.beta1 << " beta2 " << c.optimizer.beta2 << " eps " << c.optimizer.eps << " weight_decay "
    << c.optimizer.weight_decay << " | schedule " << c.schedule.kind << " warmup_steps "
    << optim::warmup_steps(schedule_of(c), c.max_steps) << " min_lr " << c.schedule.min_lr << " | clip_grad_norm "
    << c.clip_grad_norm << (c.clip_grad_norm > 0 ? "" : " (off)") << " | precision " << c.precision << " | seed "
    << c.seed << "\n";
  return h.str();
}

}  // namespace ftrain
