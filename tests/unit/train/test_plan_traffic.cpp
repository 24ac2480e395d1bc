// The fsdp group's bytes per rank and step, each collective as a ring moves
// it: (n - 1) / n of a gathered or reduce-scattered buffer, twice that for
// an all-reduce, per strategy, with accumulation and no_sync.
#include <gtest/gtest.h>

#include "train/plan_traffic.hpp"

using namespace ftrain;

namespace {

// Two units of 4000 and 8000 elements per tensor rank, sharded over 4 of an
// fsdp group of 8 (hybrid_shard: 2 replicas) or over all 8.
RunPlan plan(int shard_group) {
  RunPlan p;
  p.fsdp_group_size = 8;
  p.shard_group_size = shard_group;
  p.units = {UnitPlan{"a", 4000, 4000 / shard_group, 4000}, UnitPlan{"b", 8000, 8000 / shard_group, 8000}};
  return p;
}

}  // namespace

TEST(PlanTraffic, FsdpBytesPerStrategy) {
  FsdpOptions o;
  o.param_dtype = DType::bf16;
  o.reduce_dtype = DType::f32;
  StepTraffic t;
  o.strategy = ShardingStrategy::full_shard;
  add_fsdp_traffic(t, o, plan(8), 2);
  // 2 micro-steps x 2 gathers (forward, backward) x 7/8 of 12000 bf16 elements.
  EXPECT_DOUBLE_EQ(t.fsdp_gather, 2 * 2 * 7.0 / 8 * 12000 * 2);
  EXPECT_DOUBLE_EQ(t.fsdp_reduce, 2 * 7.0 / 8 * 12000 * 4);

  t = {};
  o.strategy = ShardingStrategy::shard_grad_op;
  o.no_sync = true;  // one reduction per step
  add_fsdp_traffic(t, o, plan(8), 2);
  EXPECT_DOUBLE_EQ(t.fsdp_gather, 2 * 1 * 7.0 / 8 * 12000 * 2);
  EXPECT_DOUBLE_EQ(t.fsdp_reduce, 1 * 7.0 / 8 * 12000 * 4);

  t = {};
  o.strategy = ShardingStrategy::hybrid_shard;
  o.no_sync = false;
  add_fsdp_traffic(t, o, plan(4), 1);
  // Gathers over the shard group of 4; the gradient reduce-scattered over
  // it, then its quarter all-reduced over the 2 replicas.
  EXPECT_DOUBLE_EQ(t.fsdp_gather, 2 * 3.0 / 4 * 12000 * 2);
  EXPECT_DOUBLE_EQ(t.fsdp_reduce, (3.0 / 4 * 12000 + 2 * 1.0 / 2 * 3000) * 4);

  t = {};
  o.strategy = ShardingStrategy::no_shard;
  add_fsdp_traffic(t, o, plan(1), 1);
  EXPECT_DOUBLE_EQ(t.fsdp_gather, 0);
  EXPECT_DOUBLE_EQ(t.fsdp_reduce, 2 * 7.0 / 8 * 12000 * 4);  // an all-reduce over the 8
}
