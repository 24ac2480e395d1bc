#include "train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <sstream>
#include <thread>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "ckpt/collective_errors.hpp"
#include "comm/collective_watchdog.hpp"
#include "ckpt/consolidated.hpp"
#include "ckpt/checkpoint_writer.hpp"
#include "ckpt/lineage.hpp"
#include "ckpt/safetensors.hpp"
#include "ckpt/safetensors_dir.hpp"
#include "ckpt/peft_adapter.hpp"
#include "ckpt/sharded_checkpoint.hpp"
#include "core/error.hpp"
#include "core/memory.hpp"
#include "data/image_source.hpp"
#include "data/token_batch_source.hpp"
#include "deck/diagnostics.hpp"
#include "data/token_file.hpp"
#include "fsdp/engine.hpp"
#include "kernels/backend_registry.hpp"
#include "kernels/blas_threads.hpp"
#include "train/cpu_binding.hpp"
#include "kernels/host/gemm.hpp"
#include "kernels/host_isa.hpp"
#include "optim/lr_schedule.hpp"
#include "plugin/loader.hpp"
#include "comm/device_communicator.hpp"
#include "runtime/attention_backend.hpp"
#include "train/console.hpp"
#include "train/device_choice.hpp"
#include "train/device_memory.hpp"
#include "runtime/execution_context.hpp"
#include "train/device_peak.hpp"
#include "train/output_locations.hpp"
#include "train/run_dir_lock.hpp"
#include "train/run_settings.hpp"
#include "core/launcher_watch.hpp"
#include "train/divergence_advice.hpp"
#include "train/host_backend.hpp"
#include "train/plan.hpp"
#include "train/plan_fit.hpp"
#include "ftrain_build_paths.hpp"

namespace ftrain {

namespace {

// How the base weights were initialised, recorded in LoRA checkpoints next
// to their checksum (a resume that finds another base names both).
std::string base_init_text(const RunConfig& c) {
  std::ostringstream t;
  if (c.init.kind == deck::InitKind::random) t << "init random std " << c.init.std << " seed " << c.seed;
  else t << "init " << c.init.kind << " " << c.init.path;
  return t.str();
}

using Clock = std::chrono::steady_clock;

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<long long>(seconds + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, (s / 60) % 60, s % 60);
  return buf;
}

// Set by SIGTERM / SIGUSR1 (what SLURM sends before the time limit) and
// SIGINT (Ctrl-C, where the launcher forwards it or there is none); the run
// loop agrees on it across ranks once per step.
volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void ftrain_on_stop_signal(int signo) { g_stop_signal = signo; }

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = ftrain_on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGUSR1, &action, nullptr);
  // A second Ctrl-C means "now": the handler is one-shot, the default
  // (terminate) applies again after the first.
  action.sa_flags = SA_RESTART | SA_RESETHAND;
  sigaction(SIGINT, &action, nullptr);
}

std::string signal_name(int signo) {
  switch (signo) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    default: return "signal " + std::to_string(signo);
  }
}

std::string joined_deck(const std::vector<std::string>& lines) {
  std::string text;
  for (const auto& line : lines) text += line + "\n";
  return text;
}

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
  bool check(const std::function<void()>& run_check) {
    try {
      run_check();
      return true;
    } catch (const UserError& e) {
      messages_.emplace_back(e.what());
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

// The run header's device part: where the engine runs and why.
std::string device_header(const DeviceChoice& choice, AttentionBackend attention_backend, int blas_threads) {
  std::ostringstream h;
  if (choice.device == Device::host) {
    h << "host [" << choice.reason << "; " << describe_attention_choice(attention_backend, Device::host)
      << "] (Kokkos; " << blas_kernel_description() << ", " << blas_threads
      << " thread(s) per rank)";
  } else {
    const OpTable* table = find_backend(choice.device);
    h << device_name(choice.device) << " [" << choice.reason << "; "
      << describe_attention_choice(attention_backend, choice.device) << "] (ops backend: " << (table != nullptr && table->name != nullptr ? table->name : "?") << ")";
  }
  return h.str();
}

// Packing off on instruction data (a document index): how many examples
// seq_len cuts, and how many it leaves without a trained token. A warning
// when any is cut; an error when no example trains at all, since every step
// would then be an untrained one (unless the deck allows those).
void report_example_truncation(const RunConfig& c, const data::TokenFile& file, std::vector<std::string>& warnings) {
  if (c.data.packing || !file.has_document_index()) return;
  const data::ExampleTruncation n = data::count_example_truncation(file, c.batch.seq_len);
  if (n.truncated == 0) return;
  std::ostringstream m;
  m << c.data.where.str() << ": " << n.truncated << " of " << n.examples << " examples in " << file.path()
    << " are longer than seq_len+1 = " << c.batch.seq_len + 1 << " tokens (the longest has " << n.longest_tokens
    << ") and packing off cuts them; " << n.untrained << " of them " << (n.untrained == 1 ? "loses" : "lose")
    << " every response token and train" << (n.untrained == 1 ? "s" : "") << " nothing (seq_len " << n.longest_tokens - 1
    << " keeps every example whole; packing on trains every response token)";
  if (n.untrained == n.examples && !c.data.allow_untrained_steps)
    FT_USER_ERROR() << m.str() << ". No step would train; `allow_untrained_steps on` on the data line runs it anyway";
  warnings.push_back(m.str());
}

std::int64_t count_targets(const Tensor& targets) {
  const auto* t = targets.data_as<std::int32_t>();
  std::int64_t n = 0;
  for (std::int64_t i = 0; i < targets.numel(); ++i) n += t[i] != -100;
  return n;
}
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
  bool peak_disproved = false;  // warned once that the achieved rate exceeds the peak
  std::ofstream metrics;
  std::ofstream rank_log;
  int ranks_per_node = 1;
  int blas_threads = 1;
  std::string cpu_binding_text;     // the run header's "host threads" line (cpu_binding.hpp)
  std::string cpu_binding_warning;  // set when the launcher bound ranks to fewer CPUs than their share
  std::string resume_dir;        // the checkpoint loaded; empty = fresh start
  ckpt::ResumePlan resume_plan;  // rank 0's decision (prepare), every rank's after run() shares it
  std::string parent_checkpoint; // the lineage parent of the next save (lineage.hpp)
  std::int64_t start_step = 0;   // optimizer steps already done (resume)
  double prior_elapsed = 0;      // training seconds of the runs before this one (checkpoint scalar elapsed_s)
  std::int64_t prior_global_batch = 0;  // samples per step of the run that wrote the checkpoint (0 = unknown)
  int prior_world = 0;
  std::uint64_t base_checksum = 0;  // LoRA: the frozen base's bits after loading (FsdpEngine::base_checksum)

  State(const RunConfig& c, Communicator& w, const TrainerOptions& o) : config(c), world(w), options(o) {}

  bool is_root() const { return world.rank() == 0; }
  // Rank 0 prints; every rank may also write its own log file.
  void say(const std::string& text) {
    if (is_root()) {
      if (progress_shown) std::cout << "\r\033[K";  // the log line replaces the progress line
      progress_shown = false;
      write(std::cout, "standard output", text);
    }
    if (rank_log.is_open()) write(rank_log, rank_log_path, text);
  }
  // For a person at a terminal only (train/console.hpp decides), rank 0 keeps
  // one line updated in place between log lines; files and batch logs (SLURM,
  // PBS, mpirun > log) get plain lines only.
  void progress(std::int64_t done, std::int64_t total, double eta_seconds) {
    if (!is_root() || !progress_line.show) return;
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * done / std::max<std::int64_t>(1, total));
    std::cout << "\r\033[K" << "step " << done << "/" << total << " [" << std::string(filled, '=')
              << std::string(kWidth - filled, ' ') << "] " << (100 * done / std::max<std::int64_t>(1, total))
              << "% ETA " << format_duration(eta_seconds) << std::flush;
    progress_shown = true;
  }
  ProgressDecision progress_line;
  bool progress_shown = false;
  // A stop every rank reached together (the decision came from all-reduced
  // values): rank 0 prints the message once, nothing aborts, and the exit
  // status says it failed.
  int stop_with_error(const std::string& message) {
    if (is_root()) {
      if (progress_shown) std::cout << "\r\033[K" << std::flush;
      progress_shown = false;
      std::cerr << ("ftrain: error: " + std::string(message) + "\n") << std::flush;
    }
    say_rank("error: " + message + "\n");
    finish(1);
    return 1;
  }
  void say_rank(const std::string& text) {
    if (rank_log.is_open()) write(rank_log, rank_log_path, text);
  }

  // Every write to metrics.jsonl, the logs and standard output is checked. A
  // failed one (full disk, quota, I/O error) is reported loudly once per
  // file; training goes on, because the checkpoints are what a bad output
  // disk must not cost, and the run then ends with exit status 1.
  std::string metrics_path, rank_log_path;
  std::vector<std::string> failed_writes;  // "FILE: reason", first failure of each file
  void write(std::ostream& out, const std::string& file, const std::string& text) {
    if (!out) return;  // already reported: the stream stays failed
    // metrics.jsonl is read line by line (plot_metrics.py, resume keeps its
    // rows): a line a full disk cut short is cut off again, whole lines or none.
    const bool whole_lines = &out == &metrics;
    std::error_code size_error;
    const auto size_before = whole_lines ? std::filesystem::file_size(file, size_error) : 0;
    errno = 0;
    out << text << std::flush;
    if (out) return;
    const std::string why = errno != 0 ? std::strerror(errno) : "write failed";
    if (whole_lines && !size_error && ::truncate(file.c_str(), static_cast<off_t>(size_before)) != 0) {
      // /dev/full or a file we may not shorten: the warning below still names the loss
    }
    failed_writes.push_back(file + ": " + why);
    // One write per message: std::cerr is unbuffered, and piecewise writes
    // interleave with standard output in a launcher's merged log.
    std::ostringstream m;
    m << "ftrain: warning: rank " << world.rank() << ": cannot write " << file << ": " << why
      << "; nothing more goes to it, training continues, and ftrain will exit with status 1\n";
    std::cerr << m.str() << std::flush;
  }
  // The exit status of a run that got this far: `code`, or 1 when an output
  // file lost writes (said again at the end, where it is seen).
  int finish(int code) {
    if (failed_writes.empty()) return code;
    std::ostringstream m;
    m << "ftrain: error: rank " << world.rank() << ": output was lost:";
    for (const auto& f : failed_writes) m << " " << f << ";";
    m << " exit status 1\n";
    std::cerr << m.str() << std::flush;
    return 1;
  }
};

