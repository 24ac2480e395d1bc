// FsdpEngine: drives a Model unit by unit over sharded flat parameters.
//
// Strategies (PyTorch FSDP names) are three knobs of one code path:
//                   shard group        replica group       reshard after forward
//   full_shard      world              -                   yes
//   shard_grad_op   world              -                   no (kept to backward)
//   no_shard (DDP)  each rank alone    world               no (kept always)
//   hybrid_shard    node / N ranks     across groups       yes
// With `parallel tensor T` (FsdpOptions::tensor_parallel) "world" in this
// table is the FSDP group: the world / T ranks of this rank's tensor index,
// which shard that tensor rank's slices (comm/process_grid.hpp); units get
// their tensor group through StepContext::parallel.
// Gradients of a unit are reduced when its backward finishes: reduce-scatter
// (sum) over the shard group, then all-reduce over the replica group, then
// added to the f32 shard gradient. Gradient accumulation therefore reduces at
// every micro-step (memory stays sharded; FSDP's behaviour without no_sync)
// unless FsdpOptions::no_sync (no_shard / shard_grad_op only) defers it to
// the last micro-step; share/doc/fsdp.md explains the choice.
//
// Streams (share/doc/fsdp.md "FSDP on streams"): collectives start after a
// compute-stream event behind what wrote their input; the compute stream
// waits on a collective's completion event before it uses the output; no
// call blocks the caller inside a step on asynchronous streams except
// limit_all_gathers' wait for a free event. The loss is already divided by the
// number of target tokens of the global batch (Batch loss scale), so sums are
// means.
//
// LoRA (options.lora, layers/lora.hpp): every base flat parameter is frozen
// (master only: no gradient, no optimizer state, gathered and released as
// without LoRA; the master is stored in param_dtype unless lora_base_f32,
// so a bf16 run gathers it without a cast and holds 2 bytes per base
// parameter, not 4) and each unit with adapted linears gets a second, trainable
// flat parameter holding its lora_A / lora_B matrices (which ones:
// layers/lora_adapters.hpp), sharded over the same
// shard group as the base (share/doc/fsdp.md "LoRA": sharded, not
// replicated, so the one gather / reduce-scatter / checkpoint path serves
// both and adapter state per rank shrinks with the rank count too).
//
// Offload (options.offload on a device backend; share/doc/fsdp.md
// "Offload"): every trainable flat's f32 master, gradient and AdamW moments
// live in pinned host memory (offload all: the frozen base's master too).
// The device keeps what the all-gather sends, the compute-dtype shard
// (offload all: staged for each gather only). Each unit's reduced gradient
// shard goes to the host on the copy stream as soon as its collectives
// complete (event waits: the compute stream does not wait for it) and is
// added to the host gradient on the host optimizer context's stream, a
// worker thread, which then makes that shard's sum of squares. The step's
// clip adds those partials in shard order (the global norm and the
// divergence guard need every gradient, so no update starts before the
// backward ended), then AdamW runs unit by unit in forward order; as each
// unit's is done the host stream's worker enqueues the copy of its
// compute-dtype shard to the device, and the next step's gather of that
// unit waits for that copy only. The arithmetic is the same ops' in the
// same order: runs are bit-identical with and without offload. precision
// fp8: the FP8 all-gather casts the device's compute-dtype shard, which is
// the master rounded to the param dtype as its own first step does.
//
// Initialisation never needs the whole model on a rank: each rank fills only
// its shard, with values that are a pure function of (seed, parameter name,
// element index), so every world size gets exactly the same model
// (fsdp/parameter_init.hpp). The optimizer step is optim::ShardedAdamW's
// (optim/sharded_adamw.hpp): the engine hands it the trainable shards.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/gpu_assignment.hpp"
#include "comm/process_grid.hpp"
#include "fp8/recipe.hpp"
#include "fsdp/flat_parameter.hpp"
#include "fsdp/fp8_all_gather.hpp"
#include "fsdp/parallel_groups.hpp"
#include "fsdp/parameter_init.hpp"
#include "layers/lora.hpp"
#include "optim/sharded_adamw.hpp"
#include "plugin/model.hpp"
#include "runtime/execution_context.hpp"

