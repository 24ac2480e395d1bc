#include "train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <optional>
#include <sstream>

#include "ckpt/collective_errors.hpp"
#include "ckpt/lineage.hpp"
#include "comm/collective_watchdog.hpp"
#include "comm/device_communicator.hpp"
#include "comm/node_layout.hpp"
#include "comm/process_grid.hpp"
#include "base/error.hpp"
#include "core/launcher_watch.hpp"
#include "data/token_batch_source.hpp"
#include "deck/diagnostics.hpp"
#include "fsdp/engine.hpp"
#include "kernels/blas_threads.hpp"
#include "kernels/host/gemm.hpp"
#include "optim/lr_schedule.hpp"
#include "plugin/loader.hpp"
#include "runtime/attention_backend.hpp"
#include "train/attention_flops.hpp"
#include "train/batch_sources.hpp"
#include "train/check_plan.hpp"
#include "train/checkpointing.hpp"
#include "train/console.hpp"
#include "train/cpu_binding.hpp"
#include "train/device_choice.hpp"
#include "train/device_peak.hpp"
#include "train/health.hpp"
#include "train/job_signal_window.hpp"
#include "train/metrics.hpp"
#include "train/output_locations.hpp"
#include "train/plan.hpp"
#include "train/resume.hpp"
#include "train/run_dir_lock.hpp"
#include "train/run_header.hpp"
#include "train/run_output.hpp"
#include "train/stop_signals.hpp"
#include "train/tensor_parallel_settings.hpp"
#include "train/weights.hpp"
#include "train/run_settings.hpp"

namespace ftrain {

namespace {

using Clock = std::chrono::steady_clock;

// deck.md promises a suggestion for a misspelt value: `model lama` gets
// "(did you mean 'llama'?)" after the loader's "unknown model 'lama'", from
// the plugins the loader can find. The loader itself stays free of the deck's
// wording rules.
std::string with_model_suggestion(const std::string& message, const std::string& name) {
  const PluginLoader loader;
  if (loader.find(name)) return message;
  std::vector<std::string> names;
  for (const auto& plugin : loader.list_plugins())
    if (plugin.error.empty()) names.push_back(plugin.name);
  const std::string hint = deck::did_you_mean(name, std::vector<std::string_view>(names.begin(), names.end()));
  if (hint.empty()) return message;
  const std::string head = "unknown model '" + name + "'";
  if (message.rfind(head, 0) == 0) return head + hint + message.substr(head.size());
  return message + hint;
}

// Phase-1 checks are independent where they can be: each runs, and every
// problem found is reported together (ftrain --check fixes a deck in one
// round trip, not one error per attempt).
class ProblemList {
 public:
  // A problem two checks find (a bad parallel grid: its own check and the
  // plan's) is listed once.
  void add(const std::string& message) {
    if (std::find(messages_.begin(), messages_.end(), message) == messages_.end()) messages_.push_back(message);
  }
  bool check(const std::function<void()>& run_check) {
    try {
      run_check();
      return true;
    } catch (const UserError& e) {
      add(e.what());
      return false;
    }
  }
  // The deck's warnings go with the errors: a misspelt -var often explains one.
  void throw_if_any(const std::vector<std::string>& warnings) const {
    if (messages_.empty()) return;
    std::string all = messages_.size() == 1 ? messages_[0] : std::to_string(messages_.size()) + " problems:";
    if (messages_.size() > 1)
      for (const auto& m : messages_) all += "\n  " + m;
    for (const auto& w : warnings) all += "\nwarning: " + w;
    throw UserError(all);
  }

 private:
  std::vector<std::string> messages_;
};
}  // namespace

struct Trainer::State {
  RunConfig config;
  Communicator& world;
  TrainerOptions options;
  std::vector<DirectoryLock> directory_locks;  // rank 0 only; released last, after every write
  ModelHandle model;
  DeviceChoice device_choice;  // deck `device`, decided first in prepare()
  FsdpOptions fsdp;
  RunPlan plan;
  std::unique_ptr<data::BatchSource> train_data;
  std::unique_ptr<data::BatchSource> eval_data;
  std::unique_ptr<FsdpEngine> engine;
  DevicePeak peak;
  // Declared after the locks, so destroyed before them: closing metrics.jsonl
  // is its last write, and the lock goes only after it.
  RunOutput out;
  int ranks_per_node = 1;  // the most on any node (the plan's per-node figures take the fullest node)
  NodeLayout nodes;        // which ranks share a node (comm/node_layout.hpp), or the planned job's
  int blas_threads = 1;
  std::string cpu_binding_text;     // the run header's "host threads" line (cpu_binding.hpp)
  std::string cpu_binding_warning;  // set when the launcher bound ranks to fewer CPUs than their share
  ckpt::ResumePlan resume_plan;  // rank 0's decision (prepare), every rank's after run() shares it
  ResumePoint resume;            // where training starts (rank 0's plan until run() loads it)
  std::uint64_t base_checksum = 0;  // LoRA: the frozen base's bits after loading (FsdpEngine::base_checksum)

