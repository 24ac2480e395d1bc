#include "train/device_peak.hpp"

#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "kernels/blas_threads.hpp"
#include "train/host_identity.hpp"

namespace ftrain {

namespace {

// Best single-core f32 SGEMM rate. The first repetitions warm caches and
// clocks; the best of the rest is the rate the core can reach.
double single_core_sgemm_flops() {
  constexpr int n = 1024;
  std::vector<float> a(static_cast<std::size_t>(n) * n, 0.001f), b(a), c(a.size());
  const int threads = openblas_get_num_threads();
  openblas_set_num_threads(1);
  double best = 0;
  for (int rep = 0; rep < 16; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 1) best = std::max(best, 2.0 * n * n * n / s);
  }
  openblas_set_num_threads(threads);
  return best;
}

std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown CPU";
}

std::string rate_text(double flops) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", flops / 1e9);
  return buf;
}

// Writes the record atomically (a run on another node may read it now).
std::string write_record(const std::string& path, const nlohmann::json& record) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);
  if (ec) return "cannot create " + parent.string() + ": " + ec.message();
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << record.dump(2) << "\n";
    if (!out.flush()) return "cannot write " + tmp;
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return "cannot rename " + tmp + ": " + ec.message();
  }
  return "";
}

}  // namespace

std::string host_peak_record_path(const EnvironmentLookup& env) {
  if (const char* p = env("FTRAIN_PEAK_FILE"); p != nullptr && *p != '\0') return p;
  if (const char* x = env("XDG_CACHE_HOME"); x != nullptr && *x != '\0') return std::string(x) + "/ftrain/host_peak.json";
  if (const char* h = env("HOME"); h != nullptr && *h != '\0') return std::string(h) + "/.cache/ftrain/host_peak.json";
  return "";
}

DevicePeak resolve_host_peak(std::optional<double> deck_peak_tflops, const EnvironmentLookup& env,
                             int cores_per_rank) {
  DevicePeak p;
  if (deck_peak_tflops) {
    p.flops_per_second = *deck_peak_tflops * 1e12;
    p.description = "peak_tflops from the deck";
    return p;
  }
  if (const char* text = env("FTRAIN_PEAK_TFLOPS"); text != nullptr && *text != '\0') {
    double tflops = 0;
    const char* end = text + std::char_traits<char>::length(text);
    const auto [ptr, ec] = std::from_chars(text, end, tflops);
    if (ec != std::errc() || ptr != end || !std::isfinite(tflops) || tflops <= 0)
      FT_USER_ERROR() << "environment: FTRAIN_PEAK_TFLOPS must be a positive number (TFLOP/s per device), got '"
                      << text << "'";
    p.flops_per_second = tflops * 1e12;
    p.description = std::string("FTRAIN_PEAK_TFLOPS=") + text + " from the environment";
    return p;
  }
  const std::string path = host_peak_record_path(env);
  const std::string key = cpu_model() + " | " + blas_kernel_description();
  nlohmann::json record = nlohmann::json::object();
  if (!path.empty()) {
    std::ifstream in(path);
    if (in) {
      record = nlohmann::json::parse(in, nullptr, false);
      if (record.is_discarded() || !record.is_object())
        FT_USER_ERROR() << path << ": not the JSON object ftrain records host peaks in; delete it to re-measure";
    }
  }
  std::ostringstream d;
  if (record.contains(key) && record[key].contains("gflops_per_core") && record[key]["gflops_per_core"].is_number() &&
      record[key]["gflops_per_core"].get<double>() > 0) {
    const double per_core = record[key]["gflops_per_core"].get<double>() * 1e9;
    p.flops_per_second = per_core * cores_per_rank;
    d << cores_per_rank << " core(s) x " << rate_text(per_core) << " GFLOP/s f32 SGEMM per core, recorded "
      << record[key].value("recorded", std::string("?")) << " in " << path
      << " (delete the entry to re-measure, or state peak_tflops)";
    p.description = d.str();
    return p;
  }
  const double per_core = single_core_sgemm_flops();
  p.flops_per_second = per_core * cores_per_rank;
  d << cores_per_rank << " core(s) x " << rate_text(per_core) << " GFLOP/s f32 SGEMM per core, measured now";
  if (path.empty()) {
    d << " (not recorded: neither FTRAIN_PEAK_FILE, XDG_CACHE_HOME nor HOME is set)";
  } else {
    record[key] = {{"gflops_per_core", per_core / 1e9}, {"recorded", utc_timestamp()}, {"cpu", cpu_model()},
                   {"blas", blas_kernel_description()}};
    const std::string failure = write_record(path, record);
    if (failure.empty()) d << " and recorded in " << path << " for later runs";
    else d << " (not recorded: " << failure << ")";
  }
  p.description = d.str();
  return p;
}

std::optional<double> model_flops_utilisation(double achieved_flops_per_second, double peak_flops_per_second) {
  if (!(peak_flops_per_second > 0) || !std::isfinite(achieved_flops_per_second)) return std::nullopt;
  const double mfu = achieved_flops_per_second / peak_flops_per_second;
  if (mfu > 1.0) return std::nullopt;
  return mfu;
}

}  // namespace ftrain