enum class DataRole { training, evaluation };

// The data's id space against the model's outputs, with the fix spelled out
// (byte-token files have 257 ids: 256 bytes and the end-of-document id).
void check_label_space(const RunConfig& c, DataRole role, std::int64_t label_space, const Model& model) {
  const std::int64_t outputs = model.output_size();
  if (label_space <= outputs) return;
  std::ostringstream m;
  m << (role == DataRole::evaluation ? c.eval.where : c.data.where).str() << ": the data has " << label_space
    << " token ids / classes but the model's output size is " << outputs;
  if (model.data_kind() == DataKind::tokens && model.config().count("vocab_size") != 0)
    m << "; set `vocab_size " << label_space << "` on the model line (" << c.model.where.str() << ")";
  FT_USER_ERROR() << m.str();
}

// The data source the deck's `data` (training) or `eval` command names.
std::unique_ptr<data::BatchSource> make_batch_source(const RunConfig& c, DataRole role, std::int64_t global_batch,
                                                     Model& model) {
  const bool eval = role == DataRole::evaluation;
  const deck::DataKind kind = eval ? c.eval.kind : c.data.kind;
  const std::string& path = eval ? c.eval.path : c.data.path;
  const DeckLocation& where = eval ? c.eval.where : c.data.where;
  const bool shuffle = !eval && c.data.shuffle;  // evaluation always reads in file order
  if (kind == deck::DataKind::tokens) {
    if (model.data_kind() != DataKind::tokens)
      FT_USER_ERROR() << where.str() << ": model '" << c.model.name << "' trains on images, not tokens";
    data::TokenDatasetOptions d;
    d.seq_len = c.batch.seq_len;
    d.global_batch = global_batch;
    d.packing = c.data.packing;
    d.shuffle = shuffle;
    d.seed = c.seed;
    try {
      return std::make_unique<data::TokenBatchSource>(path, d);
    } catch (const UserError& e) {  // deck.md: data errors name the file and the deck line
      FT_USER_ERROR() << where.str() << ": " << e.what();
    }
  }
  if (kind == deck::DataKind::images) {
    if (model.data_kind() != DataKind::images)
      FT_USER_ERROR() << where.str() << ": model '" << c.model.name << "' trains on tokens, not images";
    // The image shape is the model's (its config() names image_size and num_channels).
    const auto config = model.config();
    const auto size = config.find("image_size");
    const auto channels = config.find("num_channels");
    if (size == config.end())
      FT_USER_ERROR() << where.str() << ": model '" << c.model.name << "' does not report an image_size";
    const ImageDataSection& images = eval ? c.eval.images : c.data.images;
    data::ImageSourceOptions o;
    o.height = o.width = std::stoll(size->second);
    o.channels = channels == config.end() ? 3 : std::stoll(channels->second);
    o.global_batch = global_batch;
    o.shuffle = shuffle;
    o.seed = c.seed;
    o.eval = eval;
    // Evaluation images are held-out draws of the training task: same classes.
    o.classes = c.data.images.classes > 0 ? c.data.images.classes : model.output_size();
    o.samples = images.samples;
    o.noise = c.data.images.noise;
    o.mean = images.mean;
    o.std = images.std;
    try {
      if (images.source == deck::ImageSource::synthetic) {
        return std::make_unique<data::ImageBatchSource>(data::make_synthetic_images(o), o);
      }
      return std::make_unique<data::ImageBatchSource>(data::make_hdf5_images(path, o), o);
    } catch (const UserError& e) {
      FT_USER_ERROR() << where.str() << ": " << e.what();
    }
  }
  FT_USER_ERROR() << where.str() << ": data kind '" << kind << "' is not supported by this ftrain";
}

Trainer::Trainer(const RunConfig& config, Communicator& world, const TrainerOptions& options)
    : state_(std::make_unique<State>(config, world, options)) {}

Trainer::~Trainer() = default;