  State(const RunConfig& c, Communicator& w, const TrainerOptions& o)
      : config(c), world(w), options(o), out(w.rank()) {}

  bool is_root() const { return world.rank() == 0; }
};

namespace {

using State = Trainer::State;

bool path_exists(const std::string& path) {
  std::error_code ec;
  return !path.empty() && std::filesystem::exists(path, ec);
}

// The FSDP options, the LR schedule, the progress line and the plan.
void check_settings(State& s, ProblemList& problems, int plan_world) {
  const RunConfig& c = s.config;
  const bool fsdp_ok = problems.check([&] {
    s.fsdp = resolve_fsdp_options(c, s.device_choice.device);  // the engine allocates and runs there
    // hybrid_shard's default group is a node: refused, naming the nodes,
    // where they cannot give every rank the same group (the engine checks it too).
    if (s.fsdp.strategy == ShardingStrategy::hybrid_shard && s.fsdp.shard_group_size == 0) {
      const std::string problem = hybrid_shard_problem(s.nodes);
      if (!problem.empty()) FT_USER_ERROR() << c.fsdp.where.str() << ": fsdp hybrid_shard: " << problem;
    }
    resolve_shard_group_size(c, s.fsdp, plan_world, s.ranks_per_node);
  });
  problems.check([&] {
    const ProcessGrid grid(plan_world, static_cast<int>(c.parallel.tensor), static_cast<int>(c.parallel.context), 0,
                           c.parallel.where.str());
    s.fsdp.tensor_parallel = grid.tensor_size();
    s.fsdp.context_parallel = grid.context_size();
  });
  problems.check([&] { resolve_schedule(c); });
  problems.check([&] {
    s.out.set_progress_line(decide_progress(std::string(deck::word(c.progress)), process_environment, probe_terminal()));
  });
  const bool planned =
      fsdp_ok && problems.check([&] { s.plan = make_plan(*s.model, c, s.fsdp, plan_world, s.ranks_per_node); });
  // After the plan, which plans the whole model: this splits it into the
  // rank's slices. A grid the plan refused (its layout check names why) is
  // not offered to the model, which would refuse it a second time.
  if (planned && !s.options.check_only)
    problems.check([&] { check_tensor_parallel(c, s.fsdp, *s.model); });
  if (planned && !s.options.check_only) problems.check([&] { check_context_parallel(c, s.fsdp, *s.model); });
  if (fsdp_ok && s.options.check_only) problems.check([&] { refuse_model_parallel_options(c, s.fsdp); });
}

// A rank bound to n CPUs (mpirun PE=n, srun --cpus-per-task) runs n
// threads; an unbound one an even share of its node. Returns the cores this
// rank has. Collective.
int bind_host_threads(State& s, int ranks_here) {
  const CpuBinding binding = current_cpu_binding();
  const int cores_per_rank = cores_for_rank(binding, ranks_here);
  s.blas_threads = configure_blas_threads(cores_per_rank);
  const int fewest = static_cast<int>(-s.world.all_reduce_max(-static_cast<double>(binding.allowed)));
  const int most = static_cast<int>(s.world.all_reduce_max(static_cast<double>(binding.allowed)));
  const bool any_bound = s.world.all_reduce_max(binding.bound() ? 1.0 : 0.0) > 0;
  s.cpu_binding_text = describe_cpu_binding(binding, fewest, most, any_bound);
  const int node_share = std::max(1, binding.online / std::max(1, ranks_here));
  if (any_bound && fewest < node_share)
    s.cpu_binding_warning = "a rank is bound to " + std::to_string(fewest) + " CPU(s) while its node has " +
                            std::to_string(node_share) + " per rank: the host backend runs that few threads. "
                            "Bind each rank to its share (mpirun --map-by ppr:N:node:PE=" + std::to_string(node_share) +
                            " --bind-to core, or srun --cpus-per-task=" + std::to_string(node_share) +
                            " --cpu-bind=cores; jobs/*/launch.sh do this)";
  return cores_per_rank;
}

// `init hdf5` and `init safetensors`, stop_after, the resume plan and each output location.
void check_inputs_and_outputs(State& s, ProblemList& problems) {
  const RunConfig& c = s.config;
  // A missing file is already on the list (the deck's parse named it).
  const bool init_file = (c.init.kind == deck::InitKind::hdf5 || c.init.kind == deck::InitKind::safetensors) &&
                         path_exists(c.init.path);
  if (init_file && c.init.kind == deck::InitKind::hdf5) problems.check([&] { check_consolidated_init(c, *s.model); });
  // Every tensor's name, shape and dtype from the headers (no tensor data is
  // read): a mismatch is found here, at --check too, not when the job loads.
  if (init_file && c.init.kind == deck::InitKind::safetensors)
    problems.check([&] { check_safetensors_init(c, *s.model); });
  problems.check([&] {
    if (c.checkpoint.stop_after > 0 && c.checkpoint.stop_after >= c.max_steps)
      FT_USER_ERROR() << c.checkpoint.where.str() << ": stop_after " << c.checkpoint.stop_after
                      << " must be below max_steps " << c.max_steps;
  });
  if (!c.resume.from.empty())
    problems.check([&] { s.resume = plan_resume(c, s.is_root(), s.resume_plan); });
  // The run says it on resuming; --check says it before the job is queued.
  if (const std::string note = max_steps_note(c, s.resume); s.options.check_only && !note.empty())
    s.config.warnings.push_back(note.substr(0, note.size() - 1));
  // At --check nothing is created; before a real run every output directory
  // exists and takes a write, so a read-only or full location fails now,
  // once, naming the deck line, rather than at the first save.
  for (const OutputLocation& location : output_locations(c))
    problems.check([&] { check_output_locations({location}, /*create=*/!s.options.check_only); });
}

// --check: what the run would read first. The token files' headers (a
// vocabulary larger than the model's is otherwise found only at run time);
// an image file is opened as the run would open it: its datasets, their
// shapes against the model's and every label.
void check_data_files(State& s, ProblemList& problems) {
  const RunConfig& c = s.config;
  for (const DataRole role : {DataRole::training, DataRole::evaluation}) {
    const bool eval = role == DataRole::evaluation;
    const std::string& path = eval ? c.eval.path : c.data.path;
    const deck::DataKind kind = eval ? c.eval.kind : c.data.kind;
    if (!path_exists(path) && path != "(synthetic)") continue;  // the deck's parse named it
    if (kind == deck::DataKind::tokens && !path.empty()) {
      problems.check([&] {
        std::optional<data::TokenFile> file;
        try {
          file.emplace(path);
        } catch (const UserError& e) {  // deck.md: data errors name the file and the deck line
          FT_USER_ERROR() << (eval ? c.eval.where : c.data.where).str() << ": " << e.what();
        }
        check_label_space(c, role, static_cast<std::int64_t>(file->header().vocab_size), *s.model);
        data::TokenDatasetOptions mask{.packing = c.data.packing, .document_mask = c.data.document_mask};
        if (const std::string problem = data::document_mask_problem(*file, mask); !problem.empty())
          FT_USER_ERROR() << (eval ? c.eval.where : c.data.where).str() << ": " << problem;
        if (!eval) report_example_truncation(c, *file, s.config.warnings);
      });
    }
    const ImageDataSection& images = eval ? c.eval.images : c.data.images;
    if (kind == deck::DataKind::images && images.source != deck::ImageSource::synthetic && !path.empty()) {
      problems.check([&] {
        const auto source = make_batch_source(c, role, std::max<std::int64_t>(1, s.plan.global_batch), *s.model);
        check_label_space(c, role, source->label_space(), *s.model);
      });
    }
  }
}

// A real run's data sources, checked against the model.
void open_data(State& s) {
  const RunConfig& c = s.config;
  const std::int64_t outputs = s.model->output_size();
  s.train_data = make_batch_source(c, DataRole::training, s.plan.global_batch, *s.model);
  if (!c.eval.path.empty()) s.eval_data = make_batch_source(c, DataRole::evaluation, s.plan.global_batch, *s.model);
  if (const auto* tokens = dynamic_cast<const data::TokenBatchSource*>(s.train_data.get()))
    report_example_truncation(c, tokens->dataset().file(), s.config.warnings);
  for (auto* source : {s.train_data.get(), s.eval_data.get()}) {
    if (source != nullptr && source->label_space() > outputs)
      check_label_space(c, source == s.train_data.get() ? DataRole::training : DataRole::evaluation,
                        source->label_space(), *s.model);
  }
}

}  // namespace

Trainer::Trainer(const RunConfig& config, Communicator& world, const TrainerOptions& options)
    : state_(std::make_unique<State>(config, world, options)) {}

Trainer::~Trainer() = default;

void Trainer::prepare() {
  State& s = *state_;
  const RunConfig& c = s.config;
  // First: `device cuda` without a usable GPU stops here, naming the cause
  // (--check plans for the GPU instead: a login node has none).
  s.device_choice = s.options.check_only ? choose_device_for_check(c.device, c.device_where, real_cuda_probes())
                                         : choose_device(c.device, c.device_where, real_cuda_probes());
  // Before the first collective of the run: every later one is watched.
  set_collective_timeout(c.collective_timeout_seconds);
  s.nodes = gather_node_layout(s.world);  // collective: every rank calls it
  const int ranks_here =
      static_cast<int>(s.nodes.ranks_on(s.nodes.node_of_rank[static_cast<std::size_t>(s.world.rank())]).size());
  // --check --ranks N plans the real run's geometry without its processes.
  const int plan_world = s.options.plan_ranks > 0 ? s.options.plan_ranks : s.world.size();
  s.ranks_per_node = s.nodes.most_ranks_per_node();
  if (s.options.plan_ranks > 0) {
    s.ranks_per_node = s.options.plan_ranks_per_node > 0 ? s.options.plan_ranks_per_node : plan_world;
    if (plan_world % s.ranks_per_node != 0)
      FT_USER_ERROR() << "command line: --ranks-per-node " << s.ranks_per_node << " does not divide --ranks "
                      << plan_world;
    s.nodes = planned_node_layout(plan_world, s.ranks_per_node);
    if (s.options.plan_ranks_per_node == 0 && plan_world > 1)
      s.config.warnings.push_back(
          "--ranks " + std::to_string(plan_world) + " without --ranks-per-node: planned as ONE node of " +
          std::to_string(plan_world) + " ranks; for nodes of M ranks (M GPUs each) give --ranks-per-node M: "
          "hybrid_shard's groups, the node count in the fit advice and the save time per node follow it");
  }
  // The deck's missing input files (the parse deferred them) are reported
  // with everything else found below, all in one error.
  ProblemList problems;
  for (const std::string& missing : c.missing_paths) problems.add(missing);
  try {
    s.model = PluginLoader().create_model(c.model.name, c.model.preset, c.model.overrides);
  } catch (const UserError& e) {
    problems.add(c.model.where.str() + ": " + with_model_suggestion(e.what(), c.model.name));
    problems.throw_if_any(c.warnings);  // everything below needs the model
  }
  check_settings(s, problems, plan_world);
  const int cores_per_rank = bind_host_threads(s, ranks_here);
  // precision fp8 on the host is an emulation kept for its numerics (the
  // reference for the GPU's recipe), and its grid turns last-bit differences
  // into visible ones: its BF16 GEMMs (embedding, head) take the route every
  // x86-64 CPU has, so an fp8 curve is the same on CPUs with and without
  // AVX512-BF16/AMX (share/doc/reproducibility.md).
  if (c.precision == deck::Precision::fp8) host::gemm::use_widened_bf16("precision fp8: the same curve on every x86-64 CPU");
  // Rank 0 states the peak (benchmarking at most once per machine, see
  // device_peak.hpp); run() hands its number to every rank.
  if (s.is_root()) {
    problems.check(
        [&] { s.peak = resolve_host_peak(c.peak_tflops, process_environment, std::min(cores_per_rank, s.blas_threads)); });
    // --check of a GPU run: the host's benchmark says nothing about the GPU.
    if (s.options.check_only && s.device_choice.device == Device::cuda)
      s.peak = planned_gpu_peak(c, s.options, std::move(s.peak));
  }
  check_inputs_and_outputs(s, problems);
  if (s.options.check_only) check_data_files(s, problems);
  if (s.options.check_only) problems.check([&] { find_signal_window(s.options.job_script, process_environment); });
  problems.throw_if_any(c.warnings);
  if (s.options.check_only) return;
  // One owner per run_dir and checkpoint dir (train/run_dir_lock.hpp): rank 0
  // holds the locks for the run's lifetime; a refusal fails start-up on every
  // rank through the start-up agreement, before anything is written.
  if (s.is_root()) s.directory_locks = lock_run_directories(output_locations(c), &s.config.warnings);
  open_data(s);
}

namespace {

// The steps from the resume point (or 0) to max_steps, each: the
// micro-batches' forward and backward, the update, and what the step owes
// the log, the evaluation, the checkpoints and a stop. What the host reads
// of a step (its loss, its norm and the diverged flag) is read once, when
// something needs it (share/doc/execution-model.md, "What the host reads").
class TrainingLoop {
 public:
  TrainingLoop(State& s, Checkpointing& checkpoints)
      : s_(s), c_(s.config), checkpoints_(checkpoints),
        micro_batches_(static_cast<std::size_t>(s.config.batch.grad_accum)) {}