namespace ftrain {

enum class ShardingStrategy : std::uint8_t { full_shard, shard_grad_op, no_shard, hybrid_shard };
enum class BackwardPrefetch : std::uint8_t { none, backward_pre, backward_post };
// Deck `host_streams`: how the host backend runs the engine's streams.
// from_environment reads FTRAIN_HOST_STREAM (sync by default).
enum class HostStreams : std::uint8_t { from_environment, sync, async };
// Deck `fsdp ... offload` (ZeRO-Offload): what a device backend keeps in host
// memory. optimizer: the f32 master shard, its gradient shard and the AdamW
// moments; all: the compute-dtype parameter shard too. On the host backend
// everything already is host memory and it changes nothing.
enum class Offload : std::uint8_t { none, optimizer, all };

const char* sharding_strategy_name(ShardingStrategy s);

struct FsdpOptions {
  ShardingStrategy strategy = ShardingStrategy::full_shard;
  DType param_dtype = DType::f32;   // gathered compute copies and activations
  DType reduce_dtype = DType::f32;  // gradient communication
  BackwardPrefetch backward_prefetch = BackwardPrefetch::backward_pre;
  bool forward_prefetch = false;
  int limit_all_gathers = 2;        // units gathered or gathering at once (>= 1), tied owners not counted
  int shard_group_size = 0;         // hybrid_shard: 0 = ranks of one node
  int checkpoint_every = 0;         // activation checkpointing: 0 off, 1 every unit, N every N-th block
  std::int64_t vocab_chunk = 4096;
  bool fp8 = false;          // precision fp8: block linears run the FP8 recipe
  fp8::Recipe fp8_recipe;
  // FP8 linear weights gathered as FP8 bytes (fsdp/fp8_all_gather.hpp); acts
  // where decide_fp8_all_gather says (full_shard / hybrid_shard, fp8, >1 rank per shard group).
  bool fp8_all_gather = true;
  lora::Config lora;         // enabled: frozen base + trainable adapters
  // LoRA: the frozen base's shards are stored in param_dtype (the dtype its
  // gathered copies have anyway: 2 bytes per parameter under bf16, PEFT's
  // torch_dtype=bfloat16 base); true keeps them in f32 (deck `lora base_dtype
  // f32`), as trainable masters are. Without LoRA every master is f32.
  bool lora_base_f32 = false;
  std::uint64_t seed = 0;    // the run's seed: LoRA adapter init and dropout masks
  // Where every shard, gathered buffer, gradient, activation and batch copy
  // lives (deck `device`): the engine's execution context runs there. The
  // host reads engine state only through explicit copies after a sync
  // (share/doc/execution-model.md "The engine on a device").
  Device device = Device::host;
  AttentionBackend attention_backend = AttentionBackend::automatic;
  // Deck `device_comm`: what moves device buffers between ranks when `device`
  // is not the host (NCCL, or the staged communicator over MPI); the host
  // backend's collectives are the MPI communicator's.
  DeviceComm device_comm = DeviceComm::nccl;
  HostStreams host_streams = HostStreams::from_environment;
  // Gradient accumulation without reduction (PyTorch's no_sync): on
  // micro-steps that are not the last of a step, no_shard and shard_grad_op
  // keep accumulating the unsharded f32 gradient and reduce it once, at the
  // last micro-step. Refused for full_shard / hybrid_shard (it would keep a
  // full gradient per unit, defeating the sharding) and with LoRA.
  bool no_sync = false;
  Offload offload = Offload::none;
  // Deck `parallel tensor T context C` (comm/process_grid.hpp): the engine
  // shards over the FSDP group (the ranks of one tensor index) instead of
  // the world, and hands units their tensor and context groups.
  int tensor_parallel = 1;
  int context_parallel = 1;
};

// The dtype a frozen LoRA base's shards are stored in under `o` (f32 without
// LoRA): the plan, the run header and the engine share this rule.
DType frozen_base_dtype(const FsdpOptions& o);

// Test and proof only (FTRAIN_DEBUG_DROP_WAIT=<which>): the engine leaves out
// one of its event waits so that ThreadSanitizer must report the race it
// opens (share/scripts/tsan-check.sh --prove-it-fails). Values:
//   gather  the compute stream no longer waits for a unit's all-gather
//   reduce  the compute stream no longer waits for a reduce-scatter before
//           adding its shard into the gradient
//   after   the gradient reduce-scatter no longer waits for the compute event
//           that wrote the gradient
//   offload (offload on a device) the host stream no longer waits for a
//           reduced gradient shard's copy to the host before adding it
//   tensor  (parallel tensor T) the compute stream no longer waits for the
//           tensor group's collectives inside the units
//   context (parallel context C) the compute stream no longer waits for the
//           context group's ring steps (the attention's K/V blocks) and
//           collectives
enum class DroppedWait : std::uint8_t { none, gather, reduce, after, offload, tensor, context };
DroppedWait dropped_wait_from_environment();

using optim::AdamWHyper;

// What the engine did, counted so tests and users can see that a feature
// acted rather than only that the curve is unchanged (metrics.jsonl,
// share/doc/fsdp.md "Counters"). Counted since the last reset_counters().
struct FsdpCounters {
  std::int64_t recomputed_units = 0;            // unit forwards re-run in backward (activation checkpointing)
  std::int64_t forward_prefetch_gathers = 0;    // all-gathers issued ahead by forward_prefetch
  std::int64_t backward_prefetch_gathers = 0;   // all-gathers issued ahead by backward_prefetch
  int gathered_units_high_water = 0;            // most units gathered or gathering at once (what limit_all_gathers bounds)
  // Bytes this rank received from training parameter all-gathers
  // (evaluation's are not counted), and the part of
  // them that carried the FP8 linear weights (precision fp8 only): 1 byte per
  // element with the FP8 all-gather, the param dtype's size without it.
  std::int64_t all_gather_bytes = 0;
  std::int64_t all_gather_fp8_weight_bytes = 0;
  // Asynchronous streams: most all-gather outputs alive at once on the
  // device, counting released units whose free event (the stream passing
  // their last use) had not completed when a gather was issued. The caller
  // blocks on the oldest free event to keep it within limit_all_gathers
  // (PyTorch FSDP's _free_event_queue).
  int gathered_in_flight_high_water = 0;
  std::int64_t rate_limited_gathers = 0;        // gathers that first waited for a free event
  std::int64_t deferred_reductions = 0;         // unit reductions skipped by no_sync on a micro-step
  // AdamW launches (adamw_update_chunks / adamw_update_chunks_guarded calls)
  // and the parameter tensor pieces they covered: one launch per trainable
  // flat parameter (the multi-tensor AdamW), not one per tensor or per run.
  std::int64_t optimizer_launches = 0;
  std::int64_t optimizer_tensors = 0;
  // Offload on a device: reduced gradient shards copied to the host, and
  // those whose copy was enqueued with their unit's reduce-scatter (behind
  // its events, while the backward goes on) rather than later.
  std::int64_t offload_gradient_copies = 0;
  std::int64_t offload_copies_at_reduction = 0;
};

class FsdpEngine {
 public:
  FsdpEngine(Model& model, Communicator& world, const FsdpOptions& options);
  ~FsdpEngine();
  FsdpEngine(const FsdpEngine&) = delete;
  FsdpEngine& operator=(const FsdpEngine&) = delete;

