// The run header rank 0 prints before anything is loaded (and all that
// `ftrain --check` prints): where the run computes and why, what the host
// threads and kernels are, how it communicates, the model, FSDP and
// training settings in effect (defaults included), the plan, the warnings,
// and the resolved deck.
#pragma once

#include <string>

#include "comm/node_layout.hpp"
#include "deck/config.hpp"
#include "fsdp/engine.hpp"
#include "plugin/model.hpp"
#include "train/console.hpp"
#include "train/device_choice.hpp"
#include "train/device_peak.hpp"
#include "train/plan.hpp"

namespace ftrain {

struct RunHeaderFacts {
  const RunConfig& config;
  Model& model;
  const RunPlan& plan;
  const FsdpOptions& fsdp;
  const DeviceChoice& device_choice;
  const DevicePeak& peak;
  const ProgressDecision& progress_line;
  int ranks_per_node = 1;
  int blas_threads = 1;
  std::string cpu_binding_text;     // train/cpu_binding.hpp
  std::string cpu_binding_warning;  // "" unless the launcher bound ranks to fewer CPUs than their share
  bool planned_ranks = false;       // --check --ranks: the geometry is planned, not started
  bool check_only = false;
  double device_memory_bytes = 0;   // --check --device-memory: report the fit (0 = none)
  double host_memory_bytes = 0;     // --check --host-memory: a node's, for the offload plan (0 = not checked)
  std::string check_report;         // --check: printed after the plan and the fit (train/check_plan.hpp)
  const NodeLayout* nodes = nullptr;  // which ranks share a node (null: not known, one node of ranks_per_node)
};

std::string run_header(const RunHeaderFacts& facts);

}  // namespace ftrain