  // The exit code: 0 after max_steps or a clean stop, 1 after a stop on an error.
  int run() {
    start_ = Clock::now();  // training time of this run, loading excluded
    checkpoints_.set_timing(start_, s_.resume.prior_elapsed);
    if (s_.eval_data && c_.eval.every > 0 && s_.resume.step == 0) evaluate(0);
    for (std::int64_t step = s_.resume.step; step < c_.max_steps; ++step) {
      const auto t0 = Clock::now();
      const double lr = optim::learning_rate(schedule_of(c_), c_.optimizer.lr, step, c_.max_steps);
      reads_ = StepReads{step, run_micro_steps(step), std::nullopt, std::nullopt};
      // The count is all-reduced, so every rank stops together, before the update.
      if (reads_.global_targets == 0 && s_.model->data_kind() == DataKind::tokens && !c_.data.allow_untrained_steps)
        return stop_with_pending(untrained_step_message(c_, step + 1, s_.plan.global_batch));
      apply_update(step, lr);
      window_seconds_ += std::chrono::duration<double>(Clock::now() - t0).count();
      ++window_steps_;
      const std::int64_t done = step + 1;
      const bool log_step = done % c_.log_every == 0 || done == c_.max_steps;
      if (log_step) {
        if (const std::optional<int> stopped = report_step(done, lr)) return *stopped;
      }
      if (s_.eval_data && c_.eval.every > 0 && done % c_.eval.every == 0) {
        if (const std::string diverged = divergence(); !diverged.empty()) return s_.out.stop_with_error(diverged);
        evaluate(done);
      }
      if (!log_step) s_.out.progress(done, c_.max_steps, eta(done));
      if (const std::optional<int> stopped = save_or_stop(done, lr)) return *stopped;
    }
    return finish_training();
  }

