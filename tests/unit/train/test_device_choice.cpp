// The deck's `device auto|host|cuda` (train/device_choice.hpp): `cuda`
// without a usable GPU is a user error naming the deck line and the cause;
// `auto` falls back to the host and says why; the real probe on a machine
// without a GPU (CI) reports a cause instead of claiming a GPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "base/error.hpp"
#include "train/device_choice.hpp"

using namespace ftrain;

namespace {
const DeckLocation kWhere{"run.in", 3};
std::string no_gpu() { return "cudaGetDeviceCount failed: cudaErrorNoDevice"; }
std::string gpu() { return {}; }
const CudaProbes kNoGpu{&no_gpu, &no_gpu}, kGpu{&gpu, &gpu};
// A driver with a device, but a backend library that does not register.
const CudaProbes kDriverOnly{&gpu, [] { return std::string("libftrain_cuda.so did not register: no sm_90 image"); }};

std::string user_error_of(deck::DeviceKind requested, const CudaProbes& probes) {
  try {
    choose_device(requested, kWhere, probes);
  } catch (const UserError& e) {
    return e.what();
  }
  return "<no error>";
}
}  // namespace

TEST(DeviceChoice, CudaWithoutAGpuStopsNamingTheCause) {
  const std::string m = user_error_of(deck::DeviceKind::cuda, kNoGpu);
  EXPECT_NE(m.find("run.in:3"), std::string::npos) << m;
  EXPECT_NE(m.find("no usable CUDA GPU"), std::string::npos) << m;
  EXPECT_NE(m.find("cudaErrorNoDevice"), std::string::npos) << m;
}

TEST(DeviceChoice, CudaWithAGpuRunsTheEngineOnIt) {
  const DeviceChoice c = choose_device(deck::DeviceKind::cuda, kWhere, kGpu);
  EXPECT_EQ(c.device, Device::cuda);
  EXPECT_EQ(c.reason, "device cuda");
}

TEST(DeviceChoice, ANamedBackendLibraryDecidesWithoutTheDriver) {
  // FTRAIN_CUDA_BACKEND=<library>: its registration decides (the simulated
  // device has no driver behind it); without it the driver is asked first.
  const CudaProbes no_driver_but_backend{&no_gpu, &gpu};
  EXPECT_NE(user_error_of(deck::DeviceKind::cuda, no_driver_but_backend).find("cudaErrorNoDevice"), std::string::npos);
  ASSERT_EQ(setenv("FTRAIN_CUDA_BACKEND", "/some/libbackend.so", 1), 0);
  EXPECT_EQ(choose_device(deck::DeviceKind::cuda, kWhere, no_driver_but_backend).device, Device::cuda);
  EXPECT_NE(user_error_of(deck::DeviceKind::cuda, kNoGpu).find("cudaErrorNoDevice"), std::string::npos)
      << "the named library's refusal is still the cause";
  ASSERT_EQ(setenv("FTRAIN_CUDA_BACKEND", "none", 1), 0);
  EXPECT_NE(user_error_of(deck::DeviceKind::cuda, no_driver_but_backend).find("cudaErrorNoDevice"), std::string::npos);
  unsetenv("FTRAIN_CUDA_BACKEND");
}

TEST(DeviceChoice, CudaAsksTheBackendWhenTheDriverIsThere) {
  const std::string m = user_error_of(deck::DeviceKind::cuda, kDriverOnly);
  EXPECT_NE(m.find("no sm_90 image"), std::string::npos) << m;
}

TEST(DeviceChoice, AutoRunsOnTheHostAndSaysWhy) {
  DeviceChoice c = choose_device(deck::DeviceKind::automatic, kWhere, kNoGpu);
  EXPECT_EQ(c.device, Device::host);
  EXPECT_NE(c.reason.find("auto: no usable CUDA GPU (cudaGetDeviceCount"), std::string::npos) << c.reason;
  c = choose_device(deck::DeviceKind::automatic, kWhere, kGpu);
  EXPECT_EQ(c.device, Device::host);
  EXPECT_NE(c.reason.find("a CUDA GPU is usable, but `auto` stays on the host"), std::string::npos) << c.reason;
  EXPECT_EQ(choose_device(deck::DeviceKind::host, kWhere, kNoGpu).device, Device::host);
}

TEST(DeviceChoice, TheRealProbesGiveACauseOrAGpu) {
  const std::string why_not = probe_cuda_driver();
  if (why_not.empty()) GTEST_SKIP() << "a CUDA driver with a device is here";
  EXPECT_NE(why_not.find("libcuda"), std::string::npos) << why_not;
  const std::string m = user_error_of(deck::DeviceKind::cuda, real_cuda_probes());
  EXPECT_NE(m.find("no usable CUDA GPU"), std::string::npos) << m;
  // This test links the static engine, so it finds no libftrain_cuda.so beside it.
  EXPECT_NE(probe_cuda_backend().find("libftrain_cuda.so"), std::string::npos);
}

// `ftrain --check` on a login node (issue 36): `device cuda` without a GPU is
// planned for, not refused; the reason stays in the header. A real run still
// stops (choose_device, above).
TEST(DeviceChoice, CheckPlansCudaWithoutAGpu) {
  const DeviceChoice c = choose_device_for_check(deck::DeviceKind::cuda, kWhere, kNoGpu);
  EXPECT_EQ(c.device, Device::cuda);
  EXPECT_TRUE(c.planned_without_gpu);
  EXPECT_NE(c.reason.find("planned"), std::string::npos) << c.reason;
  EXPECT_NE(c.reason.find("cudaErrorNoDevice"), std::string::npos) << c.reason;
  EXPECT_FALSE(choose_device_for_check(deck::DeviceKind::cuda, kWhere, kGpu).planned_without_gpu);
  EXPECT_EQ(choose_device_for_check(deck::DeviceKind::automatic, kWhere, kNoGpu).device, Device::host);
  for (const char* unchecked : {"libftrain_cuda.so", "cuDNN", "NCCL", "CUDA_VISIBLE_DEVICES"})
    EXPECT_NE(unchecked_without_gpu().find(unchecked), std::string::npos) << unchecked;
}
