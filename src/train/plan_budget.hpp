// `ftrain --check`'s time budget for a preemptible job: how big a checkpoint
// is, how long a save and a step take, and whether the job's warning signal
// leaves time for both (a stop finishes the step, then writes).
//
// Checkpoint bytes are counted as ckpt/shard_snapshot.cpp writes them: each
// rank's file holds, for every unit it checkpoints, the f32 master, AdamW m
// and AdamW v of its shard (12 bytes per element; the shard is padded to
// the shard group), every rank writing its own file (replicas included).
// Under LoRA only the adapters' shards are written (the frozen base is
// referenced by its init, not saved). Not counted: the HDF5 metadata, the
// deck text and, under precision fp8, the per-linear scaling state (a few
// hundred bytes per linear). `consolidated on` adds model.h5: every
// parameter as f32.
//
// Times are estimates from stated assumptions, printed with them: the save
// at a file-system write bandwidth per node (every node writes its ranks'
// files at once), the step at the device's dense peak times an MFU.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "deck/config.hpp"
#include "fsdp/engine.hpp"
#include "plugin/model.hpp"
#include "train/job_signal_window.hpp"
#include "train/plan.hpp"

namespace ftrain {

constexpr double kDefaultFsBandwidthPerNode = 2e9;  // bytes/s: a node's share of a parallel file system
constexpr double kDefaultMfu = 0.40;                // FSDP bf16 training of a large decoder on H100s

struct PlanBudgetInputs {
  double peak_flops_per_rank = 0;  // 0: unknown, no step time
  std::string peak_source;         // "h100-80gb bf16 dense"
  double mfu = kDefaultMfu;
  bool mfu_stated = false;  // --mfu
  double fs_bytes_per_s_per_node = kDefaultFsBandwidthPerNode;
  bool fs_bandwidth_stated = false;  // --fs-bandwidth
  std::optional<SignalWindow> window;
};

struct CheckpointSize {
  std::int64_t per_rank = 0;      // one rank file's arrays
  std::int64_t consolidated = 0;  // model.h5 (consolidated on), else 0
  std::int64_t total = 0;         // every rank file + model.h5
};
CheckpointSize checkpoint_size(const RunConfig& config, const RunPlan& plan);

// The report's lines (ending in a newline), a warning among them when the
// window is shorter than a step plus a save.
std::string plan_budget_report(Model& model, const RunConfig& config, const FsdpOptions& options, const RunPlan& plan,
                               int ranks_per_node, const PlanBudgetInputs& inputs);

// "5GB/s", "800MB/s", "1.5GiB/s"; throws UserError naming the option.
double parse_bandwidth(const std::string& text, const std::string& option);

}  // namespace ftrain
