#include "fsdp/engine.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>

#include "base/error.hpp"
#include "comm/device_communicator.hpp"
#include "comm/mpi_communicator.hpp"
#include "comm/node_layout.hpp"
#include "core/rng.hpp"
#include "kernels/adamw_chunks.hpp"
#include "kernels/ops.hpp"
#include "fsdp/non_finite.hpp"
#include "layers/context_parallel_attention.hpp"
#include "layers/lora_adapters.hpp"

namespace ftrain {

const char* sharding_strategy_name(ShardingStrategy s) {
  switch (s) {
    case ShardingStrategy::full_shard: return "full_shard";
    case ShardingStrategy::shard_grad_op: return "shard_grad_op";
    case ShardingStrategy::no_shard: return "no_shard";
    case ShardingStrategy::hybrid_shard: return "hybrid_shard";
  }
  return "?";
}

DroppedWait dropped_wait_from_environment() {
  const char* v = std::getenv("FTRAIN_DEBUG_DROP_WAIT");
  if (v == nullptr || *v == '\0') return DroppedWait::none;
  const std::string s(v);
  DroppedWait d = DroppedWait::none;
  if (s == "gather") d = DroppedWait::gather;
  else if (s == "reduce") d = DroppedWait::reduce;
  else if (s == "after") d = DroppedWait::after;
  else if (s == "offload") d = DroppedWait::offload;
  else if (s == "tensor") d = DroppedWait::tensor;
  else if (s == "context") d = DroppedWait::context;
  else FT_USER_ERROR() << "environment variable FTRAIN_DEBUG_DROP_WAIT='" << s
                       << "': expected gather, reduce, after, offload, tensor or context";
  static bool noted = false;
  if (!noted) {
    noted = true;
    std::fprintf(stderr, "ftrain: FTRAIN_DEBUG_DROP_WAIT=%s: the FSDP engine drops one event wait on purpose "
                         "(a race for ThreadSanitizer to find; never use for training)\n", v);
  }
  return d;
}

namespace {
// Deck `host_streams` wins; without it FTRAIN_HOST_STREAM decides (read
// only then, so its notice is not printed for a mode that does not run).
ExecutionOptions execution_options_for(const FsdpOptions& o) {
  ExecutionOptions e = ExecutionOptions::from_environment();  // the host stream kind, unless the deck says
  if (o.host_streams != HostStreams::from_environment) e.asynchronous = o.host_streams == HostStreams::async;
  e.device = o.device;
  e.attention_backend = o.attention_backend;
  return e;
}

// Offload's host ops run on a worker thread of their own whatever the
// device streams are: the CPU AdamW and the gradient adds overlap the
// device's work (and the caller) instead of running inline.
ExecutionOptions offload_host_options(const FsdpOptions& o) {
  ExecutionOptions e;
  e.device = Device::host;
  e.asynchronous = o.offload != Offload::none && o.device != Device::host;
  return e;
}
}  // namespace

FsdpEngine::FsdpEngine(Model& model, Communicator& world, const FsdpOptions& options)
    : model_(model),
      world_(world),
      options_(options),
      grid_(world.size(), options.tensor_parallel, options.context_parallel),
      exec_(execution_options_for(options)),
      host_exec_(offload_host_options(options)) {
  // The options come checked from the deck (train/run_settings.hpp): a
  // violation here is a caller's bug, not a user's mistake.
  FT_CHECK(options_.limit_all_gathers >= 1) << "limit_all_gathers must be >= 1";
  dropped_wait_ = dropped_wait_from_environment();
  FT_CHECK(!options_.no_sync || options_.strategy == ShardingStrategy::no_shard ||
           options_.strategy == ShardingStrategy::shard_grad_op)
      << "no_sync with " << sharding_strategy_name(options_.strategy) << " (only no_shard and shard_grad_op)";
  FT_CHECK(!(options_.no_sync && options_.lora.enabled)) << "no_sync with lora";
  FT_CHECK(!(options_.lora.enabled && options_.fp8)) << "lora with fp8";
  FT_CHECK(!options_.lora.enabled ||
           (options_.lora.rank >= 1 && options_.lora.alpha > 0 && options_.lora.dropout >= 0 &&
            options_.lora.dropout < 1 && (options_.lora.all_linear || !options_.lora.targets.empty())))
      << "lora rank " << options_.lora.rank << " alpha " << options_.lora.alpha << " dropout "
      << options_.lora.dropout << " targets " << options_.lora.targets_text();
  if (exec_.device() != Device::host) {
    // Device buffers never reach MPI directly: NCCL, or the staged
    // communicator (device_comm), over the same ranks as world_.
    const auto* mpi = dynamic_cast<const MpiCommunicator*>(&world_);
    FT_CHECK(mpi != nullptr) << "device " << device_name(exec_.device()) << ": the engine needs an MPI world communicator "
                             << "to build its device communicator on, got " << world_.describe();
    device_world_ = make_device_communicator(options_.device_comm, mpi->handle(), exec_);
  }
  // The strategies shard over the FSDP group: the whole world, or with
  // parallel tensor T the world/T ranks of this rank's tensor index (each
  // shards its own slices); ranks are numbered by their index in it.
  const int rank = world_.rank();
  const int tensor_index = grid_.coordinates(rank).tensor;
  const int world_size = grid_.fsdp_size();
  const int fsdp_index = grid_.fsdp_rank(rank);
  int group_size = world_size;
  switch (options_.strategy) {
    case ShardingStrategy::full_shard:
    case ShardingStrategy::shard_grad_op: group_size = world_size; break;
    case ShardingStrategy::no_shard: group_size = 1; break;
    case ShardingStrategy::hybrid_shard: {
      if (options_.shard_group_size > 0) {
        group_size = options_.shard_group_size;
        break;
      }
      // Every rank must reach the same group size: a node's own size differs
      // between the nodes of an uneven launch (3+1 ranks).
      const NodeLayout nodes = gather_node_layout(world_);
      const std::string problem = hybrid_shard_problem(nodes);
      FT_CHECK(problem.empty()) << "fsdp hybrid_shard on rank " << world_.rank() << ": " << problem;
      group_size = nodes.most_ranks_per_node();
      // A node holds whole tensor groups (the grid's order): its share of an FSDP group.
      FT_CHECK(group_size % grid_.tensor_size() == 0)
          << "fsdp hybrid_shard with parallel tensor " << grid_.tensor_size() << ": " << group_size
          << " ranks per node do not hold whole tensor groups";
      group_size /= grid_.tensor_size();
      break;
    }
  }
  FT_CHECK(group_size >= 1 && world_size % group_size == 0)
      << "fsdp " << sharding_strategy_name(options_.strategy) << ": shard group size " << group_size
      << " does not divide the " << world_size << " ranks";
  // group: which shard group of the FSDP group; position: the index inside
  // it (the replica group gathers the same position of every shard group).
  const int group = fsdp_index / group_size, position = fsdp_index % group_size;
  // Colors: one range of world_size per tensor index (T = 1: the group and
  // the replica index themselves). Keys by world rank keep the FSDP order.
  shard_comm_ = collectives().split(tensor_index * world_size + group, rank);
  if (world_size / group_size > 1)
    replica_comm_ = collectives().split(tensor_index * world_size + position, rank);
  // One shard group of every tensor rank: each element of the model once.
  if (grid_.tensor_size() > 1) norm_comm_ = collectives().split(group, rank);
  if (grid_.model_parallel()) {
    FT_CHECK(!offloads() && !options_.lora.enabled && !options_.fp8)
        << "parallel tensor " << grid_.tensor_size() << " context " << grid_.context_size()
        << " with fsdp offload, lora or precision fp8 (the deck refuses these)";
    if (grid_.tensor_size() > 1) model_.split_for_tensor_parallel(grid_.tensor_size());
    if (grid_.context_size() > 1) model_.use_context_parallel(grid_.context_size());
    model_groups_ = make_model_parallel_groups(collectives(), grid_);
    if (dropped_wait_ == DroppedWait::tensor && model_groups_.tensor) model_groups_.tensor->drop_stream_wait_for_test();
    if (dropped_wait_ == DroppedWait::context && model_groups_.context)
      model_groups_.context->drop_stream_wait_for_test();
    model_parallel_ = model_groups_.view();
    ctx_.parallel = &model_parallel_;
  }
  if (offloads()) {
    copy_stream_ = make_device_stream(exec_.device(), "offload_copy");
    host_shard_comm_ = world_.split(group, world_.rank());
  }

  ctx_.execution_context = &exec_;
  ctx_.device = exec_.device();
  ctx_.compute_dtype = options_.param_dtype;
  ctx_.vocab_chunk = options_.vocab_chunk;
  ctx_.fp8 = options_.fp8;
  ctx_.fp8_recipe = options_.fp8 ? &options_.fp8_recipe : nullptr;

  const int n_units = model_.num_units();
  const bool lora_on = options_.lora.enabled;
  std::vector<std::string> adaptable_seen;  // for the error when no target matches
  FT_CHECK(n_units >= 2) << "model " << model_.architecture() << " has " << n_units << " units; expected >= 2";
  std::map<std::string, SlotSource> owner_of;
  for (int u = 0; u < n_units; ++u) {
    Unit& unit = model_.unit(u);
    const auto specs = unit.params();
    std::vector<ParamSpec> own;
    std::vector<SlotSource> slots;
    for (const auto& spec : specs) {
      if (!spec.tied_to.empty()) {
        auto it = owner_of.find(spec.tied_to);
        FT_CHECK(it != owner_of.end()) << "unit " << unit.name() << " ties to '" << spec.tied_to
                                       << "', which no earlier unit owns";
        slots.push_back(it->second);
        continue;
      }
      FT_CHECK(owner_of.count(spec.name) == 0) << "parameter '" << spec.name << "' declared twice";
      SlotSource src{u, static_cast<int>(own.size())};
      owner_of[spec.name] = src;
      slots.push_back(src);
      own.push_back(spec);
    }
    // Every shard lives on the training device; the host touches it only
    // through explicit copies (init, checkpoints).
    // Offload: the trainable state (and, offload all, a frozen master) in
    // host memory the device copies to and from directly (pinned), and the
    // compute-dtype shard the host casts for the device too.
    const DType frozen_dtype = frozen_base_dtype();
    auto allocate = [this, frozen_dtype](FlatParameter& f, bool trainable) {
      const Shape shard_shape{f.shard_numel()};
      const bool to_host = offloads() && (trainable || options_.offload == Offload::all);
      auto zeros = [&](DType dtype, const char* what) {
        const std::string name = f.unit_name() + what;
        return to_host ? Tensor::pinned_host(shard_shape, dtype, exec_.device(), name)
                       : Tensor::zeros(shard_shape, dtype, exec_.device(), name);
      };
      f.master = zeros(trainable ? DType::f32 : frozen_dtype, ".master");
      if (to_host && f.master.dtype() != options_.param_dtype)
        f.compute_shard_host = zeros(options_.param_dtype, ".compute_shard_host");
      if (!trainable) return;  // frozen: no gradient, no optimizer state
      f.grad = zeros(DType::f32, ".grad");
      f.exp_avg = zeros(DType::f32, ".exp_avg");
      f.exp_avg_sq = zeros(DType::f32, ".exp_avg_sq");
    };
    auto flat = std::make_unique<FlatParameter>(u, unit.name(), own, shard_comm_->size(), shard_comm_->rank(),
                                                tensor_index);
    allocate(*flat, /*trainable=*/!lora_on);
    flats_.push_back(std::move(flat));

    // LoRA: the unit's adapters in a trainable flat parameter of their own.
    lora::UnitAdapterPlan plan;
    if (lora_on) plan = lora::plan_unit_adapters(options_.lora, unit.name(), specs, adaptable_seen);
    if (plan.specs.empty()) {
      adapter_flats_.push_back(nullptr);
    } else {
      auto af = std::make_unique<FlatParameter>(u, unit.name() + ".lora", plan.specs, shard_comm_->size(),
                                                shard_comm_->rank());
      allocate(*af, /*trainable=*/true);
      adapter_flats_.push_back(std::move(af));
    }
    adapted_.push_back(std::move(plan.adapted));
    adapted_slots_.push_back(std::move(plan.slots));
    unit_adapters_.push_back(lora::unit_adapters_view(options_.lora, specs.size(), options_.seed));
    slots_.push_back(std::move(slots));
  }
  // Pointers into adapted_ once it no longer moves.
  for (int u = 0; u < n_units; ++u)
    for (std::size_t k = 0; k < adapted_[static_cast<std::size_t>(u)].size(); ++k)
      unit_adapters_[static_cast<std::size_t>(u)].by_slot[static_cast<std::size_t>(adapted_slots_[static_cast<std::size_t>(u)][k])] =
          &adapted_[static_cast<std::size_t>(u)][k];
  if (lora_on && trainable_parameters() == 0)
    lora::refuse_unmatched_targets(options_.lora, model_.architecture(), adaptable_seen);
  if (lora_on) init_adapters(options_.seed);
  tied_owner_.assign(static_cast<std::size_t>(n_units), false);
  for (int u = 0; u < n_units; ++u)
    for (int o : owners_needed(u)) tied_owner_[static_cast<std::size_t>(o)] = true;
  caches_.resize(static_cast<std::size_t>(n_units));
  inputs_.resize(static_cast<std::size_t>(n_units));
  build_fp8_gathers();
  if (offloads()) {
    // Pinned buffers, in the reduce dtype, for the largest trainable shard:
    // the reduced gradient shards that are not copied straight into a zero
    // gradient land there (accumulation, a bf16 reduce dtype). Two, used in
    // turn, so the copy of one unit's shard waits for the host's add of the
    // unit before the last rather than of the last.
    std::int64_t largest = 0;
    int slots = 0;
    for (FlatParameter* f : all_flats()) {
      if (!f->trainable()) continue;
      f->norm_slot = slots++;  // optimizer_shards() order
      largest = std::max(largest, f->shard_numel());
    }
    for (int k = 0; k < kLandingSlots; ++k)
      offload_landing_[k] = Tensor::pinned_host({largest}, options_.reduce_dtype, exec_.device(),
                                                "offload_grad_landing" + std::to_string(k));
    norm_partials_ = Tensor::zeros({slots}, DType::f64, Device::host, "offload_grad_sum_squares");
  }
}

// Per unit, its FP8 linear weights: the flat entry '<layer>.weight' of each
// FP8 state the unit reports (layers::LinearLayers' names are the layers'
// Hugging Face / timm prefixes).
void FsdpEngine::build_fp8_gathers() {
  fp8_gathers_.resize(flats_.size());
  fp8_all_gather_on_ = decide_fp8_all_gather(options_, shard_comm_->size()).on;
  if (!options_.fp8 || shard_comm_->size() <= 1) return;  // nothing gathered, nothing to count
  for (std::size_t u = 0; u < flats_.size(); ++u) {
    const FlatParameter& f = *flats_[u];
    std::map<std::string, int> entry_of;
    for (std::size_t e = 0; e < f.entries().size(); ++e) entry_of[f.entries()[e].name] = static_cast<int>(e);
    std::vector<Fp8AllGather::Weight> weights;
    for (const Fp8StateRef& ref : model_.unit(static_cast<int>(u)).fp8_states(options_.fp8_recipe)) {
      const auto it = entry_of.find(ref.name + ".weight");
      if (it == entry_of.end()) {
        FT_CHECK(!fp8_all_gather_on_) << "fp8 all-gather: unit " << f.unit_name() << " has the FP8 linear '"
                                      << ref.name << "' but no parameter '" << ref.name
                                      << ".weight' of its own to gather as FP8 (turn it off: fp8 all_gather off)";
        continue;
      }
      weights.push_back({it->second, ref.state});
    }
    if (!weights.empty())
      fp8_gathers_[u] = std::make_unique<Fp8AllGather>(f, std::move(weights), shard_comm_->size(), shard_comm_->rank());
  }
}

// A destroyed Request waits for its collective, and a queued collective
// holds its own references to the buffers it uses.
FsdpEngine::~FsdpEngine() {
  // The host stream's worker may still enqueue copies on the copy stream,
  // which is destroyed first.
  try {
    finish_offloaded_update();
  } catch (...) {
  }
}

void FsdpEngine::LossSums::add(ExecutionContext& exec, const Tensor& loss) {
  FT_CHECK(loss.numel() == 1 && loss.dtype() == DType::f32)
      << "the last unit must return the f32[1] loss sum, got " << loss.describe();
  if (!slots_.defined() || count_ == slots_.numel()) {
    // Grow (gradient accumulation deeper than before): the old slots are
    // copied on the stream and released in stream order.
    Tensor grown = Tensor::empty({std::max<std::int64_t>(8, 2 * count_)}, DType::f32, exec.device(), "loss_sums");
    if (count_ > 0) {
      Tensor kept = grown.view({count_});
      ops::cast(exec, slots_.view({count_}), kept);
    }
    slots_ = grown;
  }
  Tensor slot = slots_.view({1}, count_);
  ops::cast(exec, loss, slot);
  ++count_;
}

double FsdpEngine::LossSums::take(ExecutionContext& exec) {
  double sum = 0.0;
  if (count_ > 0) {
    exec.compute().synchronize();  // the copies into the slots were enqueued
    const Tensor used = slots_.view({count_});
    for (float v : to_float_vector(used.device() == Device::host ? used : to_device(used, Device::host))) sum += v;
  }
  count_ = 0;
  return sum;
}

double FsdpEngine::comm_seconds() const {
  return shard_comm_->times().busy_seconds + (replica_comm_ ? replica_comm_->times().busy_seconds : 0.0);
}

double FsdpEngine::comm_exposed_seconds() const {
  return shard_comm_->times().exposed_seconds + (replica_comm_ ? replica_comm_->times().exposed_seconds : 0.0);
}

void FsdpEngine::reset_comm_timers() {
  shard_comm_->reset_times();
  if (replica_comm_) replica_comm_->reset_times();
}

void FsdpEngine::init_random(std::uint64_t seed) {
  init_from([seed](const FlatEntry& e, std::int64_t first, std::int64_t count, float* dst) {
    random_init_values(seed, e, first, count, dst);
  });
}

void FsdpEngine::init_from(const ParameterSource& source) {
  exec_.synchronize();  // the host writes the masters below
  for (auto& flat : flats_) fill_master_from(*flat, source);
}

// The host fills the shard in f32: in place when it is a host f32 shard,
// else through a bounded f32 host buffer, piece by piece (a bf16 or device
// shard then never costs a whole f32 copy of the largest unit, which the
// host allocator would keep cached after load). Sources read any slice.
void FsdpEngine::fill_master_from(FlatParameter& flat, const ParameterSource& whole_tensor_source) {
  const ParameterSource source = tensor_slice_source(whole_tensor_source);  // a tensor rank's slices
  const std::int64_t n = flat.shard_numel();
  const bool in_place = flat.master.device() == Device::host && flat.master.dtype() == DType::f32;
  constexpr std::int64_t kStagingElements = std::int64_t{1} << 22;  // 16 MiB of f32
  const std::int64_t chunk = in_place ? n : std::min(n, kStagingElements);
  Tensor staging = in_place ? flat.master : Tensor::empty({chunk}, DType::f32, Device::host, flat.unit_name() + ".master_init");
  float* values = staging.data_as<float>();
  for (std::int64_t lo = 0; lo < n; lo += chunk) {
    const std::int64_t len = std::min(chunk, n - lo);
    std::fill(values, values + len, 0.0f);  // padding stays zero
    flat.for_each_shard_piece([&](int e, std::int64_t first, std::int64_t count, std::int64_t at) {
      const std::int64_t begin = std::max(at, lo), end = std::min(at + count, lo + len);
      if (begin < end) source(flat.entries()[static_cast<std::size_t>(e)], first + (begin - at), end - begin,
                              values + (begin - lo));
    });
    Tensor part = flat.master.view({len}, lo, flat.master.name());
    store_values(staging.view({len}, 0, staging.name()), part);  // waits: the buffer is refilled next
  }
  flat.gathered_valid = false;
  flat.gathered = Tensor();
  flat.compute_shard_stale = true;
}

// Copies `values` (any float dtype, host or the engine's device) into `dst`,
// converting to dst's dtype, and waits until it is done.
void FsdpEngine::store_values(const Tensor& values, Tensor& dst) {
  if (values.dtype() == dst.dtype()) {
    copy_tensor(values, dst);
    return;
  }
  const Tensor src = values.device() == dst.device() ? values : to_device(values, dst.device());
  ExecutionContext& on = context_for(dst);
  ops::cast(on, src, dst);
  on.synchronize();  // src is released (or refilled) on return
}

// A frozen base stored in bf16 is rounded here, once, by the cast op that
// made its gathered copies from an f32 master every step: the gathered bits
// are the same as with an f32 master.
void FsdpEngine::store_master(FlatParameter& flat, const Tensor& values) {
  finish_offloaded_update();
  store_values(values, flat.master);
  flat.gathered_valid = false;
  flat.gathered = Tensor();
  flat.compute_shard_stale = true;
}

void FsdpEngine::init_adapters(std::uint64_t seed) {
  init_adapters_from([seed](const FlatEntry& e, std::int64_t first, std::int64_t count, float* dst) {
    random_init_values(seed, e, first, count, dst);
  });
}

void FsdpEngine::init_adapters_from(const ParameterSource& source) {
  exec_.synchronize();
  for (auto& flat : adapter_flats_)
    if (flat) fill_master_from(*flat, source);
}

std::vector<FlatParameter*> FsdpEngine::flats_of(int u) const {
  std::vector<FlatParameter*> out{flats_[static_cast<std::size_t>(u)].get()};
  if (auto* a = adapter_flats_[static_cast<std::size_t>(u)].get()) out.push_back(a);
  return out;
}

std::vector<FlatParameter*> FsdpEngine::all_flats() const {
  std::vector<FlatParameter*> out;
  for (int u = 0; u < static_cast<int>(flats_.size()); ++u)
    for (FlatParameter* f : flats_of(u)) out.push_back(f);
  return out;
}

void FsdpEngine::init_from_root(const ParameterSource& source) {
  // Each tensor rank's FSDP group has its own root (its slices); T = 1: world rank 0.
  const bool root = grid_.fsdp_rank(world_.rank()) == 0;
  const ParameterSource slices = tensor_slice_source(source);
  for (auto& flat : flats_) {
    // Rank 0 contributes the unit, everyone else zeros: a sum-reduce-scatter
    // then delivers exactly rank 0's values (x + 0 is exact), and the
    // replica all-reduce does the same across replica groups.
    Tensor full = Tensor::zeros({flat->padded_numel()}, DType::f32, Device::host, flat->unit_name() + ".sync");
    if (root) {
      float* dst = full.data_as<float>();
      for (const auto& entry : flat->entries()) slices(entry, 0, entry.numel, dst + entry.offset);
    }
    if (exec_.device() != Device::host) full = to_device(full, exec_.device());  // the collectives run on device buffers
    // The sum runs in f32 (x + 0 exact); a bf16 frozen base is rounded after it.
    Tensor shard = flat->master.dtype() == DType::f32 && flat->master.device() == exec_.device()
                       ? flat->master
                       : Tensor::empty(flat->master.shape(), DType::f32, exec_.device(), flat->unit_name() + ".sync_shard");
    Request scattered, replicated;
    if (shard_comm_->size() > 1) {
      scattered = shard_comm_->reduce_scatter_sum(full, shard);
    } else {
      copy_tensor(full.view(shard.shape()), shard);
    }
    if (replica_comm_) replicated = replica_comm_->all_reduce_sum(shard);  // stream order: after the scatter
    scattered.wait();
    replicated.wait();
    store_master(*flat, shard);
  }
}

bool FsdpEngine::keep_gathered_after_forward() const {
  return options_.strategy == ShardingStrategy::shard_grad_op || options_.strategy == ShardingStrategy::no_shard;
}

// Units gathered or gathering, except tied owners: the embedding stays
// gathered from the head's forward until its own backward, and counting it
// made backward prefetch never fire with tied embeddings (issue 22 s3).
int FsdpEngine::gathered_count() const {
  int n = 0;
  for (std::size_t u = 0; u < flats_.size(); ++u) n += flats_[u]->gathered.defined() && !tied_owner_[u] ? 1 : 0;
  return n;
}

bool FsdpEngine::start_gather(int u) {
  bool issued = false;
  for (FlatParameter* f : flats_of(u)) issued |= start_gather_flat(*f);
  // The same count the limit is checked against, so the mark shows what
  // limit_all_gathers actually bounded.
  counters_.gathered_units_high_water = std::max(counters_.gathered_units_high_water, gathered_count());
  return issued;
}

bool FsdpEngine::start_gather_flat(FlatParameter& f) {
  if (f.gathered_valid) return false;
  bool issued = false;
  const DType dt = options_.param_dtype;
  // The base flat of a unit with FP8 linears (adapters never: LoRA refuses fp8).
  const auto u = static_cast<std::size_t>(f.unit_index());
  const Fp8AllGather* fp8_weights = flats_[u].get() == &f ? fp8_gathers_[u].get() : nullptr;
  if (fp8_weights != nullptr && fp8_all_gather_on_) {
    // Training gathers record the weight amaxes (the local cast records in training forwards only).
    // Offload: the device's compute-dtype copy of the shard, the master
    // rounded to the param dtype on the host, which is the cast's first step.
    const Tensor source = offloaded(f) ? offloaded_gather_source(f) : f.master;
    f.gather_request = fp8_weights->start(exec_, *shard_comm_, f, source, dt, options_.fp8_recipe.forward_dtype(),
                                          /*record=*/ctx_.training);
    // Counted from the buffers the collectives fill (training gathers only).
    if (ctx_.training) {
      counters_.all_gather_bytes += f.gathered.nbytes() + f.gathered_fp8.nbytes();
      counters_.all_gather_fp8_weight_bytes += f.gathered_fp8.nbytes();
    }
    f.gathered_valid = true;
    return true;
  }
  // A master already in the param dtype (f32 runs; a LoRA frozen base) is
  // gathered as it is; so is an offloaded master's compute-dtype shard.
  if (shard_comm_->size() > 1) limit_gathers_in_flight();
  const Tensor source = offloaded(f) ? offloaded_gather_source(f) : f.master;
  const bool as_stored = source.dtype() == dt;
  if (shard_comm_->size() == 1 && as_stored) {
    f.gathered = source.view(source.shape(), 0, f.unit_name() + ".gathered");  // no copy needed
  } else if (shard_comm_->size() == 1) {
    f.gathered = Tensor::empty({f.padded_numel()}, dt, exec_.device(), f.unit_name() + ".gathered");
    ops::cast(exec_, source, f.gathered);
  } else {
    f.gathered = Tensor::empty({f.padded_numel()}, dt, exec_.device(), f.unit_name() + ".gathered");
    if (as_stored) {
      f.gather_send = source;
    } else {
      // The cast writes this rank's block of the gathered buffer and the
      // gather runs in place (communicator.hpp): no send buffer, and no
      // copy of this rank's block into the output.
      f.gather_send = f.gathered.view({f.shard_numel()}, shard_comm_->rank() * f.shard_numel(),
                                      f.unit_name() + ".gather_send");
      ops::cast(exec_, source, f.gather_send);
    }
    // The collective reads what compute ops wrote (the cast above, AdamW's
    // update of the master): it starts after an event recorded behind them
    // (stream order; the engine does not block: communicator.hpp).
    const UnitLabelScope label(*shard_comm_, f.unit_name());  // names the unit if the watchdog fires
    f.gather_request = shard_comm_->all_gather(f.gather_send, f.gathered, exec_.compute().record());
    if (ctx_.training) {
      counters_.all_gather_bytes += f.gathered.nbytes();
      if (fp8_weights != nullptr)  // the FP8 linear weights' share of this gather
        counters_.all_gather_fp8_weight_bytes +=
            fp8_weights->fp8_numel() * static_cast<std::int64_t>(dtype_size(f.gathered.dtype()));
    }
    issued = true;
    count_gathers_in_flight();
  }
  f.gathered_valid = true;
  return issued;
}

// The unit's ops run after its all-gather: the compute stream waits for the
// collective's completion (FSDP2: all-gather on the communication stream,
// the compute stream waits on its event right before the unit's first use).
void FsdpEngine::ensure_gathered(int u) {
  start_gather(u);
  for (FlatParameter* f : flats_of(u)) {
    if (dropped_wait_ == DroppedWait::gather && exec_.compute().asynchronous()) {
      deferred_checks_.push_back(std::move(f->gather_request));  // debug: the wait is dropped
    } else {
      compute_after(f->gather_request);
    }
    f->gather_send = Tensor();  // the queued collective holds its own reference
  }
}

void FsdpEngine::compute_after(Request& r) { stream_after(exec_.compute(), r); }

void FsdpEngine::stream_after(Stream& stream, Request& r) {
  if (!r.pending()) return;
  if (!stream.asynchronous()) {
    r.wait();  // the caller is the stream: it blocks (booked as exposed communication time)
    return;
  }
  stream.wait(r.completion());
  deferred_checks_.push_back(std::move(r));
  check_deferred(/*all=*/false);
}

void FsdpEngine::check_deferred(bool all) {
  while (!deferred_checks_.empty()) {
    Request& r = deferred_checks_.front();
    if (all) r.wait();
    else if (!r.test()) break;  // test() rethrows a failed collective's error
    deferred_checks_.pop_front();
  }
}

// PyTorch FSDP's limit_all_gathers: each released unit left an event behind
// its last use on the compute stream; while `limit` of them are still
// pending, the caller waits for the oldest before it gathers more, so at most
// limit_all_gathers all-gather outputs are alive (in use or awaiting their
// stream-ordered free) however far the caller runs ahead. Synchronous
// streams record complete events: nothing waits.
void FsdpEngine::limit_gathers_in_flight() {
  while (!free_events_.empty() && free_events_.front().query()) free_events_.pop_front();
  const auto limit = static_cast<std::size_t>(options_.limit_all_gathers);
  // In flight after this gather: the units still gathered, the released
  // ones not yet freed, and this one.
  auto in_flight = [&] { return static_cast<std::size_t>(gathered_count()) + free_events_.size() + 1; };
  bool waited = false;
  while (!free_events_.empty() && in_flight() > limit) {
    free_events_.front().synchronize();
    free_events_.pop_front();
    waited = true;
  }
  if (waited) ++counters_.rate_limited_gathers;
}

// Measured apart from the limit above, so a limit that failed to hold shows.
void FsdpEngine::count_gathers_in_flight() {
  int unfreed = 0;
  for (const Event& e : free_events_) unfreed += e.query() ? 0 : 1;
  counters_.gathered_in_flight_high_water =
      std::max(counters_.gathered_in_flight_high_water, gathered_count() + unfreed);
}

void FsdpEngine::prefetch(int u, PrefetchKind kind) {
  if (u < 0 || u >= static_cast<int>(flats_.size())) return;
  // Under LoRA a kept base copy stays valid across steps while the unit's
  // adapters were updated: prefetch whatever of the unit is stale.
  bool stale = false;
  for (const FlatParameter* f : flats_of(u)) stale |= !f->gathered_valid;
  if (!stale) return;
  if (gathered_count() >= options_.limit_all_gathers) return;
  if (!start_gather(u)) return;
  if (kind == PrefetchKind::forward) ++counters_.forward_prefetch_gathers;
  else ++counters_.backward_prefetch_gathers;
}

// Called once the unit's last use was enqueued. The buffer goes back in
// stream order (the allocator hands it out again only after the streams
// passed that use); the free event lets limit_all_gathers count it until then.
void FsdpEngine::release(int u) {
  if (options_.strategy == ShardingStrategy::no_shard) return;  // replicas keep their parameters
  bool freed = false;
  for (FlatParameter* f : flats_of(u)) {
    compute_after(f->gather_request);  // gathered but never used (a prefetch): still ordered
    freed |= f->gathered.defined() && shard_comm_->size() > 1;
    f->gather_send = Tensor();
    f->gathered = Tensor();
    f->gathered_fp8 = Tensor();
    f->gathered_valid = false;
  }
  if (freed && exec_.compute().asynchronous() && !tied_owner_[static_cast<std::size_t>(u)])
    free_events_.push_back(exec_.compute().record());
}

std::vector<int> FsdpEngine::owners_needed(int u) const {
  std::vector<int> owners;
  for (const auto& s : slots_[static_cast<std::size_t>(u)])
    if (s.unit != u && std::find(owners.begin(), owners.end(), s.unit) == owners.end()) owners.push_back(s.unit);
  return owners;
}

std::vector<Tensor> FsdpEngine::unit_params(int u) {
  std::vector<Tensor> params;
  for (const auto& s : slots_[static_cast<std::size_t>(u)]) {
    FlatParameter& owner = *flats_[static_cast<std::size_t>(s.unit)];
    const FlatEntry& e = owner.entries()[static_cast<std::size_t>(s.entry)];
    // Borrowed: the engine alone decides when a gathered buffer goes
    // (release()), as FSDP2 frees the all-gather output whatever views
    // exist; a unit keeping a parameter past its step reads freed memory,
    // which the debug allocator turns into NaN.
    // FP8 all-gather: the FP8 linear weights arrive as FP8 data in a segment
    // of their own, everything else in the param dtype (fp8_all_gather.hpp).
    const Fp8AllGather* fp8_weights = fp8_all_gather_on_ ? fp8_gathers_[static_cast<std::size_t>(s.unit)].get() : nullptr;
    const Tensor gathered = fp8_weights ? fp8_weights->gathered_view(owner, s.entry)
                                        : owner.gathered.view(e.shape, e.offset, e.name);
    params.push_back(gathered.borrow());
  }
  return params;
}

std::vector<Tensor> FsdpEngine::unit_grads(int u) {
  std::vector<Tensor> grads;
  for (const auto& s : slots_[static_cast<std::size_t>(u)]) {
    FlatParameter& owner = *flats_[static_cast<std::size_t>(s.unit)];
    if (!owner.trainable()) {
      grads.emplace_back();  // frozen (LoRA): the ops skip this gradient
      continue;
    }
    if (!owner.full_grad.defined())
      owner.full_grad = Tensor::zeros({owner.padded_numel()}, DType::f32, exec_.device(), owner.unit_name() + ".full_grad");
    const FlatEntry& e = owner.entries()[static_cast<std::size_t>(s.entry)];
    grads.push_back(owner.full_grad.view(e.shape, e.offset, e.name + ".grad"));
  }
  return grads;
}

bool FsdpEngine::is_checkpointed(int u) const {
  const int last = static_cast<int>(flats_.size()) - 1;
  if (options_.checkpoint_every <= 0 || u == 0 || u == last) return false;  // blocks only
  return (u - 1) % options_.checkpoint_every == 0;
}

// The adapters of unit u as the plugin sees them (StepContext::lora): views
// of the gathered adapter flat and, in backward, of its full gradient.
void FsdpEngine::bind_adapters(int u, const Batch& batch, bool with_grads) {
  FlatParameter* af = adapter_flats_[static_cast<std::size_t>(u)].get();
  if (!af) {
    ctx_.lora = nullptr;
    return;
  }
  if (with_grads && !af->full_grad.defined())
    af->full_grad = Tensor::zeros({af->padded_numel()}, DType::f32, exec_.device(), af->unit_name() + ".full_grad");
  auto& linears = adapted_[static_cast<std::size_t>(u)];
  for (std::size_t k = 0; k < linears.size(); ++k) {
    const FlatEntry& ea = af->entries()[2 * k];
    const FlatEntry& eb = af->entries()[2 * k + 1];
    linears[k].a = af->gathered.view(ea.shape, ea.offset, ea.name).borrow();
    linears[k].b = af->gathered.view(eb.shape, eb.offset, eb.name).borrow();
    linears[k].grad_a = with_grads ? af->full_grad.view(ea.shape, ea.offset, ea.name + ".grad") : Tensor();
    linears[k].grad_b = with_grads ? af->full_grad.view(eb.shape, eb.offset, eb.name + ".grad") : Tensor();
  }
  lora::UnitAdapters& view = unit_adapters_[static_cast<std::size_t>(u)];
  view.first_sample = batch.first_sample;
  view.samples = batch.inputs.ndim() >= 1 ? std::max<std::int64_t>(1, batch.inputs.dim(0)) : 1;
  ctx_.lora = &view;
}

void FsdpEngine::reduce_gradients(int u) {
  if (!sync_gradients_) {
    // no_sync micro-step: the unsharded gradient keeps accumulating (+=)
    // until the last micro-step reduces the sum.
    ++counters_.deferred_reductions;
    return;
  }
  for (FlatParameter* f : flats_of(u)) reduce_flat(*f);
}

void FsdpEngine::reduce_flat(FlatParameter& f) {
  if (!f.full_grad.defined()) return;  // no gradient flowed (frozen base under LoRA)
  Tensor send = f.full_grad;
  if (options_.reduce_dtype != DType::f32) {
    send = Tensor::empty({f.padded_numel()}, options_.reduce_dtype, exec_.device(), f.unit_name() + ".grad_send");
    ops::cast(exec_, f.full_grad, send);
  }
  f.full_grad = Tensor();
  PendingReduction p;
  p.flat = &f;
  if (shard_comm_->size() == 1 && !replica_comm_) {
    p.shard = send;  // nothing to communicate
  } else {
    // The gradient was written by backward's ops: the collectives start
    // after an event recorded behind them (see start_gather).
    const Event written = dropped_wait_ == DroppedWait::after ? Event() : exec_.compute().record();
    const UnitLabelScope label(*shard_comm_, f.unit_name());  // both collectives (one label per process)
    p.shard = shard_comm_->size() == 1
                  ? send
                  : Tensor::empty({f.shard_numel()}, send.dtype(), exec_.device(), f.unit_name() + ".grad_shard");
    if (shard_comm_->size() > 1) p.scattered = shard_comm_->reduce_scatter_sum(send, p.shard, written);
    // Stream order: the all-reduce runs after the reduce-scatter wrote p.shard
    // (or, with one-rank shards, after the ops that wrote the gradient).
    if (replica_comm_) p.replicated = replica_comm_->all_reduce_sum(p.shard, written);
  }
  if (offloaded(f)) {
    // Its copy to the host is enqueued now, behind the collectives' events:
    // it runs as soon as they complete, while the backward goes on.
    offload_reduced_shard(f, p.shard, p.scattered, p.replicated);
    ++counters_.offload_copies_at_reduction;
    return;
  }
  pending_reductions_.push_back(std::move(p));
  finish_reductions(kMaxPendingReductions);
}

// Completes the oldest reductions (in order, so gradient sums are
// bit-reproducible) until at most keep_pending remain; completed ones are
// finished without waiting. A failed reduction throws here (from test() or
// wait()), before its buffer could reach the gradient.
void FsdpEngine::finish_reductions(std::size_t keep_pending) {
  while (!pending_reductions_.empty()) {
    PendingReduction& p = pending_reductions_.front();
    if (pending_reductions_.size() <= keep_pending && !(p.scattered.test() && p.replicated.test())) break;
    // The shard is added on the compute stream after both collectives
    // (an event wait: the caller does not block on asynchronous streams).
    if (dropped_wait_ == DroppedWait::reduce && exec_.compute().asynchronous()) {
      deferred_checks_.push_back(std::move(p.scattered));  // debug: the wait is dropped
      deferred_checks_.push_back(std::move(p.replicated));
    } else {
      compute_after(p.scattered);
      compute_after(p.replicated);
    }
    FlatParameter& f = *p.flat;
    if (f.grad_is_zero && p.shard.dtype() == DType::f32 && p.shard.shape() == f.grad.shape()) {
      // 0 + shard is the shard (bit for bit, up to the sign of a zero): the
      // step's first reduced shard becomes the gradient, no add pass. The
      // shard buffer is this reduction's own (reduce-scatter output, or the
      // moved full gradient with one-rank shards).
      f.grad = p.shard.view(f.grad.shape(), 0, f.unit_name() + ".grad");
    } else if (p.shard.dtype() == DType::f32) {
      ops::add_inplace(exec_, f.grad, p.shard);
    } else {
      Tensor wide = Tensor::empty({f.shard_numel()}, DType::f32, exec_.device(), f.unit_name() + ".grad_shard_f32");
      ops::cast(exec_, p.shard, wide);
      ops::add_inplace(exec_, f.grad, wide);
    }
    f.grad_is_zero = false;
    pending_reductions_.pop_front();
  }
}

void FsdpEngine::drain() {
  finish_reductions(0);
  for (FlatParameter* f : all_flats()) f->gather_request.wait();
  check_deferred(/*all=*/true);
  model_groups_.drain();  // the units' tensor and context collectives
  free_events_.clear();  // drained below
  ctx_.lora = nullptr;  // its views borrow buffers the engine may free now
  exec_.synchronize();  // the engine's callers read results on the host
  if (offloads()) {  // the gradients' copies and adds
    copy_stream_->synchronize();
    host_exec_.synchronize();
  }
}

// The batch on the training device: the data loader makes it on the host
// (the trainer counts its target tokens there); units read it with ops only.
// parallel context C: every rank of a data index is given the same whole
// windows and keeps its own chunks of them (causal load balancing).
Batch FsdpEngine::on_device(const Batch& whole) const {
  const Batch batch = grid_.context_size() > 1 ? layers::context_parallel_batch(whole, grid_.context_size(),
                                                                                 model_parallel_.context_rank())
                                               : whole;
  if (exec_.device() == Device::host) return batch;
  Batch out = batch;
  if (batch.inputs.defined()) out.inputs = to_device(batch.inputs, exec_.device());
  if (batch.targets.defined()) out.targets = to_device(batch.targets, exec_.device());
  if (batch.documents.defined()) out.documents = to_device(batch.documents, exec_.device());
  if (batch.positions.defined()) out.positions = to_device(batch.positions, exec_.device());
  // Without per-document positions the two are one host tensor (context_parallel_batch): one upload.
  if (batch.sequence_index.defined())
    out.sequence_index = batch.sequence_index.data() == batch.positions.data()
                             ? out.positions
                             : to_device(batch.sequence_index, exec_.device());
  return out;
}

void FsdpEngine::forward_backward(const Batch& host_batch, float loss_scale, bool sync_gradients) {
  const Batch batch = on_device(host_batch);
  const int n = static_cast<int>(flats_.size());
  ctx_.training = true;
  sync_gradients_ = sync_gradients || !options_.no_sync;
  Tensor x;
  Tensor loss;
  for (int u = 0; u < n; ++u) {
    for (int o : owners_needed(u)) ensure_gathered(o);
    ensure_gathered(u);
    if (options_.forward_prefetch) prefetch(u + 1, PrefetchKind::forward);
    inputs_[static_cast<std::size_t>(u)] = x;
    bind_adapters(u, batch, /*with_grads=*/false);
    Tensor out = model_.unit(u).forward(ctx_, unit_params(u), batch, x, caches_[static_cast<std::size_t>(u)]);
    if (is_checkpointed(u)) caches_[static_cast<std::size_t>(u)].clear();
    if (u < n - 1 && !keep_gathered_after_forward()) release(u);
    if (u == n - 1) loss = out; else x = out;
  }
  train_loss_.add(exec_, loss);  // stays on the device until the trainer takes it
  // The loss scale goes to the device once.
  Tensor dy = from_floats({1}, {loss_scale});
  if (exec_.device() != Device::host) dy = to_device(dy, exec_.device());
  for (int u = n - 1; u >= 0; --u) {
    for (int o : owners_needed(u)) ensure_gathered(o);
    ensure_gathered(u);
    if (options_.backward_prefetch == BackwardPrefetch::backward_pre) prefetch(u - 1, PrefetchKind::backward);
    auto& cache = caches_[static_cast<std::size_t>(u)];
    const Tensor& input = inputs_[static_cast<std::size_t>(u)];
    bind_adapters(u, batch, /*with_grads=*/true);
    if (is_checkpointed(u)) {
      cache.clear();
      model_.unit(u).forward(ctx_, unit_params(u), batch, input, cache);  // recompute
      ++counters_.recomputed_units;
    }
    auto params = unit_params(u);
    auto grads = unit_grads(u);
    // The first unit returns no input gradient: with nothing trainable in it
    // (frozen base under LoRA) its backward would compute nothing at all.
    const bool nothing_to_compute = u == 0 && !flats_[0]->trainable() && !adapter_flats_[0];
    Tensor dx = nothing_to_compute ? Tensor() : model_.unit(u).backward(ctx_, params, grads, batch, input, dy, cache);
    cache.clear();
    inputs_[static_cast<std::size_t>(u)] = Tensor();
    dy = dx;
    // A unit whose parameters are tied into a later unit already received
    // that unit's gradient, so it can always be reduced now.
    reduce_gradients(u);
    if (u > 0) release(u);
    if (options_.backward_prefetch == BackwardPrefetch::backward_post) prefetch(u - 1, PrefetchKind::backward);
  }
  if (options_.strategy != ShardingStrategy::no_shard) release(0);
  drain();  // synchronizes the compute stream
  if (options_.fp8) update_fp8_scales();
}

void FsdpEngine::forward_only(const Batch& host_batch) {
  const Batch batch = on_device(host_batch);
  const int n = static_cast<int>(flats_.size());
  ctx_.training = false;
  Tensor x;
  for (int u = 0; u < n; ++u) {
    for (int o : owners_needed(u)) ensure_gathered(o);
    ensure_gathered(u);
    UnitCache scratch;
    bind_adapters(u, batch, /*with_grads=*/false);
    Tensor out = model_.unit(u).forward(ctx_, unit_params(u), batch, x, scratch);
    if (u < n - 1) {
      // Tied owners (unit 0) are still needed by the head: keep them.
      bool needed_later = false;
      for (int v = u + 1; v < n; ++v)
        for (int o : owners_needed(v)) needed_later |= (o == u);
      if (!needed_later && !keep_gathered_after_forward()) release(u);
    }
    if (u == n - 1) eval_loss_.add(exec_, out); else x = out;
  }
  if (!keep_gathered_after_forward())
    for (int u = 0; u < n; ++u) release(u);
  drain();
  ctx_.training = true;
}

std::vector<std::vector<Fp8StateRef>> FsdpEngine::fp8_states() {
  std::vector<std::vector<Fp8StateRef>> out;
  for (int u = 0; u < model_.num_units(); ++u) out.push_back(model_.unit(u).fp8_states(options_.fp8_recipe));
  return out;
}

// Delayed scaling across ranks: each rank recorded the amaxes of its own
// micro-batch (on the device, by the casts); the max over all ranks is the
// amax of the global batch, the one a single rank would have seen. Row 0 of
// every layer's history is gathered into one buffer for ONE all-reduce per
// step, scattered back, and each layer's scales are updated by the recipe
// op (fp8/recipe.hpp). Copies and updates are ops: nothing is read on the host.
void FsdpEngine::update_fp8_scales() {
  // A copy gathered as FP8 holds bytes cast with the scales about to change:
  // none may outlive them (full_shard and hybrid_shard release every unit by
  // the end of the step; decide_fp8_all_gather keeps the others off).
  for (std::size_t u = 0; u < flats_.size(); ++u)
    FT_CHECK(!(fp8_all_gather_on_ && fp8_gathers_[u] && flats_[u]->gathered_valid))
        << "fp8 all-gather: unit " << flats_[u]->unit_name() << " is still gathered when its FP8 scales change";
  std::vector<fp8::LinearState*> states;
  for (auto& unit_states : fp8_states())
    for (auto& ref : unit_states) states.push_back(ref.state);
  if (states.empty()) return;
  constexpr std::int64_t k = fp8::kNumOperands;
  if (world_.size() > 1) {
    const std::int64_t n = static_cast<std::int64_t>(states.size());
    Tensor amax = Tensor::empty({n * k}, DType::f32, exec_.device(), "fp8.amax");
    for (std::int64_t i = 0; i < n; ++i) {
      Tensor slot = amax.view({k}, i * k);
      ops::cast(exec_, states[static_cast<std::size_t>(i)]->amax_history.view({k}), slot);  // row 0: this step
    }
    exec_.compute().synchronize();  // the collective reads what the copies wrote
    collectives().all_reduce_max(amax).wait();
    for (std::int64_t i = 0; i < n; ++i) {
      Tensor row0 = states[static_cast<std::size_t>(i)]->amax_history.view({k});
      ops::cast(exec_, amax.view({k}, i * k), row0);
    }
  }
  for (auto* state : states) fp8::update_scales(exec_, options_.fp8_recipe, *state);
  exec_.compute().synchronize();  // callers (checkpoints) read the FP8 state next
}

void FsdpEngine::zero_grad() {
  train_loss_.reset();
  // A step whose last micro-step did not sync (no_sync) left unreduced
  // gradients behind: they belong to that step, not the next.
  for (FlatParameter* f : all_flats()) f->full_grad = Tensor();
  for (FlatParameter* f : all_flats())
    if (f->trainable()) {
      ops::fill(context_for(f->grad), f->grad, 0.0f);
      f->grad_is_zero = true;
    }
  exec_.compute().synchronize();  // callers (checkpoints) may read the gradients next
  if (offloads()) {
    // On the host stream after the last step's updates, which this thread
    // does not wait for: the next forward's gathers wait for each unit's.
    ops::fill(host_exec_, norm_partials_, 0.0f);
    grads_zeroed_ = host_exec_.compute().record();
  }
}

double FsdpEngine::grad_norm() {
  ++host_reads_;
  finish_offloaded_update();
  return optimizer().grad_norm(optimizer_shards(), offloads() ? *host_shard_comm_ : norm_comm());
}

std::string FsdpEngine::first_non_finite(ShardState which) {
  ++host_reads_;
  finish_offloaded_update();
  return fsdp::first_non_finite(exec_, world_, flats_, adapter_flats_,
                                which == ShardState::gradient ? fsdp::NonFiniteIn::gradient : fsdp::NonFiniteIn::master);
}

// The multi-tensor AdamW's chunk table of one flat (kernels/adamw_chunks.hpp):
// its pieces in this rank's shard with their entries' weight-decay flags,
// padding left out. Built on the first step and kept on the device: it
// depends only on the flat's layout and the shard, which never change.
const Tensor& FsdpEngine::adamw_chunks_of(FlatParameter& f) {
  if (!f.adamw_chunks_built) {
    std::vector<AdamwSegment> segments;
    f.for_each_shard_piece([&](int e, std::int64_t, std::int64_t count, std::int64_t at) {
      segments.push_back({at, count, f.entries()[static_cast<std::size_t>(e)].weight_decay});
    });
    f.adamw_chunks = adamw_chunk_table(segments, f.master.device(), f.unit_name() + ".adamw_chunks");
    f.adamw_chunks_built = true;
  }
  return f.adamw_chunks;
}

std::vector<optim::TrainableShard> FsdpEngine::optimizer_shards() {
  std::vector<optim::TrainableShard> shards;
  for (FlatParameter* f : all_flats()) {
    if (!f->trainable()) continue;  // frozen base (LoRA): no optimizer state, never changes
    optim::TrainableShard s;
    s.master = &f->master;
    s.grad = &f->grad;
    s.exp_avg = &f->exp_avg;
    s.exp_avg_sq = &f->exp_avg_sq;
    s.chunks = &adamw_chunks_of(*f);
    f->for_each_shard_piece([&](int, std::int64_t, std::int64_t, std::int64_t) { ++s.pieces; });
    // parallel tensor: a tensor held whole by every tensor rank counts once
    // in the norm (on tensor rank 0); each rank's slices count everywhere.
    if (grid_.tensor_size() > 1 && model_parallel_.tensor_rank() != 0) {
      s.norm_whole = false;
      f->for_each_shard_piece([&](int e, std::int64_t, std::int64_t count, std::int64_t at) {
        if (f->entries()[static_cast<std::size_t>(e)].tensor_split())
          s.norm_parts.push_back(f->grad.view({count}, at, f->entries()[static_cast<std::size_t>(e)].name + ".grad"));
      });
    }
    // Offload: each unit's compute-dtype shard goes back to the device as
    // soon as its update is enqueued, while the next unit's runs.
    if (offloaded(*f)) s.updated = [this, f] { remake_compute_shard(*f); };
    shards.push_back(s);
  }
  return shards;
}

void FsdpEngine::after_update(const optim::StepLaunches& launched) {
  counters_.optimizer_launches += launched.launches;
  counters_.optimizer_tensors += launched.tensors;
  for (FlatParameter* f : all_flats()) {
    if (!f->trainable() || !f->gathered_valid) continue;
    f->gather_request.wait();
    f->gathered = Tensor();
    f->gathered_fp8 = Tensor();
    f->gather_send = Tensor();
    f->gathered_valid = false;
  }
}

void FsdpEngine::optimizer_step(const AdamWHyper& h, float grad_scale) {
  after_update(optimizer().step(optimizer_shards(), h, grad_scale));
  finish_offloaded_update();
  exec_.compute().synchronize();  // callers (checkpoints, evaluation) read the masters next
}

// Offload: the norm adds the partials the host made as each gradient
// landed; the updates run on the host stream after this returns, unit by
// unit in forward order, and each unit's next gather waits for its own
// (offloaded_gather_source). The host state is read after
// read_step_health, which waits for all of it.
void FsdpEngine::clip_and_step(const AdamWHyper& h, double clip_grad_norm, std::int64_t step) {
  if (offloads())
    after_update(host_optimizer_.clip_and_step(optimizer_shards(), *host_shard_comm_, h, clip_grad_norm, step,
                                               &norm_partials_));
  else
    after_update(optimizer_.clip_and_step(optimizer_shards(), norm_comm(), h, clip_grad_norm, step));
  exec_.compute().synchronize();  // callers (checkpoints, evaluation) read the masters next; nothing is read here
}

FsdpEngine::StepHealth FsdpEngine::read_step_health() {
  if (optimizer().has_health()) ++host_reads_;
  finish_offloaded_update();
  return optimizer().read_health();
}

bool FsdpEngine::offloaded(const FlatParameter& f) const {
  return exec_.device() != Device::host && f.master.device() == Device::host;
}

ExecutionContext& FsdpEngine::context_for(const Tensor& t) {
  return t.device() == exec_.device() ? exec_ : host_exec_;
}

Communicator& FsdpEngine::shard_comm_for(const Tensor& t) {
  if (t.device() == exec_.device()) return *shard_comm_;
  FT_CHECK(host_shard_comm_ != nullptr) << "collective on host tensor " << t.describe() << " in a run on device "
                                         << device_name(exec_.device()) << " without offload";
  return *host_shard_comm_;
}

void FsdpEngine::masters_changed() {
  finish_offloaded_update();
  for (FlatParameter* f : all_flats()) {
    f->compute_shard_stale = true;
    f->gathered_valid = false;
    f->gathered = Tensor();
  }
}

// The copy waits for the collectives that wrote the shard (or, with nothing
// to communicate, the compute ops), on the copy stream: backward goes on.
// The host stream then adds it as finish_reductions does on the device.
void FsdpEngine::offload_reduced_shard(FlatParameter& f, const Tensor& shard, Request& scattered,
                                       Request& replicated) {
  FT_CHECK(shard.numel() == f.shard_numel()) << "offload: reduced shard " << shard.describe() << " of unit "
                                             << f.unit_name() << " is not " << f.shard_numel() << " elements";
  copy_stream_->wait(exec_.compute().record());
  stream_after(*copy_stream_, scattered);
  stream_after(*copy_stream_, replicated);
  // The copy lands in pinned memory: straight in the gradient when it is
  // zero (0 + shard is the shard), after the host stream's zero_grad fill
  // (which came after the last update's read); else in a landing slot,
  // after the host stream's add out of it two units ago. Events recorded
  // earlier, not now: on a GPU a CUDA stream waits for a host event by
  // blocking this thread, and these are complete or nearly so.
  const bool direct = f.grad_is_zero && shard.dtype() == DType::f32;
  const int slot = next_landing_;
  const Tensor& landing = offload_landing_[slot];
  FT_CHECK(direct || (shard.dtype() == landing.dtype() && shard.numel() <= landing.numel()))
      << "offload: reduced shard " << shard.describe() << " of unit " << f.unit_name()
      << " does not fit the landing buffer " << landing.describe();
  if (!direct) next_landing_ = (next_landing_ + 1) % kLandingSlots;
  const Tensor host = direct ? f.grad : landing.view({f.shard_numel()}, 0, f.unit_name() + ".grad_shard_host");
  copy_stream_->wait(direct ? grads_zeroed_ : offload_landing_free_[slot]);
  exec_.allocator().copy_to_host_on(*copy_stream_, host.data(), shard.data(), shard.nbytes());
  ++counters_.offload_gradient_copies;
  if (dropped_wait_ != DroppedWait::offload) host_exec_.compute().wait(copy_stream_->record());
  if (direct) {
    // nothing to add
  } else if (host.dtype() == DType::f32) {
    ops::add_inplace(host_exec_, f.grad, host);
  } else {
    Tensor wide = Tensor::empty({f.shard_numel()}, DType::f32, Device::host, f.unit_name() + ".grad_shard_f32");
    ops::cast(host_exec_, host, wide);
    ops::add_inplace(host_exec_, f.grad, wide);
  }
  if (!direct) offload_landing_free_[slot] = host_exec_.compute().record();
  f.grad_is_zero = false;
  // This shard's sum of squares as the clip makes it (0 + the shard's),
  // remade after each micro-step's add: the last one is the step's.
  if (f.norm_slot >= 0) {
    Tensor partial = norm_partials_.view({1}, f.norm_slot, f.unit_name() + ".grad_sum_squares");
    ops::fill(host_exec_, partial, 0.0f);
    ops::sum_squares_accumulate(host_exec_, f.grad, partial);
  }
}

// Enqueued after whatever wrote the master on the host stream (AdamW, a
// load): the cast the device would have made before the gather, made on
// the host (the same op, the same bits), then, with offload optimizer, the
// copy to the device; the compute stream's next gather waits for it.
void FsdpEngine::remake_compute_shard(FlatParameter& f) {
  const DType dt = options_.param_dtype;
  Tensor host_shard = f.master;
  if (f.master.dtype() != dt) {
    if (!f.compute_shard_host.defined() || f.compute_shard_host.data() == f.master.data())
      f.compute_shard_host = Tensor::pinned_host({f.shard_numel()}, dt, exec_.device(), f.unit_name() + ".compute_shard_host");
    ops::cast(host_exec_, f.master, f.compute_shard_host);
    host_shard = f.compute_shard_host;
  }
  f.compute_shard_stale = false;
  if (options_.offload == Offload::all) {
    f.compute_shard_host = host_shard;
    f.upload_done = Event();
    f.upload_enqueued = host_exec_.compute().record();  // the gather stages its copy after the cast
    return;
  }
  if (!f.compute_shard.defined())
    f.compute_shard = Tensor::empty({f.shard_numel()}, dt, exec_.device(), f.unit_name() + ".compute_shard");
  // After the device's last use of the old shard (a device event: no wait
  // here), and after the host's cast: the host stream's worker enqueues the
  // copy itself once the cast ran, so this thread never waits for the
  // update, and records the copy's completion for the gather to wait on.
  copy_stream_->wait(exec_.compute().record());
  FlatParameter* flat = &f;
  host_exec_.compute().enqueue([this, flat, src = host_shard, dst = f.compute_shard] {
    exec_.allocator().copy_from_host_on(*copy_stream_, dst.data(), src.data(), dst.nbytes());
    flat->upload_done = copy_stream_->record();
  });
  f.upload_enqueued = host_exec_.compute().record();
}

// offload all: this gather's compute-dtype shard staged on the device (freed
// in stream order after the gather read it).
Tensor FsdpEngine::offloaded_gather_source(FlatParameter& f) {
  if (f.compute_shard_stale) remake_compute_shard(f);
  // This unit's update (the step's only wait on the host optimizer: the
  // first unit's comes first), then its copy as a stream event.
  f.upload_enqueued.synchronize();
  if (options_.offload == Offload::optimizer) {
    exec_.compute().wait(f.upload_done);
    return f.compute_shard;
  }
  Tensor staged = Tensor::empty({f.shard_numel()}, options_.param_dtype, exec_.device(), f.unit_name() + ".compute_shard");
  copy_stream_->wait(exec_.compute().record());  // the allocation is ordered on the compute stream
  exec_.allocator().copy_from_host_on(*copy_stream_, staged.data(), f.compute_shard_host.data(), staged.nbytes());
  exec_.compute().wait(copy_stream_->record());
  return staged;
}

void FsdpEngine::finish_offloaded_update() {
  if (!offloads()) return;
  host_exec_.synchronize();
  copy_stream_->synchronize();
}

std::int64_t FsdpEngine::num_parameters() const {
  std::int64_t n = 0;
  for (const auto& f : flats_) n += f->numel();
  return n;
}

std::uint64_t FsdpEngine::base_checksum() {
  exec_.synchronize();
  finish_offloaded_update();
  std::uint64_t sum = 0;
  for (auto& f : flats_) {
    // The f32 bits of each value: a bf16 base widens exactly, so a base whose
    // values are bf16 already (most released weights) sums the same stored
    // either way.
    const Tensor host = master_host_f32(*f);
    const float* master = host.data_as<float>();
    f->for_each_shard_piece([&](int e, std::int64_t first, std::int64_t count, std::int64_t at) {
      const std::uint64_t stream = rng::hash_name(f->entries()[static_cast<std::size_t>(e)].name);
      for (std::int64_t i = 0; i < count; ++i) {
        std::uint32_t bits = 0;
        std::memcpy(&bits, master + at + i, sizeof bits);
        sum += rng::mix64(rng::mix64(stream + static_cast<std::uint64_t>(first + i)) ^ bits);
      }
    });
  }
  // Mod 2^64 through two exact int64 sums of 32-bit halves (each shard group
  // holds every element once; replicas hold the same).
  const std::int64_t low = shard_comm_->all_reduce_sum(static_cast<std::int64_t>(sum & 0xffffffffull));
  const std::int64_t high = shard_comm_->all_reduce_sum(static_cast<std::int64_t>(sum >> 32));
  return static_cast<std::uint64_t>(low) + (static_cast<std::uint64_t>(high) << 32);
}

std::int64_t FsdpEngine::trainable_parameters() const {
  std::int64_t n = 0;
  for (FlatParameter* f : all_flats())
    if (f->trainable()) n += f->numel();
  return n;
}

std::int64_t FsdpEngine::shard_state_bytes() const {
  std::int64_t n = 0;
  for (FlatParameter* f : all_flats()) {
    n += static_cast<std::int64_t>(f->master.nbytes());
    if (f->trainable()) n += 3 * 4 * f->shard_numel();
  }
  return n;
}

DType frozen_base_dtype(const FsdpOptions& o) {
  return o.lora.enabled && !o.lora_base_f32 ? o.param_dtype : DType::f32;
}

DType FsdpEngine::frozen_base_dtype() const { return ftrain::frozen_base_dtype(options_); }

}  // namespace ftrain