  void init_random(std::uint64_t seed);
  void init_from(const ParameterSource& source);
  // sync_module_states: only world rank 0 calls `source` (it alone reads the
  // weights or runs the initialiser), one unit at a time; every other rank
  // receives its shard. Memory: one full unit per rank, transiently.
  void init_from_root(const ParameterSource& source);

  // One micro-batch forward + backward; accumulates into the shard gradients.
  // loss_scale = 1 / (target tokens in the global batch). This rank's sum of
  // per-token losses stays on the device (train_loss below): nothing is read
  // back per micro-step.
  // sync_gradients = false (no_sync, strategies that allow it): this
  // micro-step's gradients stay unsharded and unreduced; the next call with
  // true reduces the sum. Ignored (always reduced) where no_sync is off.
  // parallel tensor/context: every rank of a data index passes the same whole
  // windows; at context C > 1 a rank keeps its chunks of them
  // (layers::context_parallel_batch), and its loss sum is of those tokens
  // only: the context ranks' sums add to the data index's.
  void forward_backward(const Batch& batch, float loss_scale, bool sync_gradients = true);
  // Forward only (evaluation); the loss sum stays on the device (eval_loss).
  void forward_only(const Batch& batch);
  // This rank's loss sum over the micro-steps since the window started, read
  // once (the only host read of the loss: it waits for the compute stream).
  // The training window starts at zero_grad() (loss and gradients accumulate
  // over the same micro-steps); the evaluation window at the last take.
  double take_train_loss() {
    ++host_reads_;
    return train_loss_.take(exec_);
  }
  double take_eval_loss() {
    ++host_reads_;
    return eval_loss_.take(exec_);
  }

