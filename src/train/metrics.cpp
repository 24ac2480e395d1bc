#include "train/metrics.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/memory.hpp"
#include "core/tensor.hpp"

namespace ftrain {

void report_memory(const char* phase, Communicator& world, bool device_run, RunOutput& out) {
  const int rank = world.rank();
  std::vector<double> mine{to_mib(current_rss_bytes()), to_mib(peak_rss_bytes())};
  std::ostringstream line;
  line << "memory " << phase << ":";
  for (int r = 0; r < world.size(); ++r) {
    Tensor t = Tensor::zeros({2}, DType::f32);
    if (r == rank) {
      t.data_as<float>()[0] = static_cast<float>(mine[0]);
      t.data_as<float>()[1] = static_cast<float>(mine[1]);
    }
    world.all_reduce_sum(t).wait();
    char buf[96];
    std::snprintf(buf, sizeof buf, " rank %d %.0f MiB (peak %.0f)", r, t.data_as<float>()[0], t.data_as<float>()[1]);
    line << buf;
  }
  out.say(line.str() + "\n");
  if (device_run) out.say(format_device_memory(phase, gather_device_memory(world, this_rank_device_memory())));
}

std::string kept_metrics_rows(const std::string& path, const ResumePoint& start, int world_size,
                              std::int64_t global_batch) {
  std::string kept;
  if (start.directory.empty()) return kept;
  std::ifstream old(path);
  std::string line;
  while (std::getline(old, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("step") && j["step"].get<std::int64_t>() <= start.step) kept += line + "\n";
  }
  nlohmann::json j;
  j["step"] = start.step;
  j["resumed_from"] = start.directory;
  j["world_size"] = world_size;
  j["global_batch"] = global_batch;
  kept += j.dump() + "\n";
  return kept;
}

HostTensorWindow take_host_tensor_window(DeviceAllocator& host) {
  const AllocatorStats stats = host.stats();
  // Another host allocator (a test's) keeps its process-wide peak.
  if (auto* restartable = dynamic_cast<HostAllocator*>(&host)) restartable->restart_peak();
  return {to_mib(static_cast<std::int64_t>(stats.live_bytes)), to_mib(static_cast<std::int64_t>(stats.peak_live_bytes))};
}

MemoryPeaks gather_memory_peaks(Communicator& world, bool device_run) {
  MemoryPeaks m;
  const int ranks = world.size(), rank = world.rank();
  // Read before the tensor below exists, so it is not counted.
  const HostTensorWindow tensors = take_host_tensor_window(*find_allocator(Device::host));
  // Three rows of one value per rank, each rank filling its own column.
  Tensor per_rank = Tensor::zeros({3, ranks}, DType::f32);
  float* v = per_rank.data_as<float>();
  v[rank] = static_cast<float>(to_mib(peak_rss_bytes()));
  v[ranks + rank] = static_cast<float>(tensors.live_mib);
  v[2 * ranks + rank] = static_cast<float>(tensors.peak_mib);
  world.all_reduce_sum(per_rank).wait();
  m.rss_mib_per_rank.assign(v, v + ranks);
  m.host_tensor_mib_per_rank.assign(v + ranks, v + 2 * ranks);
  m.host_tensor_peak_mib_per_rank.assign(v + 2 * ranks, v + 3 * ranks);
  m.rss_mib_max_rank = *std::max_element(m.rss_mib_per_rank.begin(), m.rss_mib_per_rank.end());
  if (device_run) m.device = gather_device_memory(world, this_rank_device_memory());
  return m;
}

WindowCounters gather_window_counters(Communicator& world, FsdpEngine& engine, double steps) {
  WindowCounters w;
  const int ranks = world.size();
  w.comm_s = world.all_reduce_sum(engine.comm_seconds()) / ranks / steps;
  w.comm_exposed_s = world.all_reduce_sum(engine.comm_exposed_seconds()) / ranks / steps;
  engine.reset_comm_timers();
  // Every rank runs the same schedule: the max over ranks shows any that did not.
  const FsdpCounters& counted = engine.counters();
  const auto per_step_max = [&](std::int64_t n) { return world.all_reduce_max(static_cast<double>(n)) / steps; };
  w.recomputed_units = per_step_max(counted.recomputed_units);
  w.forward_prefetch_gathers = per_step_max(counted.forward_prefetch_gathers);
  w.backward_prefetch_gathers = per_step_max(counted.backward_prefetch_gathers);
  w.gathered_units_high_water =
      static_cast<std::int64_t>(world.all_reduce_max(static_cast<double>(counted.gathered_units_high_water)));
  // Bytes rank 0 received (every rank gathers the same units; the shard
  // group's ranks receive the same amount).
  w.all_gather_bytes = static_cast<double>(counted.all_gather_bytes) / steps;
  w.all_gather_fp8_weight_bytes = static_cast<double>(counted.all_gather_fp8_weight_bytes) / steps;
  // Asynchronous streams: gathered units alive on the device, released ones
  // awaiting their stream-ordered free included (limit_all_gathers).
  w.gathered_in_flight_high_water =
      static_cast<std::int64_t>(world.all_reduce_max(static_cast<double>(counted.gathered_in_flight_high_water)));
  w.offload = engine.offloads();
  if (w.offload) {
    w.offload_gradient_copies = per_step_max(counted.offload_gradient_copies);
    w.offload_copies_at_reduction = per_step_max(counted.offload_copies_at_reduction);
  }
  engine.reset_counters();
  return w;
}

std::string step_log_line(const StepRecord& r) {
  char mfu_text[16] = "n/a";
  if (r.mfu) std::snprintf(mfu_text, sizeof mfu_text, "%.1f%%", 100.0 * *r.mfu);
  // The loss is a mean over trained targets only: the count says what it
  // averaged (a masked prompt is not trained).
  char trained_text[48] = "";
  if (!r.images)
    std::snprintf(trained_text, sizeof trained_text, " (%lld trained tok)", static_cast<long long>(r.trained_tokens));
  char buf[360];
  std::snprintf(buf, sizeof buf,
                "step %lld/%lld | loss %.6f%s | lr %.3e | grad_norm %.4f | %.0f %s | MFU %s | mem %.0f MiB | "
                "ETA %s\n",
                static_cast<long long>(r.step), static_cast<long long>(r.max_steps), r.loss, trained_text, r.lr,
                r.grad_norm, r.images ? r.samples_per_s : r.tokens_per_s, r.images ? "img/s" : "tok/s", mfu_text,
                r.memory.rss_mib_max_rank, format_duration(r.eta_s).c_str());
  return buf;
}

std::string step_metrics_row(const StepRecord& r) {
  nlohmann::json j;
  j["step"] = r.step;
  j["loss"] = r.loss;
  j["lr"] = r.lr;
  j["grad_norm"] = r.grad_norm;
  j["trainable_parameters"] = r.trainable_parameters;  // the adapters under LoRA
  j["samples"] = r.global_batch * r.step;
  j["samples_per_s"] = r.samples_per_s;
  if (!r.images) {
    j["tokens"] = r.tokens_per_step * r.step;
    j["tokens_per_s"] = r.tokens_per_s;
    j["trained_tokens"] = r.trained_tokens;
  }
  j["step_time_s"] = r.step_time_s;
  j["mfu"] = r.mfu ? nlohmann::json(*r.mfu) : nlohmann::json(nullptr);
  j["peak_rss_mib_max_rank"] = r.memory.rss_mib_max_rank;
  j["peak_rss_mib_per_rank"] = r.memory.rss_mib_per_rank;
  j["host_tensor_mib_per_rank"] = r.memory.host_tensor_mib_per_rank;
  j["host_tensor_peak_mib_per_rank"] = r.memory.host_tensor_peak_mib_per_rank;
  if (!r.memory.device.empty()) add_device_memory_metrics(j, r.memory.device);
  j["elapsed_s"] = r.elapsed_s;
  const WindowCounters& w = r.counters;
  j["comm_s_per_step"] = w.comm_s;
  j["comm_exposed_s_per_step"] = w.comm_exposed_s;
  j["recomputed_units_per_step"] = w.recomputed_units;
  j["forward_prefetch_gathers_per_step"] = w.forward_prefetch_gathers;
  j["backward_prefetch_gathers_per_step"] = w.backward_prefetch_gathers;
  j["gathered_units_high_water"] = w.gathered_units_high_water;
  j["all_gather_bytes_per_step"] = w.all_gather_bytes;
  if (r.fp8) j["all_gather_fp8_weight_bytes_per_step"] = w.all_gather_fp8_weight_bytes;
  j["gathered_in_flight_high_water"] = w.gathered_in_flight_high_water;
  if (w.offload) {
    j["offload_gradient_copies_per_step"] = w.offload_gradient_copies;
    j["offload_copies_at_reduction_per_step"] = w.offload_copies_at_reduction;
  }
  return j.dump() + "\n";
}

std::string eval_log_line(std::int64_t step, double mean_loss, std::int64_t tokens, bool images) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "eval step %lld | eval_loss %.9g | %lld %s\n", static_cast<long long>(step),
                mean_loss, static_cast<long long>(tokens), images ? "images" : "tokens");
  return buf;
}

std::string eval_metrics_row(std::int64_t step, double mean_loss, std::int64_t tokens) {
  nlohmann::json j;
  j["step"] = step;
  j["eval_loss"] = mean_loss;
  j["eval_tokens"] = tokens;
  return j.dump() + "\n";
}

}  // namespace ftrain