 private:
  // What the host has read of the current step.
  struct StepReads {
    std::int64_t step = 0;
    std::int64_t global_targets = 0;  // all ranks' trained targets
    std::optional<double> loss;
    std::optional<FsdpEngine::StepHealth> health;
  };

  double elapsed() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  double eta(std::int64_t done) const {
    return elapsed() / static_cast<double>(done - s_.resume.step) * static_cast<double>(c_.max_steps - done);
  }

  // One step's forward and backward over its micro-batches (zeroed
  // gradients, a new loss window); returns the global target-token count.
  // Also replays a diverged step to name its first non-finite gradient.
  std::int64_t run_micro_steps(std::int64_t step) {
    // The ranks of one data index (parallel tensor/context) read the same samples.
    const int rank = s_.engine->grid().coordinates(s_.world.rank()).data;
    const std::int64_t micro = c_.batch.micro_batch, accum = c_.batch.grad_accum;
    s_.engine->zero_grad();
    std::int64_t local_targets = 0;
    for (std::int64_t a = 0; a < accum; ++a) {
      Batch& b = micro_batches_[static_cast<std::size_t>(a)];
      s_.train_data->fill_batch(step, (rank * accum + a) * micro, micro, b);
      b.first_sample = step * s_.plan.global_batch + (rank * accum + a) * micro;  // LoRA dropout's key
      if (counts_batch()) local_targets += count_targets(b.targets);
      if (counts_batch() && b.documents.defined()) window_attended_pairs_ += document_attention_pairs(b.documents);
    }
    const std::int64_t global_targets = s_.world.all_reduce_sum(local_targets);
    const float loss_scale = global_targets > 0 ? 1.0f / static_cast<float>(global_targets) : 0.0f;
    // fsdp no_sync on: only the last micro-step reduces the gradients.
    for (std::size_t a = 0; a < micro_batches_.size(); ++a)
      s_.engine->forward_backward(micro_batches_[a], loss_scale, /*sync_gradients=*/a + 1 == micro_batches_.size());
    return global_targets;
  }