void Trainer::prepare() {
  State& s = *state_;
  const RunConfig& c = s.config;
  // First: `device cuda` without a usable GPU stops here, naming the cause.
  s.device_choice = choose_device(c.device, c.device_where, real_cuda_probes());
  // Before the first collective of the run: every later one is watched.
  set_collective_timeout(c.collective_timeout_seconds);
  const int ranks_here = s.world.split_node()->size();  // collective: every rank calls it
  // --check --ranks N plans the real run's geometry without its processes.
  const int plan_world = s.options.plan_ranks > 0 ? s.options.plan_ranks : s.world.size();
  s.ranks_per_node = ranks_here;
  if (s.options.plan_ranks > 0) {
    s.ranks_per_node = s.options.plan_ranks_per_node > 0 ? s.options.plan_ranks_per_node : plan_world;
    if (plan_world % s.ranks_per_node != 0)
      FT_USER_ERROR() << "command line: --ranks-per-node " << s.ranks_per_node << " does not divide --ranks "
                      << plan_world;
  }
  try {
    s.model = PluginLoader().create_model(c.model.name, c.model.preset, c.model.overrides);
  } catch (const UserError& e) {
    FT_USER_ERROR() << c.model.where.str() << ": " << with_model_suggestion(e.what(), c.model.name);
  }
  // Everything below needs the model; the checks after it are collected.
  ProblemList problems;
  const bool fsdp_ok = problems.check([&] {
    s.fsdp = resolve_fsdp_options(c, s.device_choice.device);  // the engine allocates and runs there
    resolve_shard_group_size(c, s.fsdp, plan_world, s.ranks_per_node);
  });
  problems.check([&] { resolve_schedule(c); });
  problems.check([&] {
    s.progress_line = decide_progress(std::string(deck::word(c.progress)), process_environment, probe_terminal());
  });
  if (fsdp_ok) problems.check([&] { s.plan = make_plan(*s.model, c, s.fsdp, plan_world, s.ranks_per_node); });

  // A rank bound to n CPUs (mpirun PE=n, srun --cpus-per-task) runs n
  // threads; an unbound one an even share of its node.
  const CpuBinding binding = current_cpu_binding();
  const int cores_per_rank = cores_for_rank(binding, ranks_here);
  s.blas_threads = configure_blas_threads(cores_per_rank);
  {
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
  }
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
  }
  if (c.init.kind == deck::InitKind::hdf5) problems.check([&] {
    std::vector<FlatEntry> parameters;
    for (int u = 0; u < s.model->num_units(); ++u) {
      for (const auto& spec : s.model->unit(u).params()) {
        if (!spec.tied_to.empty()) continue;
        FlatEntry e;
        e.name = spec.name;
        e.shape = spec.shape;
        parameters.push_back(e);
      }
    }
    try {
      ckpt::check_consolidated(c.init.path, parameters);
    } catch (const UserError& e) {
      FT_USER_ERROR() << c.init.where.str() << ": " << e.what();
    }
  });
  problems.check([&] {
    if (c.checkpoint.stop_after > 0 && c.checkpoint.stop_after >= c.max_steps)
      FT_USER_ERROR() << c.checkpoint.where.str() << ": stop_after " << c.checkpoint.stop_after
                      << " must be below max_steps " << c.max_steps;
  });
  if (!c.resume.from.empty()) problems.check([&] {
    const bool automatic = c.resume.automatic;
    if (automatic && c.checkpoint.dir.empty())
      FT_USER_ERROR() << c.resume.where.str() << ": resume auto needs a `checkpoint ... dir PATH` to look in";
    // Rank 0 decides which checkpoint to resume (run() broadcasts it), so
    // ranks that see the file system differently cannot disagree.
    if (s.is_root()) {
      ckpt::ResumePlan& plan = s.resume_plan;
      try {
        plan = automatic ? ckpt::plan_resume_auto(c.checkpoint.dir) : ckpt::plan_resume_path(c.resume.from);
      } catch (const UserError& e) {
        FT_USER_ERROR() << c.resume.where.str() << ": " << e.what();
      }
      // The first candidate's rank-0 file must open (a damaged superblock
      // shows here): resume auto falls back along the lineage, resume PATH
      // stops. A checkpoint at max_steps is a finished run: run() says
      // "nothing left to train" and exits 0.
      while (!plan.candidates.empty()) {
        const std::string& found = plan.candidates.front();
        ckpt::LoadedInfo info;
        try {
          info = ckpt::read_checkpoint_info(found);
        } catch (const UserError& e) {
          if (!plan.fall_back) FT_USER_ERROR() << c.resume.where.str() << ": " << e.what();
          plan.skip_first(e.what());
          continue;
        }
        if (info.seed != c.seed)
          FT_USER_ERROR() << c.resume.where.str() << ": checkpoint " << found << " was written with seed " << info.seed
                          << ", the deck says seed " << c.seed << " (data order depends on it)";
        s.start_step = info.step;
        s.resume_dir = found;
        break;
      }
      if (plan.candidates.empty() && plan.found_any) {
        std::string why;
        for (const auto& note : plan.notes) why += "\n  " + note;
        FT_USER_ERROR() << c.resume.where.str() << ": resume auto: " << c.checkpoint.dir
                        << " holds checkpoints but none on the lineage of `latest` is intact:" << why
                        << "\nremove the directory to start afresh, or resume a checkpoint explicitly";
      }
    }
  });
  // At --check nothing is created; before a real run every output directory
  // exists and takes a write, so a read-only or full location fails now,
  // once, naming the deck line, rather than at the first save.
  problems.check([&] { check_output_locations(output_locations(c), /*create=*/!s.options.check_only); });
  // What the run would read first: the token files' headers (a vocabulary
  // larger than the model's is otherwise found only at run time).
  if (s.options.check_only) {
    for (const DataRole role : {DataRole::training, DataRole::evaluation}) {
      const bool eval = role == DataRole::evaluation;
      const std::string& path = eval ? c.eval.path : c.data.path;
      const deck::DataKind kind = eval ? c.eval.kind : c.data.kind;
      if (kind == deck::DataKind::tokens && !path.empty()) {
        problems.check([&] {
          std::optional<data::TokenFile> file;
          try {
            file.emplace(path);
          } catch (const UserError& e) {  // deck.md: data errors name the file and the deck line
            FT_USER_ERROR() << (eval ? c.eval.where : c.data.where).str() << ": " << e.what();
          }
          check_label_space(c, role, static_cast<std::int64_t>(file->header().vocab_size), *s.model);
          if (!eval) report_example_truncation(c, *file, s.config.warnings);
        });
      }
      // An image file is opened as the run would open it: its datasets, their
      // shapes against the model's and every label are checked (issue 35).
      const ImageDataSection& images = eval ? c.eval.images : c.data.images;
      if (kind == deck::DataKind::images && images.source != deck::ImageSource::synthetic && !path.empty()) {
        problems.check([&] {
          const auto source = make_batch_source(c, role, std::max<std::int64_t>(1, s.plan.global_batch), *s.model);
          check_label_space(c, role, source->label_space(), *s.model);
        });
      }
    }
  }
  problems.throw_if_any(c.warnings);
  if (s.options.check_only) return;
  // One owner per run_dir and checkpoint dir (train/run_dir_lock.hpp): rank 0
  // holds the locks for the run's lifetime; a refusal fails start-up on every
  // rank through the start-up agreement, before anything is written.
  if (s.is_root()) s.directory_locks = lock_run_directories(output_locations(c), &s.config.warnings);

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
  if (c.init.kind == deck::InitKind::safetensors) {
    // Validate names and shapes before any collective, so a bad file is one
    // clear message rather than a hang.
    // A sharded directory opens only the index and each shard's header here.
    std::optional<ckpt::SafetensorsSource> source;
    try {
      source.emplace(c.init.path);
    } catch (const UserError& e) {
      FT_USER_ERROR() << c.init.where.str() << ": " << e.what();
    }
    auto& file = *source;
    for (int u = 0; u < s.model->num_units(); ++u) {
      for (const auto& spec : s.model->unit(u).params()) {
        if (!spec.tied_to.empty()) continue;
        if (!file.contains(spec.name))
          FT_USER_ERROR() << c.init.where.str() << ": " << c.init.path << " has no tensor '" << spec.name
                          << "' (shape " << shape_string(spec.shape) << ")";
        const ckpt::SafetensorsTensorInfo* found = nullptr;
        try {
          found = &file.tensor(spec.name);
        } catch (const UserError& e) {
          FT_USER_ERROR() << c.init.where.str() << ": " << e.what();
        }
        const auto& info = *found;
        if (info.shape != spec.shape)
          FT_USER_ERROR() << c.init.where.str() << ": " << c.init.path << ": tensor '" << spec.name << "' has shape "
                          << shape_string(info.shape) << ", the model expects " << shape_string(spec.shape);
      }
    }
  }
}

namespace {
// Which host stream mode runs and what chose it (deck `host_streams`, else
// FTRAIN_HOST_STREAM, else the default), for the run header.
std::string describe_host_streams(const RunConfig& c) {
  std::string mode, why;
  if (!c.host_streams_where.file.empty()) {
    mode = std::string(deck::word(c.host_streams));
    why = c.host_streams_where.str() + ": host_streams " + mode;
    const char* env = std::getenv("FTRAIN_HOST_STREAM");
    if (env != nullptr && *env != '\0' && std::string(env) != mode)
      why += std::string("; FTRAIN_HOST_STREAM=") + env + " is overridden by the deck";
  } else {
    const bool async = ExecutionOptions::from_environment().asynchronous;
    mode = async ? "async" : "sync";
    why = std::getenv("FTRAIN_HOST_STREAM") != nullptr && *std::getenv("FTRAIN_HOST_STREAM") != '\0'
              ? std::string("FTRAIN_HOST_STREAM=") + std::getenv("FTRAIN_HOST_STREAM")
              : "default; `host_streams async` or FTRAIN_HOST_STREAM=async changes it";
  }
  const char* what = mode == "async" ? "compute and communication streams on worker threads, events are real "
                                       "completion points"
                                     : "ops run inline on the rank's thread";
  return mode + " (" + why + "): " + what;
}
}  // namespace

