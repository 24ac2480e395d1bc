// What `ftrain --check` adds for a cluster run planned from a login node:
// the target GPU (--gpu, train/gpu_models.hpp) as the peak the header
// states, and the report after the plan: what could not be checked without
// a GPU, the target, and the time budget of a preemptible job
// (train/plan_budget.hpp).
#pragma once

#include <string>

#include "deck/config.hpp"
#include "fsdp/engine.hpp"
#include "plugin/model.hpp"
#include "train/device_choice.hpp"
#include "train/device_peak.hpp"
#include "train/plan.hpp"
#include "train/trainer.hpp"

namespace ftrain {

// The peak of a run planned on a GPU: the deck's peak_tflops or
// FTRAIN_PEAK_TFLOPS when stated (already in `resolved`), else --gpu's dense
// peak at the compute precision, else "unknown" (0): the host's benchmark
// says nothing about a GPU.
DevicePeak planned_gpu_peak(const RunConfig& config, const TrainerOptions& options, DevicePeak resolved);

struct CheckPlanFacts {
  const RunConfig& config;
  Model& model;
  const RunPlan& plan;
  const FsdpOptions& fsdp;
  const DeviceChoice& device_choice;
  const DevicePeak& peak;
  const TrainerOptions& options;
  int ranks_per_node = 1;
};

// The lines (each ending in a newline).
std::string check_plan_report(const CheckPlanFacts& facts);

}  // namespace ftrain
