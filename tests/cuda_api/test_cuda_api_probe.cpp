// The CUDA backend's capability probe looks at every visible device, not
// only device 0 (issue 33, fault 10): a rank may be bound to any of them.
// Its own process: the backend registers once per process.
#include <gtest/gtest.h>

#include <string>

#include "base/error.hpp"
#include "cuda_api/cuda_api_recorder.hpp"
#include "runtime/allocator.hpp"

namespace {

using namespace ftrain;

TEST(CapabilityProbe, AnOldSecondDeviceIsRefusedNamingIt) {
  cuda_api::set_device_count(2);
  cuda_api::set_compute_capability(1, 7, 0);  // device 0 is fine (9.0), device 1 a Volta
  try {
    find_allocator(Device::cuda);
    FAIL() << "the CUDA backend registered although device 1 has compute capability 7.0";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("CUDA device 1"), std::string::npos) << what;
    EXPECT_NE(what.find("7.0"), std::string::npos) << what;
  }
  for (const cuda_api::Call& c : cuda_api::calls())
    EXPECT_FALSE(c.makes_resource) << "the probe made something: " << cuda_api::describe(c);
}

}  // namespace
