// Trainer: the run loop. Builds the model from its plugin, the FSDP engine,
// the datasets and the optimizer from a RunConfig; trains, evaluates, logs.
// It hands each concern to a component in this folder: run_header (what the
// run prints first), weights (init, import, LoRA's frozen base), resume,
// checkpointing, metrics (the log line and metrics.jsonl), health (the stop
// messages), batch_sources, output_locations, stop_signals and run_output
// (where the text goes).
//
// Data assignment (reproducible from the docs): global step s has
// B = micro_batch * grad_accum * world_size samples; rank r at micro-step a
// takes samples (r * grad_accum + a) * micro_batch ... + micro_batch - 1 of
// step s, which data/token_dataset.hpp maps to windows. The loss of a step is
// the mean over every target token of the global batch, whatever the number
// of ranks. Evaluation splits the eval windows in contiguous, in-order ranges
// over ranks and reports the mean token loss over all of them.
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>

#include "comm/communicator.hpp"
#include "deck/config.hpp"

namespace ftrain {

struct TrainerOptions {
  bool check_only = false;  // print the plan and stop (nothing model-sized is allocated)
  // --check only: plan for this many ranks instead of the ones started
  // (0 = the started ones), so many per node (0 = all on one node), and
  // report the fit on devices of this many bytes (0 = no fit report).
  int plan_ranks = 0;
  int plan_ranks_per_node = 0;
  double device_memory_bytes = 0;
  double host_memory_bytes = 0;  // --check --host-memory: a node's, for the offload plan
  // --check --gpu NAME (train/gpu_models.hpp): the target GPU's memory (unless
  // --device-memory) and peak; --fs-bandwidth, --mfu and --job-script feed the
  // time budget (train/plan_budget.hpp). 0 / "": the stated defaults.
  std::string plan_gpu;
  double fs_bandwidth_bytes_per_s = 0;
  double plan_mfu = 0;
  std::string job_script;
};

// Phase 1: resolve the model, validate the configuration and the output
// directories. It opens with one collective (split_node, for the ranks per
// node), so the app calls it only after every rank has read its deck; after
// that it runs none, because a rank that fails here goes straight to the
// app's agreement. Errors are UserErrors that the app reports once. Phase 2
// (collectives): build the engine and train.
class Trainer {
 public:
  Trainer(const RunConfig& config, Communicator& world, const TrainerOptions& options);
  ~Trainer();
  void prepare();  // phase 1
  int run();       // phase 2; returns the exit code

  // What the run's components share (opaque outside trainer.cpp).
  struct State;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace ftrain