  // Clipping and the update read nothing on the host: the norm, the clip
  // factor and the diverged flag are device scalars, and a diverged step
  // (non-finite norm; a non-finite loss gives non-finite gradients) and
  // every step after it apply no update (AdamW is skipped on the device).
  void apply_update(std::int64_t step, double lr) {
    AdamWHyper hyper;
    hyper.lr = static_cast<float>(lr);
    hyper.beta1 = static_cast<float>(c_.optimizer.beta1);
    hyper.beta2 = static_cast<float>(c_.optimizer.beta2);
    hyper.eps = static_cast<float>(c_.optimizer.eps);
    hyper.weight_decay = static_cast<float>(c_.optimizer.weight_decay);
    s_.engine->clip_and_step(hyper, c_.clip_grad_norm, step + 1);
  }

  // A data index's batch (its target tokens, its documents' attention) is
  // counted by one of its ranks: all T x C ranks are given the same windows.
  bool counts_batch() const {
    return s_.engine->model_parallel().tensor_rank() == 0 && s_.engine->model_parallel().context_rank() == 0;
  }
  // Its loss by one rank of each context index: the tensor ranks all hold
  // their tokens' whole loss (the vocabulary-parallel cross entropy reduces
  // it over them), so the others add 0; the context ranks each hold their
  // own tokens' part.
  bool holds_loss() const { return s_.engine->model_parallel().tensor_rank() == 0; }
  double local_train_loss() {
    const double loss = s_.engine->take_train_loss();
    return holds_loss() ? loss : 0.0;
  }
  // The step's mean loss, all-reduced: every rank reads at the same steps,
  // so the all-reduce is collective.
  double step_loss() {
    if (!reads_.loss)
      reads_.loss = s_.world.all_reduce_sum(local_train_loss()) /
                    static_cast<double>(std::max<std::int64_t>(1, reads_.global_targets));
    return *reads_.loss;
  }
  // The norm and the flag, read before anything is logged, evaluated or
  // saved, so nothing after a diverged step is ever written.
  FsdpEngine::StepHealth read_health() {
    if (!reads_.health) reads_.health = s_.engine->read_step_health();
    return *reads_.health;
  }

  // An error stop that first finishes an earlier, finite save in flight.
  int stop_with_pending(std::string message) {
    if (const std::string pending = checkpoints_.finish(); !pending.empty()) message += " Also: " + pending;
    return s_.out.stop_with_error(message);
  }

  // The stop message when a step since the last read diverged, else empty.
  // The norm is all-reduced, so every rank sees the same flag: the stop is
  // collective and clean. When the first diverged step is not this one, it
  // is run again to find its loss, norm and first non-finite gradient
  // (every update since was skipped, so the weights are the ones it saw).
  std::string divergence() {
    const FsdpEngine::StepHealth h = read_health();
    if (h.first_diverged_step == 0) return "";
    double norm = h.grad_norm, loss = 0;
    if (h.first_diverged_step == reads_.step + 1) {
      loss = step_loss();
    } else {
      const std::int64_t targets = run_micro_steps(h.first_diverged_step - 1);
      loss = s_.world.all_reduce_sum(local_train_loss()) /
             static_cast<double>(std::max<std::int64_t>(1, targets));
      norm = s_.engine->grad_norm();
    }
    const std::string where = s_.engine->first_non_finite(FsdpEngine::ShardState::gradient);
    std::string m = divergence_message(c_, h.first_diverged_step, norm, loss, where);
    if (const std::string pending = checkpoints_.finish(); !pending.empty()) m += " Also: " + pending;
    return m;
  }

