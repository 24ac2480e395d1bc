// optim::ShardedAdamW::step: the update of each shard is exactly the one
// multi-tensor AdamW launch over its chunk table (the engine's goldens
// depend on those bits), shards of padding only launch nothing, and the
// step count AdamW's bias correction uses is the component's.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/adamw_chunks.hpp"
#include "kernels/ops.hpp"
#include "optim/sharded_adamw.hpp"

using namespace ftrain;

namespace {

struct Shard {
  Tensor master, grad, exp_avg, exp_avg_sq, chunks;
  optim::TrainableShard view(std::int64_t pieces) {
    return {&master, &grad, &exp_avg, &exp_avg_sq, &chunks, pieces};
  }
};

Shard make_shard(const std::vector<AdamwSegment>& segments, float offset) {
  Shard s;
  std::vector<float> master(12), grad(12);
  for (int i = 0; i < 12; ++i) {
    master[static_cast<std::size_t>(i)] = offset + 0.25f * static_cast<float>(i);
    grad[static_cast<std::size_t>(i)] = 0.5f - 0.125f * static_cast<float>(i);
  }
  s.master = from_floats({12}, master);
  s.grad = from_floats({12}, grad);
  s.exp_avg = Tensor::zeros({12}, DType::f32, Device::host, "m");
  s.exp_avg_sq = Tensor::zeros({12}, DType::f32, Device::host, "v");
  s.chunks = adamw_chunk_table(segments, Device::host, "chunks", 4);
  return s;
}

}  // namespace

TEST(ShardedAdamW, StepIsTheMultiTensorUpdateOfEachShard) {
  ExecutionContext exec{ExecutionOptions{}};
  const std::vector<AdamwSegment> segments = {{0, 5, true}, {5, 4, false}};  // 3 elements of padding
  Shard a = make_shard(segments, 1.0f), b = make_shard(segments, -2.0f);
  Shard padding = make_shard({}, 0.0f);  // no chunk table: nothing to launch
  Shard want_a = make_shard(segments, 1.0f), want_b = make_shard(segments, -2.0f);

  optim::ShardedAdamW optimizer(exec);
  optim::AdamWHyper h;
  h.weight_decay = 0.1f;
  for (std::int64_t step = 1; step <= 3; ++step) {
    const optim::StepLaunches launched =
        optimizer.step({a.view(2), padding.view(0), b.view(2)}, h, /*grad_scale=*/0.5f);
    EXPECT_EQ(launched.launches, 2);
    EXPECT_EQ(launched.tensors, 4);
    EXPECT_EQ(optimizer.steps(), step);
    for (Shard* s : {&want_a, &want_b})
      ops::adamw_update_chunks(exec, s->master, s->grad, s->exp_avg, s->exp_avg_sq, s->chunks, h.lr, h.beta1,
                               h.beta2, h.eps, h.weight_decay, step, 0.5f);
  }
  exec.synchronize();
  EXPECT_EQ(to_float_vector(a.master), to_float_vector(want_a.master));
  EXPECT_EQ(to_float_vector(a.exp_avg_sq), to_float_vector(want_a.exp_avg_sq));
  EXPECT_EQ(to_float_vector(b.master), to_float_vector(want_b.master));
  EXPECT_EQ(to_float_vector(b.exp_avg), to_float_vector(want_b.exp_avg));
  EXPECT_FALSE(optimizer.has_health());  // no clip_and_step yet: nothing to read
  EXPECT_EQ(optimizer.read_health().first_diverged_step, 0);
}

TEST(ShardedAdamW, ResumeContinuesTheStepCount) {
  ExecutionContext exec{ExecutionOptions{}};
  optim::ShardedAdamW optimizer(exec);
  optimizer.set_steps(41);
  EXPECT_EQ(optimizer.step({}, optim::AdamWHyper{}, 1.0f).launches, 0);
  EXPECT_EQ(optimizer.steps(), 42);
}