  // Zeroes the gradients and starts a new training loss window.
  void zero_grad();
  // Global L2 norm of the gradient (one all-reduce of squared shard norms).
  double grad_norm();
  // Where a NaN or an infinity sits, for a stop that names it: the parameter
  // whose gradient (or master weight) went non-finite first in backward order
  // (the last unit holding one, its first such tensor) on any rank, as
  // "unit 'U', tensor 'T'"; empty when all are finite. Collective over the
  // world: every rank gets the same answer.
  enum class ShardState { gradient, master };
  std::string first_non_finite(ShardState which);
  // The optimizer (optim/sharded_adamw.hpp) on every trainable shard, then
  // every kept gathered copy of a changed flat dropped.
  // optimizer_step: AdamW with grad_scale multiplying the gradients (a clip
  // factor the caller computed); reads nothing on the host, grad_norm()
  // above does (tests, tools).
  void optimizer_step(const AdamWHyper& hyper, float grad_scale);
  // The training step's clip + update with no host read; a diverged step
  // changes nothing (optim::ShardedAdamW::clip_and_step).
  void clip_and_step(const AdamWHyper& hyper, double clip_grad_norm, std::int64_t step);
  // What the host reads of the last clip_and_step, when it needs it (the log
  // line, a checkpoint, the end): waits for the compute stream.
  using StepHealth = optim::StepHealth;
  StepHealth read_step_health();
  // Reads of device results by the host (loss sums, norms, flags, scans):
  // each waits for the compute stream. The step itself makes none between
  // log intervals (test Engine.ClipAndStepReadsNothingOnTheHost).
  std::int64_t host_reads() const { return host_reads_; }
  std::int64_t optimizer_steps() const { return offloads() ? host_optimizer_.steps() : optimizer_.steps(); }
  // Resume: AdamW's bias correction continues from a checkpoint's step count.
  void set_optimizer_steps(std::int64_t steps) { optimizer().set_steps(steps); }

