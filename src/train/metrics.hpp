// What a run measures and where it goes: the step log line, metrics.jsonl's
// rows (the schema plot_metrics.py and the tests read), the per-rank memory
// lines, and metrics.jsonl continued across a resume.
//
// metrics.jsonl, one JSON object per line, written by rank 0:
//   a training row at every log step: step, loss, lr, grad_norm,
//     trainable_parameters, samples, samples_per_s, (token models) tokens,
//     tokens_per_s, trained_tokens, step_time_s, mfu (null when the stated
//     peak is disproved), peak_rss_mib_max_rank, peak_rss_mib_per_rank,
//     (GPU runs) the device_*_mib fields, elapsed_s (across resumes), and the
//     FSDP counters per step (share/doc/fsdp.md "Counters");
//   an evaluation row: step, eval_loss, eval_tokens;
//   a resume row where a resumed run continues: step, resumed_from,
//     world_size, global_batch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "fsdp/engine.hpp"
#include "runtime/allocator.hpp"
#include "train/device_memory.hpp"
#include "train/resume.hpp"
#include "train/run_output.hpp"

namespace ftrain {

// Every rank's resident memory (and on a GPU its device memory), one line
// each, said by rank 0: "memory <phase>: rank 0 N MiB (peak M) ...".
// Collective.
void report_memory(const char* phase, Communicator& world, bool device_run, RunOutput& out);

// metrics.jsonl's first rows for a run starting at `start`: for a resumed
// run, the rows of the old file up to the checkpoint's step (the interrupted
// run's tail is dropped so every step appears once) and a resume row
// marking where this run continued (plot_metrics.py marks it); "" for a
// fresh start.
std::string kept_metrics_rows(const std::string& path, const ResumePoint& start, int world_size,
                              std::int64_t global_batch);

// The tensors of one rank's host allocator over a log window, which the
// resident set cannot separate from libraries, MPI and the allocator's
// cache. live: alive at the log step, between steps, so what the rank keeps
// (sharded state, optimizer moments, buffers kept across steps); peak: the
// most alive at once since the previous window (the first: since the
// start), so peak - live is what the steps added on top of it (gathered
// units, gradients in flight, activations, workspace). Starts the next
// window (HostAllocator::restart_peak).
struct HostTensorWindow {
  double live_mib = 0, peak_mib = 0;
};
HostTensorWindow take_host_tensor_window(DeviceAllocator& host);

// Peak memory of every rank at a log step.
struct MemoryPeaks {
  std::vector<float> rss_mib_per_rank;
  double rss_mib_max_rank = 0;
  std::vector<float> host_tensor_mib_per_rank, host_tensor_peak_mib_per_rank;  // take_host_tensor_window
  std::vector<DeviceMemorySample> device;  // GPU runs only
};
MemoryPeaks gather_memory_peaks(Communicator& world, bool device_run);  // collective

// The engine's communication time and FSDP counters over a log window of
// `steps` steps, per step, over every rank; resets them. Collective.
struct WindowCounters {
  double comm_s = 0, comm_exposed_s = 0;  // averaged over ranks
  double recomputed_units = 0, forward_prefetch_gathers = 0, backward_prefetch_gathers = 0;  // max over ranks
  std::int64_t gathered_units_high_water = 0, gathered_in_flight_high_water = 0;
  double all_gather_bytes = 0, all_gather_fp8_weight_bytes = 0;  // rank 0's
  // Offload on a device (max over ranks): gradient shards copied to the
  // host, and those enqueued with their unit's reduce-scatter.
  double offload_gradient_copies = 0, offload_copies_at_reduction = 0;
  bool offload = false;
};
WindowCounters gather_window_counters(Communicator& world, FsdpEngine& engine, double steps);

// One log step's numbers.
struct StepRecord {
  std::int64_t step = 0, max_steps = 0;
  double loss = 0, lr = 0, grad_norm = 0;
  bool images = false;               // an image model: samples, not tokens
  std::int64_t trained_tokens = 0;   // this step's unmasked targets, all ranks
  std::int64_t trainable_parameters = 0, global_batch = 0, tokens_per_step = 0;
  double step_time_s = 0, tokens_per_s = 0, samples_per_s = 0;
  std::optional<double> mfu;         // nullopt: the stated peak is wrong
  double elapsed_s = 0, eta_s = 0;   // elapsed_s continues across resumes
  bool fp8 = false;
  MemoryPeaks memory;
  WindowCounters counters;
};

// "step N/M | loss ... | ETA h:mm:ss\n"
std::string step_log_line(const StepRecord& r);
// The training row, newline-terminated.
std::string step_metrics_row(const StepRecord& r);
// The evaluation line and row.
std::string eval_log_line(std::int64_t step, double mean_loss, std::int64_t tokens, bool images);
std::string eval_metrics_row(std::int64_t step, double mean_loss, std::int64_t tokens);

}  // namespace ftrain