  // Evaluation splits the eval windows in contiguous, in-order ranges over
  // ranks. forward_only gathers parameters collectively, so every rank runs
  // the same number of batches; a rank past its range runs a batch whose
  // targets are all ignored (zero loss, zero tokens).
  void evaluate(std::int64_t step) {
    // Split over data indices (the ranks of one read the same windows).
    const ProcessGrid& grid = s_.engine->grid();
    const int rank = grid.coordinates(s_.world.rank()).data, world = grid.data_size();
    const std::int64_t micro = c_.batch.micro_batch;
    const std::int64_t n = s_.eval_data->eval_size();
    const std::int64_t begin = n * rank / world, end = n * (rank + 1) / world;
    std::int64_t tokens = 0;
    const std::int64_t most_windows = (n + world - 1) / world;
    const std::int64_t batches = (most_windows + micro - 1) / micro;
    for (std::int64_t i = 0; i < batches; ++i) {
      const std::int64_t first = begin + i * micro;
      const std::int64_t count = std::clamp<std::int64_t>(end - first, 0, micro);
      Batch b;
      s_.eval_data->fill_eval(first, count, micro, b);
      if (counts_batch()) tokens += count_targets(b.targets);
      s_.engine->forward_only(b);  // the loss sum stays on the device
    }
    const double eval_loss = s_.engine->take_eval_loss();
    const double total = s_.world.all_reduce_sum(holds_loss() ? eval_loss : 0.0);
    const std::int64_t total_tokens = s_.world.all_reduce_sum(tokens);
    const double mean = total / static_cast<double>(std::max<std::int64_t>(1, total_tokens));
    s_.out.say(eval_log_line(step, mean, total_tokens, s_.model->data_kind() == DataKind::images));
    if (s_.is_root()) s_.out.write_metrics(eval_metrics_row(step, mean, total_tokens));
  }

  // The model FLOPs of one step of the log window: the plan's, or with the
  // document mask only the attention the documents need (all-reduced: every
  // rank reports at the same steps, so the all-reduce is collective).
  double window_step_flops() {
    if (!c_.data.document_mask || s_.model->data_kind() != DataKind::tokens) return s_.plan.flops_per_step;
    const double steps = static_cast<double>(window_steps_);
    const double pairs = s_.world.all_reduce_sum(window_attended_pairs_);
    return masked_step_flops(*s_.model, s_.plan.flops_per_step * steps, s_.plan.global_batch * window_steps_,
                             c_.batch.seq_len, pairs) / steps;
  }

  // The log step: the line, the metrics row, a stop if the step diverged.
  std::optional<int> report_step(std::int64_t done, double lr) {
    if (const std::string diverged = divergence(); !diverged.empty()) return s_.out.stop_with_error(diverged);
    StepRecord r;
    r.step = done;
    r.max_steps = c_.max_steps;
    r.lr = lr;
    r.grad_norm = read_health().grad_norm;
    r.loss = step_loss();
    if (!std::isfinite(r.loss))
      return s_.out.stop_with_error(non_finite_loss_message(c_, done, r.loss, r.grad_norm));
    const int world = s_.world.size();
    r.step_time_s = window_seconds_ / static_cast<double>(window_steps_);
    r.tokens_per_s = static_cast<double>(s_.plan.tokens_per_step) / r.step_time_s;
    const double achieved_per_rank = window_step_flops() / r.step_time_s / world;
    r.mfu = model_flops_utilisation(achieved_per_rank, s_.peak.flops_per_second);
    if (!r.mfu && !peak_disproved_) {
      peak_disproved_ = true;
      s_.out.say(peak_disproved_warning(achieved_per_rank, s_.peak.flops_per_second, s_.peak.description));
    }
    r.elapsed_s = s_.resume.prior_elapsed + elapsed();  // continues across resumes
    r.eta_s = eta(done);
    r.memory = gather_memory_peaks(s_.world, s_.device_choice.device == Device::cuda);
    r.images = s_.model->data_kind() == DataKind::images;
    r.samples_per_s = static_cast<double>(s_.plan.global_batch) / r.step_time_s;
    r.counters = gather_window_counters(s_.world, *s_.engine, static_cast<double>(window_steps_));
    r.trained_tokens = reads_.global_targets;
    r.trainable_parameters = s_.engine->trainable_parameters();
    r.global_batch = s_.plan.global_batch;
    r.tokens_per_step = s_.plan.tokens_per_step;
    r.fp8 = s_.fsdp.fp8;
    s_.out.say(step_log_line(r));
    if (s_.is_root()) s_.out.write_metrics(step_metrics_row(r));
    window_seconds_ = 0;
    window_steps_ = 0;
    window_attended_pairs_ = 0;
    return std::nullopt;
  }

