// The deck's `device auto|host|cuda` (train/device_choice.hpp): `cuda`
// without a usable GPU is a user error naming the deck line and the cause;
// `auto` falls back to the host and says why; the real probe on a machine
// without a GPU (CI) reports a cause instead of claiming a GPU.
#include <gtest/gtest.h>

#include <string>

#include "core/error.hpp"
#include "train/device_choice.hpp"

using namespace ftrain;

namespace {
const DeckLocation kWhere{"run.in", 3};
std::string no_gpu() { return "cudaGetDeviceCount failed: cudaErrorNoDevice"; }
std::string gpu() { return {}; }

std::string user_error_of(const std::string& requested, const CudaProbe& probe) {
  try {
    choose_device(requested, kWhere, probe);
  } catch (const UserError& e) {
    return e.what();
  }
  return "<no error>";
}
}  // namespace

TEST(DeviceChoice, CudaWithoutAGpuStopsNamingTheCause) {
  const std::string m = user_error_of("cuda", no_gpu);
  EXPECT_NE(m.find("run.in:3"), std::string::npos) << m;
  EXPECT_NE(m.find("no usable CUDA GPU"), std::string::npos) << m;
  EXPECT_NE(m.find("cudaErrorNoDevice"), std::string::npos) << m;
}

TEST(DeviceChoice, CudaWithAGpuStillStopsWhileTheEngineIsHostOnly) {
  const std::string m = user_error_of("cuda", gpu);
  EXPECT_NE(m.find("does not run on the CUDA backend yet"), std::string::npos) << m;
}

TEST(DeviceChoice, AutoRunsOnTheHostAndSaysWhy) {
  DeviceChoice c = choose_device("auto", kWhere, no_gpu);
  EXPECT_EQ(c.device, Device::host);
  EXPECT_NE(c.reason.find("auto: no usable CUDA GPU (cudaGetDeviceCount"), std::string::npos) << c.reason;
  c = choose_device("auto", kWhere, gpu);
  EXPECT_EQ(c.device, Device::host);
  EXPECT_NE(c.reason.find("a CUDA GPU is usable"), std::string::npos) << c.reason;
  EXPECT_EQ(choose_device("host", kWhere, no_gpu).device, Device::host);
}

TEST(DeviceChoice, TheRealProbeGivesACauseOrAGpu) {
  const std::string why_not = probe_cuda();
  if (why_not.empty()) GTEST_SKIP() << "a CUDA GPU is usable here";
  EXPECT_NE(why_not.find("libftrain_cuda.so"), std::string::npos) << why_not;
  const std::string m = user_error_of("cuda", probe_cuda);
  EXPECT_NE(m.find("no usable CUDA GPU"), std::string::npos) << m;
}
