#include "train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "ckpt/safetensors.hpp"
#include "core/error.hpp"
#include "core/memory.hpp"
#include "data/token_batch_source.hpp"
#include "fsdp/engine.hpp"
#include "kernels/blas_threads.hpp"
#include "optim/lr_schedule.hpp"
#include "plugin/loader.hpp"
#include "train/device_peak.hpp"
#include "train/plan.hpp"
#include "ftrain_build_paths.hpp"

namespace ftrain {

namespace {
using Clock = std::chrono::steady_clock;

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<long long>(seconds + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, (s / 60) % 60, s % 60);
  return buf;
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
  ModelHandle model;
  FsdpOptions fsdp;
  RunPlan plan;
  std::unique_ptr<data::BatchSource> train_data;
  std::unique_ptr<data::BatchSource> eval_data;
  std::unique_ptr<FsdpEngine> engine;
  DevicePeak peak;
  std::ofstream metrics;
  std::ofstream rank_log;
  int ranks_per_node = 1;
  int blas_threads = 1;

  State(const RunConfig& c, Communicator& w, const TrainerOptions& o) : config(c), world(w), options(o) {}

  bool is_root() const { return world.rank() == 0; }
  // Rank 0 prints; every rank may also write its own log file.
  void say(const std::string& text) {
    if (is_root()) std::cout << text << std::flush;
    if (rank_log.is_open()) rank_log << text << std::flush;
  }
  void say_rank(const std::string& text) {
    if (rank_log.is_open()) rank_log << text << std::flush;
  }
};

// The data source a deck's `data` / `eval` command names.
std::unique_ptr<data::BatchSource> make_batch_source(const std::string& kind, const std::string& path,
                                                     const RunConfig& c, std::int64_t global_batch, bool shuffle,
                                                     Model& model, const DeckLocation& where) {
  if (kind == "tokens") {
    if (model.data_kind() != DataKind::tokens)
      FT_USER_ERROR() << where.str() << ": model '" << c.model.name << "' trains on images, not tokens";
    data::TokenDatasetOptions d;
    d.seq_len = c.batch.seq_len;
    d.global_batch = global_batch;
    d.packing = c.data.packing;
    d.shuffle = shuffle;
    d.seed = c.seed;
    return std::make_unique<data::TokenBatchSource>(path, d);
  }
  FT_USER_ERROR() << where.str() << ": data kind '" << kind << "' is not supported by this ftrain";
}

Trainer::Trainer(const RunConfig& config, Communicator& world, const TrainerOptions& options)
    : state_(std::make_unique<State>(config, world, options)) {}

Trainer::~Trainer() = default;

void Trainer::prepare() {
  State& s = *state_;
  const RunConfig& c = s.config;
  s.ranks_per_node = s.world.split_node()->size();
  try {
    s.model = PluginLoader().create_model(c.model.name, c.model.preset, c.model.overrides);
  } catch (const UserError& e) {
    FT_USER_ERROR() << c.model.where.str() << ": " << e.what();
  }
  s.fsdp = fsdp_options_from(c);
  const int group = shard_group_size_for(s.fsdp, s.world.size(), s.ranks_per_node);
  if (group < 1 || s.world.size() % group != 0)
    FT_USER_ERROR() << c.fsdp.where.str() << ": fsdp " << c.fsdp.strategy << " shard group size " << group
                    << " does not divide the " << s.world.size() << " ranks";
  optim::validate_schedule(c.schedule, c.optimizer.lr, c.max_steps);
  s.plan = make_plan(*s.model, c, s.fsdp, s.world.size(), s.ranks_per_node);

  const double cores = std::max(1u, std::thread::hardware_concurrency());
  const int cores_per_rank = std::max(1, static_cast<int>(cores) / std::max(1, s.ranks_per_node));
  s.blas_threads = configure_blas_threads(cores_per_rank);
  s.peak = host_peak(cores_per_rank);
  if (c.peak_tflops) {
    s.peak.flops_per_second = *c.peak_tflops * 1e12;
    s.peak.description = "peak_tflops from the deck";
  }
  if (s.options.check_only) return;

  const std::int64_t outputs = s.model->output_size();
  s.train_data = make_batch_source(c.data.kind, c.data.path, c, s.plan.global_batch, c.data.shuffle, *s.model,
                                   c.data.where);
  if (!c.eval.path.empty())
    s.eval_data = make_batch_source(c.eval.kind, c.eval.path, c, s.plan.global_batch, false, *s.model, c.eval.where);
  for (auto* source : {s.train_data.get(), s.eval_data.get()}) {
    if (source != nullptr && source->label_space() > outputs)
      FT_USER_ERROR() << (source == s.train_data.get() ? c.data.where : c.eval.where).str() << ": the data has "
                      << source->label_space() << " token ids / classes but the model's output size is " << outputs;
  }
  if (c.init.kind == "safetensors") {
    // Validate names and shapes before any collective, so a bad file is one
    // clear message rather than a hang.
    ckpt::SafetensorsFile file(c.init.path);
    for (int u = 0; u < s.model->num_units(); ++u) {
      for (const auto& spec : s.model->unit(u).params()) {
        if (!spec.tied_to.empty()) continue;
        if (!file.contains(spec.name))
          FT_USER_ERROR() << c.init.where.str() << ": " << c.init.path << " has no tensor '" << spec.name
                          << "' (shape " << shape_string(spec.shape) << ")";
        const auto& info = file.tensor(spec.name);
        if (info.shape != spec.shape)
          FT_USER_ERROR() << c.init.where.str() << ": " << c.init.path << ": tensor '" << spec.name << "' has shape "
                          << shape_string(info.shape) << ", the model expects " << shape_string(spec.shape);
      }
    }
  }
}

int Trainer::run() {
  State& s = *state_;
  const RunConfig& c = s.config;
  const int rank = s.world.rank();
  const int world = s.world.size();

  if (s.is_root()) {
    std::ostringstream h;
    h << "ftrain " << FTRAIN_VERSION_STRING << " | " << world << " rank(s), " << s.ranks_per_node
      << " per node | device: host (Kokkos, OpenBLAS " << s.blas_threads
      << " thread(s) per rank) | peak " << s.peak.flops_per_second / 1e9 << " GFLOP/s per rank: "
      << s.peak.description << "\n";
    h << "deck: " << c.deck_path << "\n";
    h << "model: " << c.model.name << " (" << (c.model.preset.empty() ? "default preset" : c.model.preset) << ")";
    for (const auto& [k, v] : s.model->config()) h << " " << k << "=" << v;
    h << "\n";
    h << "fsdp: " << c.fsdp.strategy << ", param " << dtype_name(s.fsdp.param_dtype) << ", reduce "
      << dtype_name(s.fsdp.reduce_dtype) << ", backward_prefetch " << c.fsdp.backward_prefetch << ", forward_prefetch "
      << (s.fsdp.forward_prefetch ? "on" : "off") << ", limit_all_gathers " << s.fsdp.limit_all_gathers
      << ", activation_checkpointing " << c.activation_checkpointing << "\n";
    h << format_plan(s.plan);
    h << "resolved deck:\n";
    for (const auto& line : c.resolved_lines) h << "  " << line << "\n";
    s.say(h.str());
  }
  if (s.options.check_only) return 0;

  std::error_code ec;
  std::filesystem::create_directories(c.run_dir, ec);
  if (ec) FT_USER_ERROR() << "run_dir " << c.run_dir << ": cannot create: " << ec.message();
  if (c.per_rank_logs) s.rank_log.open(c.run_dir + "/rank_" + std::to_string(rank) + ".log");
  if (s.is_root()) {
    s.metrics.open(c.run_dir + "/metrics.jsonl");
    if (!s.metrics) FT_USER_ERROR() << "cannot write " << c.run_dir << "/metrics.jsonl";
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
  };
  gather_memory("before load");

  s.engine = std::make_unique<FsdpEngine>(*s.model, s.world, s.fsdp);
  if (c.init.kind == "safetensors") {
    ckpt::SafetensorsFile file(c.init.path);
    s.engine->init_from([&](const FlatEntry& e, std::int64_t first, std::int64_t count, float* dst) {
      file.read_into(e.name, first, count, dst);
    });
  } else {
    s.engine->init_random(c.seed);
  }
  gather_memory("after load");

  const std::int64_t micro = c.batch.micro_batch;
  const std::int64_t accum = c.batch.grad_accum;

  auto evaluate = [&](std::int64_t step) {
    const std::int64_t n = s.eval_data->eval_size();
    const std::int64_t begin = n * rank / world, end = n * (rank + 1) / world;
    double loss_sum = 0;
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
      loss_sum += s.engine->forward_only(b);
    }
    const double total = s.world.all_reduce_sum(loss_sum);
    const std::int64_t total_tokens = s.world.all_reduce_sum(tokens);
    const double mean = total / static_cast<double>(std::max<std::int64_t>(1, total_tokens));
    char buf[128];
    std::snprintf(buf, sizeof buf, "eval step %lld | eval_loss %.9g | %lld tokens\n", static_cast<long long>(step), mean,
                  static_cast<long long>(total_tokens));
    s.say(buf);
    if (s.is_root()) {
      nlohmann::json j;
      j["step"] = step;
      j["eval_loss"] = mean;
      j["eval_tokens"] = total_tokens;
      s.metrics << j.dump() << "\n" << std::flush;
    }
  };

