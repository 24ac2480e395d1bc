#include "train/check_plan.hpp"

#include <cstdlib>
#include <sstream>

#include "train/gpu_models.hpp"
#include "train/plan_budget.hpp"

namespace ftrain {

namespace {

double gpu_peak_tflops(const GpuModel& gpu, deck::Precision precision) {
  // MFU's convention: FP8 runs are measured against the BF16 peak too.
  return precision == deck::Precision::fp32 ? gpu.tf32_tflops : gpu.bf16_tflops;
}

const char* peak_kind(deck::Precision precision) { return precision == deck::Precision::fp32 ? "tf32" : "bf16"; }

bool peak_stated(const RunConfig& c) {
  const char* env = std::getenv("FTRAIN_PEAK_TFLOPS");
  return c.peak_tflops.has_value() || (env != nullptr && *env != '\0');
}

}  // namespace

DevicePeak planned_gpu_peak(const RunConfig& c, const TrainerOptions& o, DevicePeak resolved) {
  if (peak_stated(c)) return resolved;
  if (!o.plan_gpu.empty()) {
    const GpuModel& gpu = find_gpu_model(o.plan_gpu);
    return {gpu_peak_tflops(gpu, c.precision) * 1e12,
            gpu.name + " " + peak_kind(c.precision) + " dense peak (" + gpu.description + ", --gpu)"};
  }
  return {0, "unknown for a GPU (--gpu NAME or peak_tflops states it)"};
}

std::string check_plan_report(const CheckPlanFacts& f) {
  const RunConfig& c = f.config;
  std::ostringstream r;
  if (f.device_choice.planned_without_gpu) r << "note: " << unchecked_without_gpu() << "\n";
  if (!f.options.plan_gpu.empty()) {
    const GpuModel& gpu = find_gpu_model(f.options.plan_gpu);
    r << "target GPU: " << gpu.name << " (" << gpu.description << "): " << human_bytes(gpu.memory_bytes)
      << (f.options.device_memory_bytes != gpu.memory_bytes ? " (--device-memory overrides it for the fit)" : "")
      << ", dense peak " << gpu.bf16_tflops << " TFLOP/s bf16, ";
    if (gpu.fp8_tflops > 0) r << gpu.fp8_tflops << " TFLOP/s fp8\n";
    else r << "no FP8 tensor cores\n";
    if (c.precision == deck::Precision::fp8 && gpu.fp8_tflops <= 0)
      r << "warning: precision fp8 on " << gpu.name << ", which has no FP8 tensor cores: choose precision bf16 "
        << "for this GPU\n";
    if (f.device_choice.device != Device::cuda)
      r << "note: the deck's device is " << deck::word(c.device) << ", which runs on the host here (`device cuda` "
        << "runs on the GPU); the fit and the times are for " << gpu.name << "\n";
  }
  PlanBudgetInputs in;
  const bool planned_gpu = f.device_choice.device == Device::cuda || !f.options.plan_gpu.empty();
  if (planned_gpu && !f.options.plan_gpu.empty() && !peak_stated(c)) {
    // --gpu's peak, also for a device-auto deck (the host's says nothing about the GPU).
    const GpuModel& gpu = find_gpu_model(f.options.plan_gpu);
    in.peak_flops_per_rank = gpu_peak_tflops(gpu, c.precision) * 1e12;
    in.peak_source = gpu.name + " " + peak_kind(c.precision) + " dense peak";
  } else {
    in.peak_flops_per_rank = f.peak.flops_per_second;
    in.peak_source = f.device_choice.device == Device::cuda ? f.peak.description : "the host peak in the header";
  }
  if (f.options.plan_mfu > 0) {
    in.mfu = f.options.plan_mfu;
    in.mfu_stated = true;
  }
  if (f.options.fs_bandwidth_bytes_per_s > 0) {
    in.fs_bytes_per_s_per_node = f.options.fs_bandwidth_bytes_per_s;
    in.fs_bandwidth_stated = true;
  }
  in.window = find_signal_window(f.options.job_script, process_environment);
  r << plan_budget_report(f.model, c, f.fsdp, f.plan, f.ranks_per_node, in);
  return r.str();
}

}  // namespace ftrain
