// Where the MFU peak comes from (deck, environment, recorded benchmark,
// benchmark now and recorded) and that MFU is never stated above 100%.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "base/error.hpp"
#include "train/device_peak.hpp"

using namespace ftrain;

namespace {
struct FakeEnvironment {
  std::map<std::string, std::string> vars;
  EnvironmentLookup lookup() const {
    return [this](const char* name) -> const char* {
      const auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  }
};

std::string scratch_file(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("ftrain_peak_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / name;
  std::filesystem::remove(path);
  return path.string();
}
}  // namespace

TEST(DevicePeak, MfuIsNeverAboveOne) {
  EXPECT_DOUBLE_EQ(*model_flops_utilisation(50e9, 100e9), 0.5);
  EXPECT_DOUBLE_EQ(*model_flops_utilisation(100e9, 100e9), 1.0);
  EXPECT_FALSE(model_flops_utilisation(131e9, 100e9).has_value()) << "131% must not be stated";
  EXPECT_FALSE(model_flops_utilisation(1e9, 0.0).has_value());
}

TEST(DevicePeak, DeckWinsOverEnvironment) {
  FakeEnvironment env;
  env.vars["FTRAIN_PEAK_TFLOPS"] = "2";
  const DevicePeak p = resolve_host_peak(0.5, env.lookup(), 4);
  EXPECT_DOUBLE_EQ(p.flops_per_second, 0.5e12);
  EXPECT_NE(p.description.find("deck"), std::string::npos);
}

TEST(DevicePeak, EnvironmentStatesThePeak) {
  FakeEnvironment env;
  env.vars["FTRAIN_PEAK_TFLOPS"] = "1.5";
  env.vars["FTRAIN_PEAK_FILE"] = scratch_file("unused.json");
  const DevicePeak p = resolve_host_peak(std::nullopt, env.lookup(), 4);
  EXPECT_DOUBLE_EQ(p.flops_per_second, 1.5e12);
  EXPECT_NE(p.description.find("FTRAIN_PEAK_TFLOPS=1.5"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(env.vars["FTRAIN_PEAK_FILE"])) << "a stated peak needs no benchmark";
  env.vars["FTRAIN_PEAK_TFLOPS"] = "fast";
  EXPECT_THROW(resolve_host_peak(std::nullopt, env.lookup(), 4), UserError);
}

// The benchmark runs once; later starts read the same number back, scaled by
// the cores per rank, whatever the machine is doing then.
TEST(DevicePeak, BenchmarkRunsOnceAndIsRecorded) {
  FakeEnvironment env;
  env.vars["FTRAIN_PEAK_FILE"] = scratch_file("host_peak.json");
  const DevicePeak first = resolve_host_peak(std::nullopt, env.lookup(), 1);
  ASSERT_GT(first.flops_per_second, 0);
  EXPECT_NE(first.description.find("measured now and recorded"), std::string::npos) << first.description;
  ASSERT_TRUE(std::filesystem::exists(env.vars["FTRAIN_PEAK_FILE"]));
  const DevicePeak second = resolve_host_peak(std::nullopt, env.lookup(), 2);
  EXPECT_NE(second.description.find("recorded"), std::string::npos);
  EXPECT_EQ(second.description.find("measured now"), std::string::npos) << second.description;
  EXPECT_NEAR(second.flops_per_second, 2 * first.flops_per_second, 1e-6 * first.flops_per_second);
  // A damaged record is refused by name rather than silently re-measured.
  std::ofstream(env.vars["FTRAIN_PEAK_FILE"]) << "{ not json";
  EXPECT_THROW(resolve_host_peak(std::nullopt, env.lookup(), 1), UserError);
}
