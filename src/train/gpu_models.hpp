// The GPUs `ftrain --check --gpu NAME` plans for on a machine without one (a
// login node): memory and dense peaks from the vendors' data sheets, so the
// plan can say whether a run fits and how long a step and a checkpoint take.
//
// Memory is what the driver reports as the device's total (nvidia-smi's
// "Total"), not the marketing figure: an "80GB" H100 has 81559 MiB. Peaks
// are dense (no 2:4 sparsity), per GPU, for the SXM parts unless the name
// says otherwise; a GPU without FP8 tensor cores (A100) has fp8 0.
#pragma once

#include <string>
#include <vector>

namespace ftrain {

struct GpuModel {
  std::string name;         // the --gpu spelling: "h100-80gb"
  std::string description;  // "NVIDIA H100 SXM 80GB"
  double memory_bytes = 0;
  double tf32_tflops = 0, bf16_tflops = 0, fp8_tflops = 0;
};

const std::vector<GpuModel>& gpu_models();

// The model called `name` (aliases: "h100" = h100-80gb, "h100-nvl" =
// h100-94gb, "h200" = h200-141gb); throws UserError listing the names, with a
// suggestion for a near miss.
const GpuModel& find_gpu_model(const std::string& name);

// "h100-80gb, h100-94gb, ..." for --help and messages.
std::string gpu_model_names();

}  // namespace ftrain
