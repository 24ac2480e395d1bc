// --device-memory sizes: units are required and mean what they say.
#include <gtest/gtest.h>

#include "base/error.hpp"
#include "train/plan_fit.hpp"

using namespace ftrain;

TEST(PlanFit, MemorySizes) {
  EXPECT_DOUBLE_EQ(parse_memory_size("80GB", "--device-memory"), 80e9);
  EXPECT_DOUBLE_EQ(parse_memory_size("80GiB", "--device-memory"), 80.0 * (1 << 30));
  EXPECT_DOUBLE_EQ(parse_memory_size("1.5TB", "--device-memory"), 1.5e12);
  EXPECT_DOUBLE_EQ(parse_memory_size("512MiB", "--device-memory"), 512.0 * (1 << 20));
  for (const char* bad : {"80", "80gb", "GB", "-1GB", "0GB", "80 GB", "eightyGB"})
    EXPECT_THROW(parse_memory_size(bad, "--device-memory"), UserError) << bad;
}
