// --device-memory sizes: units are required and mean what they say; the
// offload plan moves the sharded state as each setting says.
#include <gtest/gtest.h>

#include "base/error.hpp"
#include "train/plan.hpp"
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

// Where each offload setting puts the sharded state (plan.hpp plan_offload):
// none keeps all 16 bytes per shard element on the device; optimizer moves
// them to the host and keeps the compute-dtype shard plus one unit's f32
// reduced-gradient shard on the device; all moves the compute shard to the
// host too and stages limit_all_gathers units' compute shards.
TEST(PlanFit, OffloadMovesTheShardedStateToTheHost) {
  RunPlan p;
  p.units = {UnitPlan{"a", 800, 100}, UnitPlan{"b", 1600, 200}};
  p.state_bytes_per_rank = 16 * 300;
  FsdpOptions o;
  o.param_dtype = DType::bf16;
  o.limit_all_gathers = 2;
  plan_offload(p, o);
  EXPECT_EQ(p.device_state_bytes_per_rank, 16 * 300);
  EXPECT_EQ(p.host_state_bytes_per_rank, 0);
  o.offload = Offload::optimizer;
  plan_offload(p, o);
  EXPECT_EQ(p.device_state_bytes_per_rank, 2 * 300 + 4 * 200);
  EXPECT_EQ(p.host_state_bytes_per_rank, 16 * 300);
  o.offload = Offload::all;
  plan_offload(p, o);
  EXPECT_EQ(p.device_state_bytes_per_rank, 2 * 2 * 200 + 4 * 200);
  EXPECT_EQ(p.host_state_bytes_per_rank, 16 * 300 + 2 * 300);
  EXPECT_EQ(p.offload, Offload::all);
}

// Under LoRA only the adapters have optimizer state: optimizer moves theirs
// and keeps the frozen base (bf16 here) on the device; all moves the base too.
TEST(PlanFit, OffloadUnderLoraMovesTheAdaptersState) {
  RunPlan p;
  p.lora = true;
  p.frozen_base_dtype = DType::bf16;
  p.units = {UnitPlan{"a", 800, 100}, UnitPlan{"b", 1600, 200}};
  p.state_bytes_per_rank = 2 * 300 + 16 * 10;  // base shards + 10 adapter shard elements
  FsdpOptions o;
  o.param_dtype = DType::bf16;
  o.limit_all_gathers = 1;
  o.offload = Offload::optimizer;
  plan_offload(p, o);
  EXPECT_EQ(p.device_state_bytes_per_rank, 2 * 300);
  EXPECT_EQ(p.host_state_bytes_per_rank, 16 * 10);
  o.offload = Offload::all;
  plan_offload(p, o);
  EXPECT_EQ(p.device_state_bytes_per_rank, 2 * 200);
  EXPECT_EQ(p.host_state_bytes_per_rank, 16 * 10 + 2 * 300);
}
