// The optimizer step over sharded flat parameters: AdamW, gradient-norm
// clipping and the divergence (non-finite) flag.
//
// The FSDP engine owns the shards and decides which are trainable; it hands
// this component one TrainableShard per trainable flat parameter, in the same
// order every step (the order of the f64 norm partials, so the norm is the
// same bits on every rank count). The component owns what the optimizer
// keeps between steps: the step count AdamW's bias correction uses and the
// device scalars of the clip (norm, factor, sticky diverged step).
//
// Two ways to step:
//  * step(): the update with a clip factor the caller computed (tests, tools
//    that read grad_norm() first: a host read);
//  * clip_and_step(): no host read (PyTorch AMP's found_inf,
//    share/doc/execution-model.md): the gradient's sum of squares is
//    accumulated (ops::sum_squares_accumulate) and all-reduced over the shard
//    group in an f64 device tensor; ops::clip_coefficient makes the norm, the
//    clip factor (clip_grad_norm <= 0: off) and the sticky diverged flag (the
//    first diverged `step`); ops::adamw_update_chunks_guarded applies the
//    update only while that flag is clear, so a diverged step, and every step
//    after it until the host looks, changes no master weight or moment.
// Neither synchronizes: the caller does, once it has dropped what the update
// made stale.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "comm/communicator.hpp"
#include "core/tensor.hpp"
#include "runtime/execution_context.hpp"

namespace ftrain::optim {

struct AdamWHyper {
  float lr = 3e-4f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.0f;
};

// One trainable flat parameter's shard as the optimizer sees it: f32
// master, gradient and moments of the same length, and its multi-tensor
// chunk table (kernels/adamw_chunks.hpp), which covers every piece with the
// piece's weight-decay flag; undefined when this rank's shard is padding only.
struct TrainableShard {
  Tensor* master = nullptr;
  Tensor* grad = nullptr;
  Tensor* exp_avg = nullptr;
  Tensor* exp_avg_sq = nullptr;
  const Tensor* chunks = nullptr;
  std::int64_t pieces = 0;  // parameter tensor pieces the shard holds (counted, not used)
  // norm_whole false: only the views norm_parts of *grad count toward the
  // gradient norm (parallel tensor: a tensor rank other than 0 leaves out the
  // tensors every tensor rank holds whole, which rank 0 counts once).
  bool norm_whole = true;
  std::vector<Tensor> norm_parts;
  // Optional: called once this shard's update is enqueued, before the next
  // shard's (offload starts the updated shard's copy to the device there).
  std::function<void()> updated;
};

// What one step launched: one AdamW launch per shard with a chunk table (the
// multi-tensor AdamW), and the parameter tensor pieces those covered.
struct StepLaunches {
  std::int64_t launches = 0;
  std::int64_t tensors = 0;
};

// What the host reads of the last clip_and_step. Collective values: every
// rank of the shard group reads the same norm and flag.
struct StepHealth {
  double grad_norm = 0;                  // of the last clip_and_step
  std::int64_t first_diverged_step = 0;  // 0: none since the flag was made
};

class ShardedAdamW {
 public:
  explicit ShardedAdamW(ExecutionContext& exec) : exec_(exec) {}

  // Global L2 norm of the gradients (one all-reduce of the squared shard
  // norms over the shard group: replicas hold identical reduced shards, so
  // the shard group covers every element once). Reads the host.
  double grad_norm(const std::vector<TrainableShard>& shards, Communicator& shard_comm);
  // AdamW on every shard; grad_scale multiplies gradients (clipping).
  StepLaunches step(const std::vector<TrainableShard>& shards, const AdamWHyper& hyper, float grad_scale);
  StepLaunches clip_and_step(const std::vector<TrainableShard>& shards, Communicator& shard_comm, const AdamWHyper& hyper,
                             double clip_grad_norm, std::int64_t step);
  // Waits for the compute stream; zeros (and no read) before the first
  // clip_and_step.
  StepHealth read_health();
  bool has_health() const { return clip_.sum_sq.defined(); }

  // Updates applied so far; resume continues AdamW's bias correction from a
  // checkpoint's count.
  std::int64_t steps() const { return steps_; }
  void set_steps(std::int64_t steps) { steps_ = steps; }

 private:
  template <class Update>
  StepLaunches update_each(const std::vector<TrainableShard>& shards, const Update& update);

  ExecutionContext& exec_;
  std::int64_t steps_ = 0;
  // clip_and_step's device scalars, made on first use.
  struct ClipState {
    Tensor sum_sq;         // f64[1], all-reduced over the shard group
    Tensor norm;           // f64[1], the last step's global norm
    Tensor scale;          // f32[1], the last step's clip factor
    Tensor diverged_step;  // i64[1], sticky: the first step whose norm was not finite
  };
  ClipState clip_;
};

}  // namespace ftrain::optim
