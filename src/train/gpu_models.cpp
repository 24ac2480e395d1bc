#include "train/gpu_models.hpp"

#include <string_view>
#include <utility>

#include "base/error.hpp"
#include "deck/diagnostics.hpp"

namespace ftrain {

namespace {
constexpr double kMiB = 1024.0 * 1024.0;
}  // namespace

const std::vector<GpuModel>& gpu_models() {
  // Dense TFLOP/s from NVIDIA's data sheets (the sparsity figures halved).
  static const std::vector<GpuModel> models{
      {"h100-80gb", "NVIDIA H100 SXM 80GB", 81559 * kMiB, 494.7, 989.4, 1978.9},
      {"h100-94gb", "NVIDIA H100 NVL 94GB", 95830 * kMiB, 417.5, 835.5, 1670.5},
      {"h200-141gb", "NVIDIA H200 SXM 141GB", 143771 * kMiB, 494.7, 989.4, 1978.9},
      {"a100-80gb", "NVIDIA A100 SXM 80GB", 81920 * kMiB, 156.0, 312.0, 0.0},
      {"a100-40gb", "NVIDIA A100 SXM 40GB", 40960 * kMiB, 156.0, 312.0, 0.0},
  };
  return models;
}

std::string gpu_model_names() {
  std::string out;
  for (const GpuModel& m : gpu_models()) out += (out.empty() ? "" : ", ") + m.name;
  return out;
}

const GpuModel& find_gpu_model(const std::string& name) {
  static const std::vector<std::pair<std::string, std::string>> aliases{
      {"h100", "h100-80gb"}, {"h100-nvl", "h100-94gb"}, {"h200", "h200-141gb"}};
  std::string wanted = name;
  for (const auto& [alias, real] : aliases)
    if (name == alias) wanted = real;
  for (const GpuModel& m : gpu_models())
    if (m.name == wanted) return m;
  std::vector<std::string_view> known;
  for (const GpuModel& m : gpu_models()) known.push_back(m.name);
  for (const auto& a : aliases) known.push_back(a.first);
  FT_USER_ERROR() << "command line: --gpu: unknown GPU '" << name << "'" << deck::did_you_mean(name, known)
                  << "; known: " << gpu_model_names() << " (or give --device-memory, e.g. 80GiB)";
  return gpu_models().front();
}

}  // namespace ftrain