  // Checkpoints and stops at the end of step `done`: a committed background
  // save, a stop signal (agreed over ranks) or stop_after, a save due. A
  // checkpoint is never committed, nor a run stopped quietly, after a
  // diverged step. Returns the exit code when the run stops here.
  std::optional<int> save_or_stop(std::int64_t done, double lr) {
    if (const std::string error = checkpoints_.poll(done); !error.empty()) return s_.out.stop_with_error(error);
    const int signalled = agreed_stop_signal(s_.world);
    const bool stopping = signalled > 0 || done == c_.checkpoint.stop_after;
    const bool has_dir = checkpoints_.enabled();
    const bool saving =
        has_dir && (stopping || (c_.checkpoint.every > 0 && done % c_.checkpoint.every == 0) || done == c_.max_steps);
    if (saving || stopping) {
      if (const std::string diverged = divergence(); !diverged.empty()) return s_.out.stop_with_error(diverged);
    }
    // A stop signal while a background save is in flight: commit that one and
    // stop. Writing another checkpoint after it would double the time the
    // stop takes, and a launcher's grace before SIGKILL is seconds; the steps
    // since are trained again after `resume auto`.
    if (signalled > 0 && checkpoints_.in_flight() && done < c_.max_steps) {
      if (const std::string pending = checkpoints_.finish(); !pending.empty()) return s_.out.stop_with_error(pending);
      s_.out.say("stop signal received (" + signal_name(signalled) + ") while " + checkpoints_.last_committed() +
                 " was being written: committed it and stopped after step " + std::to_string(done) +
                 " (the steps after it are trained again); resume with `resume auto`\n");
      return s_.out.finish(0);
    }
    // A stop signal that arrives while a save is being written (SIGTERM at
    // preemption, seconds before SIGKILL) stops the run at the newest
    // committed state: nothing more is trained or written, so the stop takes
    // no longer than the save in flight. Asynchronous: the previous save,
    // still in flight at this save's step, is finished first and the signal
    // looked at again before a new write is started.
    const bool may_stop_late = saving && !stopping && done < c_.max_steps;
    if (may_stop_late && checkpoints_.in_flight()) {
      if (const std::string pending = checkpoints_.finish(); !pending.empty()) return s_.out.stop_with_error(pending);
      if (const int late = agreed_stop_signal(s_.world); late > 0) return stopped_after_save(late, done);
    }
    if (saving) {
      const std::string refused =
          checkpoints_.save(done, step_loss(), lr, read_health().grad_norm, stopping || done == c_.max_steps);
      if (!refused.empty()) return s_.out.stop_with_error(refused);
    }
    // A blocking save just committed this step: a signal that arrived during
    // it stops here. (A background write just started is finished and
    // committed at the next step boundary, by the rule above the save.)
    if (may_stop_late && !checkpoints_.in_flight()) {
      if (const int late = agreed_stop_signal(s_.world); late > 0) return stopped_after_save(late, done);
    }
    if (stopping && done < c_.max_steps) {
      const std::string why =
          signalled > 0 ? "stop signal received (" + signal_name(signalled) + ")" : "stop_after " + std::to_string(done);
      s_.out.say(why + ": stopped after step " + std::to_string(done) +
                 (has_dir ? "; resume with `resume auto`\n" : "; no checkpoint dir configured, nothing saved\n"));
      return s_.out.finish(0);
    }
    return std::nullopt;
  }

  int stopped_after_save(int signo, std::int64_t done) {
    const std::string& committed = checkpoints_.last_committed();
    s_.out.say("stop signal received (" + signal_name(signo) + ") while " + committed +
               " was being written: committed it and stopped after step " + std::to_string(done) +
               (committed == ckpt::step_directory(c_.checkpoint.dir, done) ? "" : " (the steps after it are trained again)") +
               "; resume with `resume auto`\n");
    return s_.out.finish(0);
  }

  // After max_steps: the last evaluation, LoRA's checks and exports,
  // save_final, and the summary line.
  int finish_training() {
    if (s_.eval_data && c_.eval.every > 0 && c_.max_steps % c_.eval.every != 0) evaluate(c_.max_steps);
    if (s_.engine->lora())
      finish_lora(*s_.engine, s_.world, c_, *s_.model, s_.base_checksum, s_.fsdp.lora.scale(), s_.out);
    if (!c_.save_final.path.empty()) save_final_weights(*s_.engine, s_.world, c_, *s_.model, s_.out);
    report_memory("at end", s_.world, s_.device_choice.device == Device::cuda, s_.out);
    const double total = elapsed();
    const std::int64_t first = s_.resume.step;
    // A resumed run counts its own steps and time, and states the total apart.
    const std::string trained =
        first == 0 ? std::to_string(c_.max_steps) + " steps in " + format_duration(total)
                   : "step " + std::to_string(c_.max_steps) + "; this run trained " +
                         std::to_string(c_.max_steps - first) + " steps (" + std::to_string(first) + " -> " +
                         std::to_string(c_.max_steps) + ") in " + format_duration(total) + ", " +
                         format_duration(s_.resume.prior_elapsed + total) + " across resumes";
    s_.out.say("done: " + trained + "; metrics in " + c_.run_dir + "/metrics.jsonl\n");
    return s_.out.finish(0);
  }