  std::int64_t num_parameters() const;  // unique parameters of the model (base, without adapters)
  // Parameters the optimizer updates: the adapters under LoRA, else all.
  std::int64_t trainable_parameters() const;
  // This rank's sharded state: masters (frozen ones in their storage dtype),
  // plus f32 gradient and AdamW moments of the trainable flats.
  std::int64_t shard_state_bytes() const;
  // The dtype the frozen base's shards are stored in (LoRA; f32 without).
  DType frozen_base_dtype() const;
  const std::vector<std::unique_ptr<FlatParameter>>& units() const { return flats_; }
  // LoRA: per unit, its adapters' flat parameter (null: none adapted), and
  // every adapted linear's module name in unit order.
  const std::vector<std::unique_ptr<FlatParameter>>& adapter_units() const { return adapter_flats_; }
  bool lora() const { return options_.lora.enabled; }
  // Every flat parameter (base, then adapters, per unit): what the
  // optimizer, clipping and the checkpoints walk.
  std::vector<FlatParameter*> all_flats() const;
  // A checksum of the bits of every base (non-adapter) parameter, the same
  // on any rank count and strategy: sum mod 2^64 over elements of
  // mix(name, index, bits). LoRA runs compare it before and after training
  // (the frozen base must come out bit-identical) and checkpoints record it.
  // Collective over the shard group.
  std::uint64_t base_checksum();
  // LoRA: sets the adapters from `source` (init adapter DIR); every rank
  // fills its own shard.
  void init_adapters_from(const ParameterSource& source);
  // Sets a flat's master from `values` (shard-shaped, any float dtype, host
  // or the engine's device), rounding to the master's dtype (a bf16 frozen
  // base), and drops any gathered copy. Host code writes masters this way.
  void store_master(FlatParameter& flat, const Tensor& values);
  Communicator& shard_comm() { return *shard_comm_; }
  // The shard group's communicator for collectives on `t`: shard_comm()
  // for tensors on the engine's device, an MPI communicator over the same
  // ranks for host tensors of a device run (offloaded masters).
  Communicator& shard_comm_for(const Tensor& t);
  // Offload: the masters were written outside the engine (a checkpoint
  // load); each unit's compute-dtype shard is remade before its next gather.
  void masters_changed();
  // Whether this engine keeps optimizer state in host memory on a device.
  bool offloads() const { return options_.offload != Offload::none && exec_.device() != Device::host; }
  Communicator* replica_comm() { return replica_comm_.get(); }
  // The process grid of `parallel tensor T context C` (1 x 1: every rank
  // one data index) and this rank's tensor and context groups.
  const ProcessGrid& grid() const { return grid_; }
  const ModelParallel& model_parallel() const { return model_parallel_; }
  const FsdpOptions& options() const { return options_; }
  ExecutionContext& execution() { return exec_; }
  // precision fp8: every unit's FP8 states, in unit order (checkpoints).
  std::vector<std::vector<Fp8StateRef>> fp8_states();

  // Time the engine's collectives ran (shard and replica groups) and the
  // part of it the compute thread waited for (not hidden behind compute),
  // since the last reset (Communicator::times()).
  double comm_seconds() const;
  double comm_exposed_seconds() const;
  void reset_comm_timers();
  const FsdpCounters& counters() const { return counters_; }
  // Whether the FP8 linear weights are gathered as FP8 bytes (fp8_all_gather.hpp).
  bool fp8_all_gather() const { return fp8_all_gather_on_; }
  void reset_counters() { counters_ = FsdpCounters{}; }
  // Gathers started ahead of need by forward/backward prefetch, since the last reset_counters().
  std::int64_t prefetches_issued() const {
    return counters_.forward_prefetch_gathers + counters_.backward_prefetch_gathers;
  }

