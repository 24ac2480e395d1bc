// --check --gpu NAME (train/gpu_models.hpp): the presets' memory is what the
// driver reports, aliases resolve, a near miss gets a suggestion.
#include <gtest/gtest.h>

#include <string>

#include "base/error.hpp"
#include "train/gpu_models.hpp"

using namespace ftrain;

TEST(GpuModels, PresetsAndAliases) {
  const GpuModel& h100 = find_gpu_model("h100-80gb");
  EXPECT_DOUBLE_EQ(h100.memory_bytes, 81559.0 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(h100.bf16_tflops, 989.4);
  EXPECT_EQ(&find_gpu_model("h100"), &h100);
  EXPECT_EQ(find_gpu_model("h100-nvl").name, "h100-94gb");
  EXPECT_EQ(find_gpu_model("h200").name, "h200-141gb");
  EXPECT_EQ(find_gpu_model("a100-40gb").fp8_tflops, 0.0) << "A100 has no FP8 tensor cores";
  for (const GpuModel& m : gpu_models()) {
    EXPECT_GT(m.memory_bytes, 40e9) << m.name;
    EXPECT_GT(m.bf16_tflops, m.tf32_tflops) << m.name;
  }
}

TEST(GpuModels, UnknownNameSuggestsAndLists) {
  try {
    find_gpu_model("h10-80gb");
    FAIL() << "no error for an unknown GPU";
  } catch (const UserError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--gpu"), std::string::npos) << m;
    EXPECT_NE(m.find("did you mean 'h100-80gb'"), std::string::npos) << m;
    EXPECT_NE(m.find("a100-40gb"), std::string::npos) << m;
  }
}