  State& s_;
  const RunConfig& c_;
  Checkpointing& checkpoints_;
  std::vector<Batch> micro_batches_;
  Clock::time_point start_;
  double window_seconds_ = 0;
  std::int64_t window_steps_ = 0;
  double window_attended_pairs_ = 0;  // this rank's, with document_mask on (attention_flops.hpp)
  bool peak_disproved_ = false;  // warned once that the achieved rate exceeds the peak
  StepReads reads_;
};

// Everything before the first step: the rank's log, the GPU binding, the
// engine, the weights (or the resumed checkpoint), metrics.jsonl.
void load(State& s) {
  const RunConfig& c = s.config;
  const bool device_run = s.device_choice.device == Device::cuda;
  if (c.per_rank_logs) s.out.open_rank_log(c.run_dir + "/rank_" + std::to_string(s.world.rank()) + ".log");
  // A GPU run: each rank binds to its GPU (node-local rank, CUDA_VISIBLE_DEVICES;
  // comm/gpu_assignment.hpp) before the engine makes its context there. A
  // device backend without devices of its own to hand out (the test-only
  // simulated device) registers no communicator backend and binds nothing.
  if (s.fsdp.device != Device::host && find_device_comm_backend(s.fsdp.device) != nullptr)
    bind_local_gpu(s.world, s.fsdp.device_comm, s.fsdp.device);
  report_memory("before load", s.world, device_run, s.out);  // seed 001 prints the same
  s.engine = std::make_unique<FsdpEngine>(*s.model, s.world, s.fsdp);
  // Every rank follows rank 0's resume plan (prepare()).
  if (!c.resume.from.empty())
    s.resume_plan = ckpt::ResumePlan::from_json(ckpt::broadcast_text(s.world, s.resume_plan.to_json(), 0));
  initialise_weights(*s.engine, c, s.world, !s.resume_plan.candidates.empty(), s.out);
  if (!c.resume.from.empty())
    s.resume = resume_training(*s.engine, s.world, c, s.resume_plan, s.plan.global_batch, s.out);
  if (s.is_root()) {
    const std::string path = c.run_dir + "/metrics.jsonl";
    s.out.open_metrics(path, kept_metrics_rows(path, s.resume, s.world.size(), s.plan.global_batch));
  }
  report_memory("after load", s.world, device_run, s.out);
  // LoRA: the base must leave training bit-identical. Checked at the end
  // against this checksum, which checkpoints also record so a resume can
  // refuse a changed base.
  if (s.engine->lora()) s.base_checksum = state_frozen_base(*s.engine, s.out);
}

}  // namespace

int Trainer::run() {
  State& s = *state_;
  const RunConfig& c = s.config;
  s.peak.flops_per_second = s.world.all_reduce_max(s.peak.flops_per_second);  // rank 0's; the others hold 0
  if (s.is_root()) {
    const std::string check_report =
        s.options.check_only ? check_plan_report(CheckPlanFacts{c, *s.model, s.plan, s.fsdp, s.device_choice, s.peak,
                                                                s.options, s.ranks_per_node})
                             : std::string();
    s.out.say(run_header(RunHeaderFacts{c, *s.model, s.plan, s.fsdp, s.device_choice, s.peak, s.out.progress_line(),
                                        s.ranks_per_node, s.blas_threads, s.cpu_binding_text, s.cpu_binding_warning,
                                        s.options.plan_ranks > 0, s.options.check_only,
                                        s.options.device_memory_bytes, s.options.host_memory_bytes,
                                        check_report, &s.nodes}));
  }
  // A finished run started again (a requeue after the last step, a rerun of
  // the same job script) is not an error: there is simply nothing to do.
  // Rank 0 alone planned the resume (prepare()); every rank learns its step.
  const auto resumed_at = static_cast<std::int64_t>(s.world.all_reduce_max(static_cast<double>(s.resume.step)));
  if (resumed_at >= c.max_steps) {
    s.out.say("nothing left to train: " + s.resume.directory + " is at step " + std::to_string(resumed_at) +
              " and max_steps is " + std::to_string(c.max_steps) + " (raise max_steps to train on)\n");
    return 0;
  }
  if (s.options.check_only) return 0;
  // From here on a stop signal is recorded, not fatal: one that arrives while
  // the model loads (a scheduler's early warning, a walltime timer) stops the
  // run cleanly at the end of the first step.
  install_stop_handlers();
  // kill -9 of mpirun: the ranks stop within 50 ms, before committing anything.
  start_launcher_watch();
  load(s);
  Checkpointing checkpoints(*s.engine, s.world, c, *s.model, s.out);
  checkpoints.set_parent(s.resume.directory);
  checkpoints.set_base_checksum(s.base_checksum);
  checkpoints.set_global_batch(s.plan.global_batch);
  return TrainingLoop(s, checkpoints).run();
}

}  // namespace ftrain