 private:
  // What the optimizer updates: every trainable flat's shard state, in
  // all_flats() order (the order of the norm's partials).
  std::vector<optim::TrainableShard> optimizer_shards();
  // After an update: the counters, and every kept gathered copy of a
  // trainable flat dropped (stale).
  void after_update(const optim::StepLaunches& launched);
  // Offload: whether f's master lives in host memory; the context whose ops
  // may touch t; the optimizer of the trainable shards (host or device).
  bool offloaded(const FlatParameter& f) const;
  ExecutionContext& context_for(const Tensor& t);
  optim::ShardedAdamW& optimizer() { return offloads() ? host_optimizer_ : optimizer_; }
  // Offload: a finished reduction's shard copied to the host and added to
  // the host gradient; the compute-dtype shard remade from the master
  // (ordered after the host stream's update) and, with offload optimizer,
  // copied to the device; the device tensor an offloaded flat's gather sends.
  void offload_reduced_shard(FlatParameter& f, const Tensor& shard, Request& scattered, Request& replicated);
  void remake_compute_shard(FlatParameter& f);
  Tensor offloaded_gather_source(FlatParameter& f);
  const Tensor& adamw_chunks_of(FlatParameter& f);
  std::vector<Tensor> unit_params(int u);
  std::vector<Tensor> unit_grads(int u);
  // Returns whether an all-gather was issued (false: already gathered, or a
  // one-rank shard group, which needs no communication).
  bool start_gather(int u);
  bool start_gather_flat(FlatParameter& f);
  std::vector<FlatParameter*> flats_of(int u) const;
  void bind_adapters(int u, const Batch& batch, bool with_grads);
  void reduce_flat(FlatParameter& f);
  void init_adapters(std::uint64_t seed);
  void fill_master_from(FlatParameter& flat, const ParameterSource& source);
  void store_values(const Tensor& values, Tensor& dst);
  Batch on_device(const Batch& batch) const;
  void ensure_gathered(int u);
  void release(int u);
  bool keep_gathered_after_forward() const;
  enum class PrefetchKind : std::uint8_t { forward, backward };
  void prefetch(int u, PrefetchKind kind);
  int gathered_count() const;
  void reduce_gradients(int u);
  void finish_reductions(std::size_t keep_pending);
  void update_fp8_scales();
  void drain();
  // The compute stream's later work runs after `r`'s collective: an event
  // wait on an asynchronous stream (the caller goes on; the request is kept
  // and checked later), a blocking wait on a synchronous one.
  void compute_after(Request& r);
  // The same for any stream of this rank (the offload copy stream).
  void stream_after(Stream& stream, Request& r);
  // Throws the error of a deferred request that has finished; with
  // all = true, waits for every one first.
  void check_deferred(bool all);
  // limit_all_gathers on asynchronous streams: before a new gather, wait for
  // the oldest free events until fewer than the limit are in flight.
  void limit_gathers_in_flight();
  void count_gathers_in_flight();
  bool is_checkpointed(int u) const;
  std::vector<int> owners_needed(int u) const;