  std::vector<Batch> micro_batches(static_cast<std::size_t>(accum));
  const auto start = Clock::now();
  double window_seconds = 0;
  std::int64_t window_steps = 0;
  if (s.eval_data && c.eval.every > 0) evaluate(0);
  for (std::int64_t step = 0; step < c.max_steps; ++step) {
    const auto t0 = Clock::now();
    const double lr = optim::learning_rate(c.schedule, c.optimizer.lr, step, c.max_steps);
    s.engine->zero_grad();
    std::int64_t local_targets = 0;
    for (std::int64_t a = 0; a < accum; ++a) {
      Batch& b = micro_batches[static_cast<std::size_t>(a)];
      s.train_data->fill_batch(step, (rank * accum + a) * micro, micro, b);
      local_targets += count_targets(b.targets);
    }
    const std::int64_t global_targets = s.world.all_reduce_sum(local_targets);
    const float loss_scale = global_targets > 0 ? 1.0f / static_cast<float>(global_targets) : 0.0f;
    double local_loss = 0;
    for (auto& b : micro_batches) local_loss += s.engine->forward_backward(b, loss_scale);
    const double loss = s.world.all_reduce_sum(local_loss) / static_cast<double>(std::max<std::int64_t>(1, global_targets));
    const double norm = s.engine->grad_norm();
    float grad_scale = 1.0f;
    if (c.clip_grad_norm > 0 && norm > c.clip_grad_norm) grad_scale = static_cast<float>(c.clip_grad_norm / (norm + 1e-6));
    AdamWHyper hyper;
    hyper.lr = static_cast<float>(lr);
    hyper.beta1 = static_cast<float>(c.optimizer.beta1);
    hyper.beta2 = static_cast<float>(c.optimizer.beta2);
    hyper.eps = static_cast<float>(c.optimizer.eps);
    hyper.weight_decay = static_cast<float>(c.optimizer.weight_decay);
    s.engine->optimizer_step(hyper, grad_scale);
    if (!std::isfinite(loss))
      FT_USER_ERROR() << "step " << step + 1 << ": the loss is " << loss
                      << " (diverged); lower the learning rate or enable clip_grad_norm";

    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    window_seconds += dt;
    ++window_steps;
    const std::int64_t done = step + 1;
    if (done % c.log_every == 0 || done == c.max_steps) {
      const double step_time = window_seconds / static_cast<double>(window_steps);
      const double tokens_per_s = static_cast<double>(s.plan.tokens_per_step) / step_time;
      const double mfu = s.plan.flops_per_step / step_time / (s.peak.flops_per_second * world);
      const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      const double eta = elapsed / static_cast<double>(done) * static_cast<double>(c.max_steps - done);
      const double peak_mib = s.world.all_reduce_max(to_mib(peak_rss_bytes()));
      char buf[320];
      std::snprintf(buf, sizeof buf,
                    "step %lld/%lld | loss %.6f | lr %.3e | grad_norm %.4f | %.0f tok/s | MFU %.1f%% | mem %.0f MiB | "
                    "ETA %s\n",
                    static_cast<long long>(done), static_cast<long long>(c.max_steps), loss, lr, norm, tokens_per_s,
                    100.0 * mfu, peak_mib, format_duration(eta).c_str());
      s.say(buf);
      if (s.is_root()) {
        nlohmann::json j;
        j["step"] = done;
        j["loss"] = loss;
        j["lr"] = lr;
        j["grad_norm"] = norm;
        j["tokens"] = s.plan.tokens_per_step * done;
        j["step_time_s"] = step_time;
        j["tokens_per_s"] = tokens_per_s;
        j["mfu"] = mfu;
        j["peak_rss_mib_max_rank"] = peak_mib;
        j["elapsed_s"] = elapsed;
        s.metrics << j.dump() << "\n" << std::flush;
      }
      window_seconds = 0;
      window_steps = 0;
    }
    if (s.eval_data && c.eval.every > 0 && done % c.eval.every == 0) evaluate(done);
  }
  if (s.eval_data && c.eval.every > 0 && c.max_steps % c.eval.every != 0) evaluate(c.max_steps);
  gather_memory("at end");
  const double total = std::chrono::duration<double>(Clock::now() - start).count();
  s.say("done: " + std::to_string(c.max_steps) + " steps in " + format_duration(total) + "; metrics in " + c.run_dir +
        "/metrics.jsonl\n");
  return 0;
}

}  // namespace ftrain