int Trainer::run() {
  State& s = *state_;
  const RunConfig& c = s.config;
  const int rank = s.world.rank();
  const int world = s.world.size();

  s.peak.flops_per_second = s.world.all_reduce_max(s.peak.flops_per_second);  // rank 0's; the others hold 0
  if (s.is_root()) {
    std::ostringstream h;
    h << "ftrain " << FTRAIN_VERSION_STRING << " | " << s.plan.world_size << " rank(s), " << s.ranks_per_node
      << " per node" << (s.options.plan_ranks > 0 ? " (planned with --ranks, not started)" : "") << " | device: " << device_header(s.device_choice, s.fsdp.attention_backend, s.blas_threads) << " | peak " << s.peak.flops_per_second / 1e9 << " GFLOP/s per rank: "
      << s.peak.description << "\n";
    h << "host GEMM: " << host::gemm::describe() << "\n";
    h << "host threads: " << s.blas_threads << " per rank, " << s.cpu_binding_text << "\n";
    if (!s.cpu_binding_warning.empty()) h << "warning: " << s.cpu_binding_warning << "\n";
    h << "host kernels: built for " << host_isa::describe() << " (FTRAIN_HOST_ISA: every choice computes the same bits)\n";
    // What the results depend on (share/doc/reproducibility.md): the GEMM
    // libraries pick their kernels for the CPU, and those round differently.
    h << "reproducibility: bit for bit when rerun with this build and these GEMM kernels; another CPU's kernels "
         "differ in the last bits (share/doc/reproducibility.md)\n";
    // Which communicator moves the buffers, never left implicit (device_comm).
    if (s.device_choice.device == Device::host)
      h << "comm: MPI on host buffers [device_comm " << c.device_comm << ": no effect on the host backend]";
    else if (s.fsdp.device_comm == DeviceComm::mpi)
      h << "comm: device buffers staged through host memory over MPI [device_comm mpi]";
    else
      h << "comm: NCCL on device buffers [device_comm nccl]";
    h << " | collective_timeout "
      << describe_timeout(c.collective_timeout_seconds) << "\n";
    h << "host streams: " << describe_host_streams(c) << "\n";
    h << "deck: " << c.deck_path << "\n";
    for (const auto& w : c.warnings) h << "warning: " << w << "\n";
    if (!s.options.check_only) {
      h << "progress line: " << (s.progress_line.show ? "on" : "off") << " (" << s.progress_line.reason
        << "; `progress auto|on|off` or FTRAIN_PROGRESS changes it)\n";
      h << stop_instructions(process_environment, !c.checkpoint.dir.empty()) << "\n";
    }
    h << "model: " << c.model.name << " (" << (c.model.preset.empty() ? "default preset" : c.model.preset) << ")";
    for (const auto& [k, v] : s.model->config()) h << " " << k << "=" << v;
    h << "\n";
    // Effective values, defaults included: what the deck left out is where
    // ftrain and Hugging Face differ (beta2, clipping, schedule; deck.md).
    h << describe_settings(c, s.fsdp, shard_group_size_for(s.fsdp, s.plan.world_size, s.ranks_per_node));
    if (c.lora.enabled) {
      const auto& l = s.fsdp.lora;
      h << "lora: rank " << l.rank << " alpha " << l.alpha << " (scale " << l.scale() << (l.rslora ? ", rslora" : "")
        << ") dropout " << l.dropout << " targets " << l.targets_text() << " init "
        << c.lora.init << "; trainable parameters "
        << s.plan.trainable_parameters << " of " << s.plan.parameters + s.plan.trainable_parameters
        << " (base frozen: no gradients, no optimizer state)\n";
    }
    h << format_plan(s.plan);
    // A planned cluster's nodes are not this one: only its own rules apply.
    const double node_bytes = s.options.plan_ranks > 0 ? 0.0 : node_memory_bytes();
    h << host_backend_warning(s.plan, c.precision, HostFacts{node_bytes, s.ranks_per_node, s.peak.flops_per_second});
    if (s.options.device_memory_bytes > 0)
      h << plan_fit_report(*s.model, c, s.fsdp, s.plan, s.ranks_per_node, s.options.device_memory_bytes);
    h << "resolved deck:\n";
    for (const auto& line : c.resolved_lines) h << "  " << line << "\n";
    s.say(h.str());
  }
  // A finished run started again (a requeue after the last step, a rerun of
  // the same job script) is not an error: there is simply nothing to do.
  // Rank 0 alone planned the resume (prepare()); every rank learns its step.
  const auto resumed_at = static_cast<std::int64_t>(s.world.all_reduce_max(static_cast<double>(s.start_step)));
  if (resumed_at >= c.max_steps) {
    s.say("nothing left to train: " + s.resume_dir + " is at step " + std::to_string(resumed_at) +
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

  std::error_code ec;  // run_dir exists: prepare() created it and wrote in it
  if (c.per_rank_logs) {
    s.rank_log_path = c.run_dir + "/rank_" + std::to_string(rank) + ".log";
    s.rank_log.open(s.rank_log_path);
    if (!s.rank_log) FT_USER_ERROR() << "cannot write " << s.rank_log_path << ": " << std::strerror(errno);
  }
  // Per-rank memory before and after loading (seed 001 prints the same).
  auto gather_memory = [&](const char* phase) {
    std::vector<double> mine{to_mib(current_rss_bytes()), to_mib(peak_rss_bytes())};
    std::ostringstream line;
    line << "memory " << phase << ":";
    for (int r = 0; r < world; ++r) {
      Tensor t = Tensor::zeros({2}, DType::f32);
      if (r == rank) {
        t.data_as<float>()[0] = static_cast<float>(mine[0]);
        t.data_as<float>()[1] = static_cast<float>(mine[1]);
      }
      s.world.all_reduce_sum(t).wait();
      char buf[96];
      std::snprintf(buf, sizeof buf, " rank %d %.0f MiB (peak %.0f)", r, t.data_as<float>()[0], t.data_as<float>()[1]);
      line << buf;
    }
    s.say(line.str() + "\n");
    // A GPU run: every rank's device memory too (train/device_memory.hpp).
    if (s.device_choice.device == Device::cuda)
      s.say(format_device_memory(phase, gather_device_memory(s.world, this_rank_device_memory())));
  };
  // A GPU run: each rank binds to its GPU (node-local rank, CUDA_VISIBLE_DEVICES;
  // comm/gpu_assignment.hpp) before the engine makes its context there. A
  // device backend without devices of its own to hand out (the test-only
  // simulated device) registers no communicator backend and binds nothing.
  if (s.fsdp.device != Device::host && find_device_comm_backend(s.fsdp.device) != nullptr)
    bind_local_gpu(s.world, s.fsdp.device_comm, s.fsdp.device);
  gather_memory("before load");

  s.engine = std::make_unique<FsdpEngine>(*s.model, s.world, s.fsdp);
  // Resuming overwrites every master shard from the checkpoint: reading the
  // initial weights first (minutes for a 70B safetensors set, on every
  // requeue) would be wasted.
  // Every rank follows rank 0's resume plan (prepare()).
  if (!c.resume.from.empty())
    s.resume_plan = ckpt::ResumePlan::from_json(ckpt::broadcast_text(s.world, s.resume_plan.to_json(), 0));
  const bool resuming = !s.resume_plan.candidates.empty();
  const bool sync_from_root = c.fsdp.sync_module_states && c.init.kind != deck::InitKind::hdf5 && !resuming;
  // Under LoRA a checkpoint holds the adapters only: the frozen base is
  // initialised as the deck says, then compared with the checkpoint's.
  if (resuming && !s.engine->lora()) {
    // nothing: load_resume below fills master, exp_avg and exp_avg_sq
  } else if (c.init.kind == deck::InitKind::safetensors) {
    // Each rank reads only its shard's slices (mmap: untouched pages cost no
    // memory); with sync_module_states only rank 0 reads and scatters.
    std::unique_ptr<ckpt::SafetensorsSource> file;
    if (!sync_from_root || rank == 0) file = std::make_unique<ckpt::SafetensorsSource>(c.init.path);
    ParameterSource read = [&](const FlatEntry& e, std::int64_t first, std::int64_t count, float* dst) {
      file->read_into(e.name, first, count, dst);
    };
    if (sync_from_root) s.engine->init_from_root(read); else s.engine->init_from(read);
  } else if (c.init.kind == deck::InitKind::hdf5) {
    ckpt::load_consolidated(*s.engine, c.init.path);  // parallel HDF5: every rank reads its own slices
  } else {
    const std::uint64_t seed = c.seed;
    const double perturb = c.init.test_perturb_by_rank;  // test only (deck.md: init)
    ParameterSource random = [seed, perturb, rank](const FlatEntry& e, std::int64_t first, std::int64_t count,
                                                   float* dst) {
      random_init_values(seed, e, first, count, dst);
      if (perturb > 0) perturb_init_by_rank(seed, rank, perturb, e, first, count, dst);
    };
    if (perturb > 0) {
      std::ostringstream note;
      note << "init: test_perturb_by_rank " << perturb
           << ": rank r adds r x that x normal(0, 1) to what it initialises (test only)\n";
      s.say(note.str());
    }
    if (sync_from_root) s.engine->init_from_root(random); else s.engine->init_from(random);
  }
  if (sync_from_root) s.say("sync_module_states: rank 0 initialised the model and scattered the shards\n");
  if (!c.lora.adapter_path.empty() && !resuming) {
    // Each rank reads its own adapter slices; a refusal (config or tensors
    // that do not fit) is the same on every rank, decided from the files.
    ckpt::load_adapter(*s.engine, c.lora.adapter_path);
    s.say("init adapter: LoRA adapters from " + c.lora.adapter_path + "\n");
  }
  if (!c.resume.from.empty()) {
    // A candidate that fails to load on any rank is skipped by all of them
    // (resume auto) or stops the run (resume PATH).
    if (resuming) {
      const auto loaded = ckpt::load_resume(*s.engine, s.world, s.resume_plan);
      if (loaded.lora) {
        const std::uint64_t base = s.engine->base_checksum();
        if (base != loaded.base_checksum) {
          char hex[2][32];
          std::snprintf(hex[0], sizeof hex[0], "%016llx", static_cast<unsigned long long>(loaded.base_checksum));
          std::snprintf(hex[1], sizeof hex[1], "%016llx", static_cast<unsigned long long>(base));
          FT_USER_ERROR() << c.resume.where.str() << ": LoRA checkpoint " << loaded.directory
                          << " was trained on a base model (" << loaded.base_init << ", checksum " << hex[0]
                          << ") that differs from the one this deck loads (" << base_init_text(c) << ", checksum "
                          << hex[1] << "); the adapters only fit their base: restore it or start afresh";
        }
      }
      if (loaded.seed != c.seed)
        FT_USER_ERROR() << c.resume.where.str() << ": checkpoint " << loaded.directory << " was written with seed "
                        << loaded.seed << ", the deck says seed " << c.seed << " (data order depends on it)";
      s.resume_dir = loaded.directory;
      s.start_step = loaded.step;
      s.parent_checkpoint = loaded.directory;
      // Training time and global batch of the run that wrote it (rank 0 reads
      // its manifest; every rank saves elapsed_s in its next checkpoint).
      double prior[3] = {0, 0, 0};
      std::string written_precision;  // rank 0's to say
      if (s.is_root()) {
        const auto info = ckpt::read_checkpoint_info(loaded.directory);
        written_precision = info.precision;
        if (const auto it = info.scalars.find("elapsed_s"); it != info.scalars.end()) prior[0] = it->second;
        if (const auto it = info.scalars.find("global_batch"); it != info.scalars.end()) prior[1] = it->second;
        prior[2] = info.world_size;
      }
      s.prior_elapsed = s.world.all_reduce_max(prior[0]);
      s.prior_global_batch = static_cast<std::int64_t>(s.world.all_reduce_max(prior[1]));
      s.prior_world = static_cast<int>(s.world.all_reduce_max(prior[2]));
      for (const auto& note : s.resume_plan.notes) s.say("resume " + c.resume.from + ": " + note + "\n");
      std::ostringstream m;
      m << "resumed from " << s.resume_dir << " at step " << loaded.step << " (written by " << loaded.world_size
        << " rank(s), " << loaded.strategy << ", shard group " << loaded.shard_group_size << ")"
        << (loaded.resharded ? "; resharded to shard group " + std::to_string(s.engine->shard_comm().size()) : "")
        << "\n";
      if (!loaded.fp8_note.empty()) m << "resume: " << loaded.fp8_note << "\n";
      if (!written_precision.empty() && written_precision != deck::word(c.precision))
        m << "resume: the checkpoint was written under precision " << written_precision << ", this run uses "
          << c.precision << ": the master weights and the optimizer state stay f32 and are loaded unchanged; from step "
          << s.start_step + 1 << " the forward and backward passes compute in " << c.precision
          << ", so the loss curve may shift slightly at the resume\n";
      if (s.prior_global_batch > 0 && s.prior_global_batch != s.plan.global_batch)
        m << "resume: the global batch changes from " << s.prior_global_batch << " samples per step (" << s.prior_world
          << " rank(s)) to " << s.plan.global_batch << " (" << world << " rank(s) x micro " << c.batch.micro_batch
          << " x accumulate " << c.batch.grad_accum << "): step " << s.start_step + 1
          << " starts at another sample than the old run's would have, so some samples repeat or are skipped; keep "
             "micro x accumulate x ranks equal to continue the same data order\n";
      s.say(m.str());
    } else {
      for (const auto& note : s.resume_plan.notes) s.say("resume " + c.resume.from + ": " + note + "\n");
      s.say("resume " + c.resume.from + ": no complete checkpoint found; starting from step 0\n");
    }
  }
  if (s.is_root()) {
    s.metrics_path = c.run_dir + "/metrics.jsonl";
    const std::string& metrics_path = s.metrics_path;
    // A resumed run continues the curve: rows past the checkpoint's step (the
    // interrupted run's tail) are dropped so every step appears once.
    std::string kept;
    if (!s.resume_dir.empty()) {
      std::ifstream old(metrics_path);
      std::string line;
      while (std::getline(old, line)) {
        const auto j = nlohmann::json::parse(line, nullptr, false);
        if (!j.is_discarded() && j.contains("step") && j["step"].get<std::int64_t>() <= s.start_step) kept += line + "\n";
      }
    }
    if (!s.resume_dir.empty()) {
      // Where this run continued (plot_metrics.py marks it).
      nlohmann::json j;
      j["step"] = s.start_step;
      j["resumed_from"] = s.resume_dir;
      j["world_size"] = world;
      j["global_batch"] = s.plan.global_batch;
      kept += j.dump() + "\n";
    }
    s.metrics.open(metrics_path, std::ios::trunc);
    if (!s.metrics) FT_USER_ERROR() << "cannot write " << metrics_path;
    s.write(s.metrics, metrics_path, kept);
  }

  gather_memory("after load");
  // LoRA: the base must leave training bit-identical (frozen: no gradient,
  // no optimizer state). Checked at the end against this checksum, which
  // checkpoints also record so a resume can refuse a changed base.
  if (s.engine->lora()) {
    s.base_checksum = s.engine->base_checksum();
    char hex[32];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(s.base_checksum));
    s.say(std::string("lora: frozen base checksum ") + hex + ", " + std::to_string(s.engine->trainable_parameters()) +
          " trainable adapter parameters\n");
  }

  // Training time of this run (loading excluded); set again just before the loop.
  auto start = Clock::now();
  // Sharded checkpoints, blocking or (`async on`) written in the background;
  // every call is collective (ckpt/checkpoint_writer.hpp). report() prints
  // what a call did and returns its error, which every rank got: the run
  // then stops cleanly with it.
  std::optional<ckpt::CheckpointWriter> checkpoints;
  if (!c.checkpoint.dir.empty())
    checkpoints.emplace(*s.engine, s.world,
                        ckpt::CheckpointWriter::Options{c.checkpoint.dir, static_cast<int>(c.checkpoint.keep),
                                                        c.checkpoint.async});
  auto report = [&](const ckpt::CheckpointWriter::Outcome& outcome) {
    for (const auto& line : outcome.lines) s.say(line);
    return outcome.error;
  };
  // Returns why it refused, having saved nothing, when a master weight is
  // not finite (committing would make that state `latest` and `keep` would
  // prune the last good checkpoint for it), or why the save failed; empty
  // once saved (or, asynchronously, started). `last`: nothing follows.
  auto save_checkpoint = [&](std::int64_t done, double loss, double lr, double norm, bool last) -> std::string {
    const std::string poisoned = s.engine->first_non_finite(FsdpEngine::ShardState::master);
    if (!poisoned.empty()) {
      const std::string pending = report(checkpoints->finish());  // an earlier, finite save in flight
      return "step " + std::to_string(done) + ": a master weight is not finite (first: " + poisoned +
             "); no checkpoint was written or pruned. " + divergence_advice(c, done) +
             (pending.empty() ? "" : " Also: " + pending);
    }
    if (!std::isfinite(loss)) {  // finite gradients, yet the loss sum overflowed (divergence is the norm's flag)
      const std::string pending = report(checkpoints->finish());
      return "step " + std::to_string(done) + ": the loss is " + std::to_string(loss) +
             "; no checkpoint was written or pruned. " + divergence_advice(c, done) +
             (pending.empty() ? "" : " Also: " + pending);
    }
    const auto t0 = Clock::now();
    ckpt::SaveInfo info;
    info.step = done;
    info.seed = c.seed;
    info.strategy = std::string(deck::word(c.fsdp.strategy));
    info.base_checksum = s.base_checksum;
    info.base_init = base_init_text(c);
    info.deck_text = joined_deck(c.resolved_lines);
    info.scalars = {{"loss", loss},
                    {"lr", lr},
                    {"grad_norm", norm},
                    {"elapsed_s", s.prior_elapsed + std::chrono::duration<double>(t0 - start).count()},
                    {"global_batch", static_cast<double>(s.plan.global_batch)}};
    info.consolidated = c.checkpoint.consolidated;
    info.model_name = c.model.name;
    info.model_config = s.model->config();
    info.parent_directory = s.parent_checkpoint;
    const std::string error = report(checkpoints->save(std::move(info), last));
    if (!checkpoints->last_committed().empty()) s.parent_checkpoint = checkpoints->last_committed();
    return error;
  };

  const std::int64_t micro = c.batch.micro_batch;
  const std::int64_t accum = c.batch.grad_accum;

  auto evaluate = [&](std::int64_t step) {
    const std::int64_t n = s.eval_data->eval_size();
    const std::int64_t begin = n * rank / world, end = n * (rank + 1) / world;
    std::int64_t tokens = 0;
    // forward_only gathers parameters collectively, so every rank runs the
    // same number of batches; a rank past its range runs a batch whose
    // targets are all ignored (zero loss, zero tokens).
    const std::int64_t most_windows = (n + world - 1) / world;
    const std::int64_t batches = (most_windows + micro - 1) / micro;
    for (std::int64_t i = 0; i < batches; ++i) {
      const std::int64_t first = begin + i * micro;
      const std::int64_t count = std::clamp<std::int64_t>(end - first, 0, micro);
      Batch b;
      s.eval_data->fill_eval(first, count, micro, b);
      tokens += count_targets(b.targets);
      s.engine->forward_only(b);  // the loss sum stays on the device
    }
    const double total = s.world.all_reduce_sum(s.engine->take_eval_loss());
    const std::int64_t total_tokens = s.world.all_reduce_sum(tokens);
    const double mean = total / static_cast<double>(std::max<std::int64_t>(1, total_tokens));
    char buf[128];
    std::snprintf(buf, sizeof buf, "eval step %lld | eval_loss %.9g | %lld %s\n", static_cast<long long>(step), mean,
                  static_cast<long long>(total_tokens),
                  s.model->data_kind() == DataKind::images ? "images" : "tokens");
    s.say(buf);
    if (s.is_root()) {
      nlohmann::json j;
      j["step"] = step;
      j["eval_loss"] = mean;
      j["eval_tokens"] = total_tokens;
      s.write(s.metrics, s.metrics_path, j.dump() + "\n");
    }
  };

  std::vector<Batch> micro_batches(static_cast<std::size_t>(accum));
  // One step's forward and backward over its micro-batches (zeroed
  // gradients, a new loss window); returns the global target-token count.
  // Also replays a diverged step to name its first non-finite gradient.
  const auto run_micro_steps = [&](std::int64_t step) {
    s.engine->zero_grad();
    std::int64_t local_targets = 0;
    for (std::int64_t a = 0; a < accum; ++a) {
      Batch& b = micro_batches[static_cast<std::size_t>(a)];
      s.train_data->fill_batch(step, (rank * accum + a) * micro, micro, b);
      b.first_sample = step * s.plan.global_batch + (rank * accum + a) * micro;  // LoRA dropout's key
      local_targets += count_targets(b.targets);
    }
    const std::int64_t global_targets = s.world.all_reduce_sum(local_targets);
    const float loss_scale = global_targets > 0 ? 1.0f / static_cast<float>(global_targets) : 0.0f;
    // fsdp no_sync on: only the last micro-step reduces the gradients.
    for (std::size_t a = 0; a < micro_batches.size(); ++a)
      s.engine->forward_backward(micro_batches[a], loss_scale, /*sync_gradients=*/a + 1 == micro_batches.size());
    return global_targets;
  };
  start = Clock::now();
  double window_seconds = 0;
  std::int64_t window_steps = 0;
  if (s.eval_data && c.eval.every > 0 && s.start_step == 0) evaluate(0);
  for (std::int64_t step = s.start_step; step < c.max_steps; ++step) {
    const auto t0 = Clock::now();
    const double lr = optim::learning_rate(schedule_of(c), c.optimizer.lr, step, c.max_steps);
    const std::int64_t global_targets = run_micro_steps(step);
    // Masked instruction data can leave a step with nothing to learn (every
    // response past seq_len): it would log loss 0 and look like training.
    // The count is all-reduced, so every rank stops together, before the update.
    if (global_targets == 0 && s.model->data_kind() == DataKind::tokens && !c.data.allow_untrained_steps) {
      std::string message =
          "step " + std::to_string(step + 1) + " has no trained target token: every target of its " +
          std::to_string(s.plan.global_batch) + " samples is masked (prompt or padding) in " + c.data.path +
          " (" + c.data.where.str() + "). Responses cut off by seq_len " + std::to_string(c.batch.seq_len) +
          " train nothing: `ftrain --check` counts them; raise seq_len, use packing on, or add "
          "`allow_untrained_steps on` to the data line to run such steps";
      if (checkpoints) {  // an earlier save in flight is finished first, as for a diverged step
        const std::string pending = report(checkpoints->finish());
        if (!pending.empty()) message += " Also: " + pending;
      }
      return s.stop_with_error(message);
    }
    // The loss stays on the device (share/doc/execution-model.md, "What the
    // host reads"): it is read and all-reduced only when something needs it
    // (the log line, a checkpoint, a diverged step), once per step at most;
    // every rank reads at the same steps, so the all-reduce is collective.
    std::optional<double> loss_read;
    const auto step_loss = [&] {
      if (!loss_read)
        loss_read = s.world.all_reduce_sum(s.engine->take_train_loss()) /
                    static_cast<double>(std::max<std::int64_t>(1, global_targets));
      return *loss_read;
    };
    // Clipping and the update read nothing on the host: the norm, the clip
    // factor and the diverged flag are device scalars, and a diverged step
    // (non-finite norm; a non-finite loss gives non-finite gradients) and
    // every step after it apply no update (AdamW is skipped on the device).
    AdamWHyper hyper;
    hyper.lr = static_cast<float>(lr);
    hyper.beta1 = static_cast<float>(c.optimizer.beta1);
    hyper.beta2 = static_cast<float>(c.optimizer.beta2);
    hyper.eps = static_cast<float>(c.optimizer.eps);
    hyper.weight_decay = static_cast<float>(c.optimizer.weight_decay);
    s.engine->clip_and_step(hyper, c.clip_grad_norm, step + 1);
    // The norm and the flag are read once, when the log line, an evaluation,
    // a checkpoint or a stop needs them: before anything is logged, evaluated
    // or saved, so nothing after a diverged step is ever written.
    std::optional<FsdpEngine::StepHealth> health;
    const auto read_health = [&] {
      if (!health) health = s.engine->read_step_health();
      return *health;
    };
    // The stop message when a step since the last read diverged, else empty.
    // The norm is all-reduced, so every rank sees the same flag: the stop is
    // collective and clean. The message is today's: the first diverged step,
    // its norm and loss, and its first non-finite gradient; when that step is
    // not this one, it is run again to find them (every update since was
    // skipped, so the weights are the ones it saw).
    const auto divergence = [&]() -> std::string {
      const FsdpEngine::StepHealth h = read_health();
      if (h.first_diverged_step == 0) return "";
      double norm = h.grad_norm, loss = 0;
      if (h.first_diverged_step == step + 1) {
        loss = step_loss();
      } else {
        const std::int64_t targets = run_micro_steps(h.first_diverged_step - 1);
        loss = s.world.all_reduce_sum(s.engine->take_train_loss()) /
               static_cast<double>(std::max<std::int64_t>(1, targets));
        norm = s.engine->grad_norm();
      }
      const std::string where = s.engine->first_non_finite(FsdpEngine::ShardState::gradient);
      std::ostringstream m;
      m << "step " << h.first_diverged_step << " diverged: ";
      m << "the gradient norm is " << norm << " (loss " << loss << ")";
      m << "; first non-finite gradient (backward order): " << (where.empty() ? "none (the loss itself)" : where)
        << ". The update was not applied and no checkpoint was written or pruned";
      if (!c.checkpoint.dir.empty()) m << " (`resume auto` continues from the newest one in " << c.checkpoint.dir << ")";
      m << ". " << divergence_advice(c, h.first_diverged_step);
      if (checkpoints) {  // an earlier, finite save in flight is finished first
        const std::string pending = report(checkpoints->finish());
        if (!pending.empty()) m << " Also: " << pending;
      }
      return m.str();
    };

    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    window_seconds += dt;
    ++window_steps;
    const std::int64_t done = step + 1;
    if (done % c.log_every == 0 || done == c.max_steps) {
      if (const std::string diverged = divergence(); !diverged.empty()) return s.stop_with_error(diverged);
      const double norm = read_health().grad_norm;
      const double loss = step_loss();
      // Finite gradients but a non-finite loss (a loss sum beyond f32 range):
      // the update was applied (it is finite); stop before logging or saving it.
      if (!std::isfinite(loss))
        return s.stop_with_error("step " + std::to_string(done) + ": the loss is " + std::to_string(loss) +
                                 " with a finite gradient norm " + std::to_string(norm) +
                                 "; no checkpoint was written. " + divergence_advice(c, done));
      const double step_time = window_seconds / static_cast<double>(window_steps);
      const double tokens_per_s = static_cast<double>(s.plan.tokens_per_step) / step_time;
      const double achieved_per_rank = s.plan.flops_per_step / step_time / world;
      const std::optional<double> mfu = model_flops_utilisation(achieved_per_rank, s.peak.flops_per_second);
      if (!mfu && !s.peak_disproved) {
        s.peak_disproved = true;
        std::ostringstream w;
        w << "warning: this run reaches " << achieved_per_rank / 1e9 << " GFLOP/s per rank, more than the stated peak "
          << s.peak.flops_per_second / 1e9 << " (" << s.peak.description
          << "): the peak is wrong, so MFU is shown as n/a; state the right one with peak_tflops or FTRAIN_PEAK_TFLOPS\n";
        s.say(w.str());
      }
      char mfu_text[16] = "n/a";
      if (mfu) std::snprintf(mfu_text, sizeof mfu_text, "%.1f%%", 100.0 * *mfu);
      const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      const double eta = elapsed / static_cast<double>(done - s.start_step) * static_cast<double>(c.max_steps - done);
      // Peak resident memory of every rank (seed 001 reports it per rank).
      Tensor peaks = Tensor::zeros({world}, DType::f32);
      peaks.data_as<float>()[rank] = static_cast<float>(to_mib(peak_rss_bytes()));
      s.world.all_reduce_sum(peaks).wait();
      const std::vector<float> peak_per_rank = to_float_vector(peaks);
      const double peak_mib = *std::max_element(peak_per_rank.begin(), peak_per_rank.end());
      // Device memory per rank on a GPU run (host runs: resident memory only).
      std::vector<DeviceMemorySample> device_memory;
      if (s.device_choice.device == Device::cuda)
        device_memory = gather_device_memory(s.world, this_rank_device_memory());
      const bool images = s.model->data_kind() == DataKind::images;
      const double samples_per_s = static_cast<double>(s.plan.global_batch) / step_time;
      // Communication time on the stream and the part compute waited for,
      // averaged over ranks (share/doc/performance.md: overlap).
      const double steps_in_window = static_cast<double>(window_steps);
      const double comm_per_step = s.world.all_reduce_sum(s.engine->comm_seconds()) / world / steps_in_window;
      const double exposed_per_step =
          s.world.all_reduce_sum(s.engine->comm_exposed_seconds()) / world / steps_in_window;
      s.engine->reset_comm_timers();
      // What the FSDP features did (share/doc/fsdp.md "Counters"): every
      // rank runs the same schedule, the max over ranks shows any that did not.
      const FsdpCounters& counted = s.engine->counters();
      const auto per_step_max = [&](std::int64_t n) {
        return s.world.all_reduce_max(static_cast<double>(n)) / steps_in_window;
      };
      const double recomputed_per_step = per_step_max(counted.recomputed_units);
      const double forward_prefetches_per_step = per_step_max(counted.forward_prefetch_gathers);
      const double backward_prefetches_per_step = per_step_max(counted.backward_prefetch_gathers);
      const auto gathered_high_water =
          static_cast<std::int64_t>(s.world.all_reduce_max(static_cast<double>(counted.gathered_units_high_water)));
      // Bytes rank 0 received (every rank gathers the same units; the shard
      // group's ranks receive the same amount).
      const double all_gather_bytes_per_step = static_cast<double>(counted.all_gather_bytes) / steps_in_window;
      const double all_gather_fp8_weight_bytes_per_step =
          static_cast<double>(counted.all_gather_fp8_weight_bytes) / steps_in_window;
      // Asynchronous streams: gathered units alive on the device, released
      // ones awaiting their stream-ordered free included (limit_all_gathers).
      const auto in_flight_high_water = static_cast<std::int64_t>(
          s.world.all_reduce_max(static_cast<double>(counted.gathered_in_flight_high_water)));
      s.engine->reset_counters();
      // The loss is a mean over trained targets only: the count says what it
      // averaged (a masked prompt is not trained).
      char trained_text[48] = "";
      if (!images)
        std::snprintf(trained_text, sizeof trained_text, " (%lld trained tok)", static_cast<long long>(global_targets));
      char buf[360];
      std::snprintf(buf, sizeof buf,
                    "step %lld/%lld | loss %.6f%s | lr %.3e | grad_norm %.4f | %.0f %s | MFU %s | mem %.0f MiB | "
                    "ETA %s\n",
                    static_cast<long long>(done), static_cast<long long>(c.max_steps), loss, trained_text, lr, norm,
                    images ? samples_per_s : tokens_per_s, images ? "img/s" : "tok/s", mfu_text, peak_mib,
                    format_duration(eta).c_str());
      s.say(buf);
      if (s.is_root()) {
        nlohmann::json j;
        j["step"] = done;
        j["loss"] = loss;
        j["lr"] = lr;
        j["grad_norm"] = norm;
        j["trainable_parameters"] = s.engine->trainable_parameters();  // the adapters under LoRA
        j["samples"] = s.plan.global_batch * done;
        j["samples_per_s"] = samples_per_s;
        if (!images) {
          j["tokens"] = s.plan.tokens_per_step * done;
          j["tokens_per_s"] = tokens_per_s;
          j["trained_tokens"] = global_targets;  // this step's unmasked targets, all ranks
        }
        j["step_time_s"] = step_time;
        j["mfu"] = mfu ? nlohmann::json(*mfu) : nlohmann::json(nullptr);  // null: the stated peak is wrong
        j["peak_rss_mib_max_rank"] = peak_mib;
        j["peak_rss_mib_per_rank"] = peak_per_rank;
        if (!device_memory.empty()) add_device_memory_metrics(j, device_memory);
        j["elapsed_s"] = s.prior_elapsed + elapsed;  // continues across resumes
        j["comm_s_per_step"] = comm_per_step;
        j["comm_exposed_s_per_step"] = exposed_per_step;
        j["recomputed_units_per_step"] = recomputed_per_step;
        j["forward_prefetch_gathers_per_step"] = forward_prefetches_per_step;
        j["backward_prefetch_gathers_per_step"] = backward_prefetches_per_step;
        j["gathered_units_high_water"] = gathered_high_water;
        j["all_gather_bytes_per_step"] = all_gather_bytes_per_step;
        if (s.fsdp.fp8) j["all_gather_fp8_weight_bytes_per_step"] = all_gather_fp8_weight_bytes_per_step;
        j["gathered_in_flight_high_water"] = in_flight_high_water;
        s.write(s.metrics, s.metrics_path, j.dump() + "\n");
      }
      window_seconds = 0;
      window_steps = 0;
    }
    if (s.eval_data && c.eval.every > 0 && done % c.eval.every == 0) {
      if (const std::string diverged = divergence(); !diverged.empty()) return s.stop_with_error(diverged);
      evaluate(done);
    }
    if (done % c.log_every != 0 && done != c.max_steps) {
      const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      s.progress(done, c.max_steps,
                 elapsed / static_cast<double>(done - s.start_step) * static_cast<double>(c.max_steps - done));
    }

    if (checkpoints) {  // commits a background save once every rank has written its file
      const std::string error = report(checkpoints->poll(done));
      if (!error.empty()) return s.stop_with_error(error);
    }
    // Every rank must take the same branch: one all-reduce of the signal
    // number (the highest, when ranks received different ones).
    const int signalled = static_cast<int>(s.world.all_reduce_max(static_cast<double>(g_stop_signal)));
    const bool stopping = signalled > 0 || done == c.checkpoint.stop_after;
    const bool has_dir = !c.checkpoint.dir.empty();
    const bool saving =
        has_dir && (stopping || (c.checkpoint.every > 0 && done % c.checkpoint.every == 0) || done == c.max_steps);
    if (saving || stopping) {  // a checkpoint is never committed, nor a run stopped quietly, after a diverged step
      if (const std::string diverged = divergence(); !diverged.empty()) return s.stop_with_error(diverged);
    }
    // A stop signal while a background save is in flight: commit that one and
    // stop. Writing another checkpoint after it would double the time the
    // stop takes, and a launcher's grace before SIGKILL is seconds (issue
    // 35); the steps since are trained again after `resume auto`.
    if (signalled > 0 && checkpoints && checkpoints->in_flight() && done < c.max_steps) {
      const std::string pending = report(checkpoints->finish());
      if (!pending.empty()) return s.stop_with_error(pending);
      s.say("stop signal received (" + signal_name(signalled) + ") while " + checkpoints->last_committed() +
            " was being written: committed it and stopped after step " + std::to_string(done) +
            " (the steps after it are trained again); resume with `resume auto`\n");
      return s.finish(0);
    }
    // A stop signal that arrives while a save is being written (SIGTERM at
    // preemption, seconds before SIGKILL; issue 35) stops the run at the
    // newest committed state: nothing more is trained or written, so the
    // stop takes no longer than the save in flight. Asynchronous: the
    // previous save, still in flight at this save's step, is finished first
    // and the signal looked at again before a new write is started.
    auto stop_after_save = [&](int signo, const std::string& committed) {
      s.say("stop signal received (" + signal_name(signo) + ") while " + committed +
            " was being written: committed it and stopped after step " + std::to_string(done) +
            (committed == ckpt::step_directory(c.checkpoint.dir, done) ? "" : " (the steps after it are trained again)") +
            "; resume with `resume auto`\n");
      return s.finish(0);
    };
    if (saving && !stopping && done < c.max_steps && checkpoints->in_flight()) {
      const std::string pending = report(checkpoints->finish());
      if (!pending.empty()) return s.stop_with_error(pending);
      const int late = static_cast<int>(s.world.all_reduce_max(static_cast<double>(g_stop_signal)));
      if (late > 0) return stop_after_save(late, checkpoints->last_committed());
    }
    if (saving) {
      const std::string refused =
          save_checkpoint(done, step_loss(), lr, read_health().grad_norm, stopping || done == c.max_steps);
      if (!refused.empty()) return s.stop_with_error(refused);
    }
    // A blocking save just committed this step: a signal that arrived during
    // it stops here. (A background write just started is finished and
    // committed at the next step boundary, by the rule above the save.)
    if (saving && !stopping && done < c.max_steps && !checkpoints->in_flight()) {
      const int late = static_cast<int>(s.world.all_reduce_max(static_cast<double>(g_stop_signal)));
      if (late > 0) return stop_after_save(late, checkpoints->last_committed());
    }
    if (stopping && done < c.max_steps) {
      std::string why =
          signalled > 0 ? "stop signal received (" + signal_name(signalled) + ")" : "stop_after " + std::to_string(done);
      s.say(why + ": stopped after step " + std::to_string(done) +
            (has_dir ? "; resume with `resume auto`\n" : "; no checkpoint dir configured, nothing saved\n"));
      return s.finish(0);
    }
  }
  if (s.eval_data && c.eval.every > 0 && c.max_steps % c.eval.every != 0) evaluate(c.max_steps);
  if (s.engine->lora()) {
    const std::uint64_t now = s.engine->base_checksum();
    char hex[2][32];
    std::snprintf(hex[0], sizeof hex[0], "%016llx", static_cast<unsigned long long>(s.base_checksum));
    std::snprintf(hex[1], sizeof hex[1], "%016llx", static_cast<unsigned long long>(now));
    if (now != s.base_checksum)
      FT_THROW() << "lora: the frozen base changed during training (checksum " << hex[0] << " -> " << hex[1]
                 << "): a base weight received an update";
    s.say(std::string("lora: frozen base bit-identical after training (checksum ") + hex[1] + ")\n");
    if (!c.lora.save_adapter_path.empty()) {
      const bool tokens = s.model->data_kind() == DataKind::tokens;
      ckpt::save_adapter(*s.engine, s.world, c.lora.save_adapter_path, c.init.kind == deck::InitKind::random ? "" : c.init.path,
                         tokens ? "CAUSAL_LM" : "");
      s.say("save_adapter: PEFT adapter -> " + c.lora.save_adapter_path + "\n");
    }
    if (c.lora.merge) {
      ckpt::merge_adapter(*s.engine);
      s.say("merge_adapter: W += " + std::to_string(s.fsdp.lora.scale()) + " * B A folded into the base weights\n");
    }
  }
  if (!c.save_final.path.empty()) {
    const auto t0 = Clock::now();
    const auto parent = std::filesystem::path(c.save_final.path).parent_path();
    if (s.is_root() && !parent.empty()) std::filesystem::create_directories(parent, ec);
    s.world.barrier();
    ckpt::save_consolidated(*s.engine, s.world, c.save_final.path, c.model.name, s.model->config(),
                            saved_dtype(c));
    char buf[64];
    std::snprintf(buf, sizeof buf, " (%.2f s)\n", std::chrono::duration<double>(Clock::now() - t0).count());
    s.say("save_final: consolidated state dict -> " + c.save_final.path + buf);
  }
  gather_memory("at end");
  const double total = std::chrono::duration<double>(Clock::now() - start).count();
  // A resumed run counts its own steps and time, and states the total apart.
  const std::string trained =
      s.start_step == 0 ? std::to_string(c.max_steps) + " steps in " + format_duration(total)
                        : "step " + std::to_string(c.max_steps) + "; this run trained " +
                              std::to_string(c.max_steps - s.start_step) + " steps (" + std::to_string(s.start_step) +
                              " -> " + std::to_string(c.max_steps) + ") in " + format_duration(total) + ", " +
                              format_duration(s.prior_elapsed + total) + " across resumes";
  s.say("done: " + trained + "; metrics in " + c.run_dir +
        "/metrics.jsonl\n");
  return s.finish(0);
}

}  // namespace ftrain