  Model& model_;
  Communicator& world_;
  FsdpOptions options_;
  std::unique_ptr<Communicator> shard_comm_;
  std::unique_ptr<Communicator> replica_comm_;  // null when there is one replica
  ProcessGrid grid_;
  ModelParallelGroups model_groups_;
  ModelParallel model_parallel_;
  // parallel tensor T > 1: the shard group and its tensor group together
  // (the ranks of one replica index), over which the gradient norm sums;
  // null when it is the shard group.
  std::unique_ptr<Communicator> norm_comm_;
  Communicator& norm_comm() { return norm_comm_ ? *norm_comm_ : *shard_comm_; }
  std::vector<std::unique_ptr<FlatParameter>> flats_;
  std::vector<std::vector<SlotSource>> slots_;  // per unit, per declared spec
  std::vector<UnitCache> caches_;
  std::vector<Tensor> inputs_;
  std::vector<std::unique_ptr<FlatParameter>> adapter_flats_;  // per unit, null when none
  std::vector<std::vector<lora::AdaptedLinear>> adapted_;       // per unit, per adapted linear
  std::vector<std::vector<int>> adapted_slots_;                 // per unit, the slot of each adapted linear
  std::vector<lora::UnitAdapters> unit_adapters_;               // per unit, what StepContext::lora points to
  struct PendingReduction {
    FlatParameter* flat;
    Tensor shard;       // reduced shard in the reduce dtype, valid once both requests are done
    Request scattered;  // reduce-scatter over the shard group
    Request replicated; // then all-reduce over the replica group (stream order: issued at once)
  };
  std::deque<PendingReduction> pending_reductions_;
  std::deque<Request> deferred_checks_;  // requests a stream waits on; their errors are checked later
  std::deque<Event> free_events_;        // per released unit: the compute stream passed its last use
  DroppedWait dropped_wait_ = DroppedWait::none;
  bool sync_gradients_ = true;  // this micro-step reduces (no_sync: only the last one)
  static constexpr std::size_t kMaxPendingReductions = 2;  // full gradients in flight
  ExecutionContext exec_;  // where this rank's ops run; ctx_ points to it
  // Offload: the host ops on offloaded state (gradient adds, clip, AdamW,
  // casts) on a worker thread of their own; the device's copy stream for
  // the shards' trips; the host collectives of the shard group (the clip's
  // sum of squares). Unused (and no thread made) without offload.
  ExecutionContext host_exec_;
  std::unique_ptr<Stream> copy_stream_;
  std::unique_ptr<Communicator> host_shard_comm_;
  // Offload: where a reduced gradient shard that cannot be copied straight
  // into its zero gradient lands (pinned; two slots used in turn), and the
  // host stream's event after the last add out of each (the next copy into
  // it waits for that). grads_zeroed_: the host stream passed zero_grad's
  // fills (a copy straight into a gradient waits for it). norm_partials_:
  // f64, per trainable shard, its sum of squares (FlatParameter::norm_slot).
  static constexpr int kLandingSlots = 2;
  Tensor offload_landing_[kLandingSlots];
  Event offload_landing_free_[kLandingSlots];
  int next_landing_ = 0;
  Event grads_zeroed_;
  Tensor norm_partials_;
  // The step's offloaded update has finished on the host (host stream and
  // copy stream drained): every host read or write of offloaded state
  // outside forward and backward comes after it.
  void finish_offloaded_update();
  // Device runs: the communicator for device buffers over world_'s ranks
  // (made on exec_, destroyed before it); null on the host.
  std::unique_ptr<Communicator> device_world_;
  // What the tensor collectives run on: device_world_ on a device, else world_.
  Communicator& collectives() { return device_world_ ? *device_world_ : world_; }
  // Loss sums of micro-steps, on the device: each micro-step's f32[1] loss is
  // copied (an op) into the next slot of one f32 tensor. take() reads the
  // slots once and adds them in double in micro-step order: the arithmetic
  // of the per-micro-step host reads it replaced, so logged losses are
  // unchanged bit for bit (there is no f64 dtype to accumulate in on the
  // device, and an f32 running sum would round differently).
  class LossSums {
   public:
    void add(ExecutionContext& exec, const Tensor& loss);
    double take(ExecutionContext& exec);
    void reset() { count_ = 0; }

   private:
    Tensor slots_;
    std::int64_t count_ = 0;
  };
  LossSums train_loss_;
  LossSums eval_loss_;
  optim::ShardedAdamW optimizer_{exec_};
  optim::ShardedAdamW host_optimizer_{host_exec_};  // offload: the CPU AdamW
  std::int64_t host_reads_ = 0;
  StepContext ctx_;
  FsdpCounters counters_;
  std::vector<bool> tied_owner_;  // per unit: a later unit ties parameters to it
  // precision fp8 with a shard group > 1: per unit, its FP8 linear weights'
  // gather layout (null: none); used for the gather when fp8_all_gather_on_,
  // else only to count the bytes those weights take in the plain gather.
  std::vector<std::unique_ptr<Fp8AllGather>> fp8_gathers_;
  bool fp8_all_gather_on_ = false;
  void build_fp8_gathers();
};

}  // namespace ftrain
