#include "optim/sharded_adamw.hpp"

#include <cmath>

#include "kernels/ops.hpp"

namespace ftrain::optim {

double ShardedAdamW::grad_norm(const std::vector<TrainableShard>& shards, Communicator& shard_comm) {
  double local = 0.0;
  for (const TrainableShard& s : shards) {
    if (s.norm_whole) {
      local += ops::sum_squares(exec_, *s.grad);
    } else {
      for (const Tensor& part : s.norm_parts) local += ops::sum_squares(exec_, part);
    }
  }
  return std::sqrt(shard_comm.all_reduce_sum(local));
}

// One launch per shard over its chunk table (decay per entry): AdamW is
// element-wise, so the results are the bits of one update per tensor.
template <class Update>
StepLaunches ShardedAdamW::update_each(const std::vector<TrainableShard>& shards, const Update& update) {
  ++steps_;
  StepLaunches launched;
  for (const TrainableShard& s : shards) {
    launched.tensors += s.pieces;
    if (!s.chunks->defined()) continue;  // this rank's shard is padding only
    update(s);
    if (s.updated) s.updated();
    ++launched.launches;
  }
  return launched;
}

StepLaunches ShardedAdamW::step(const std::vector<TrainableShard>& shards, const AdamWHyper& h, float grad_scale) {
  return update_each(shards, [&](const TrainableShard& s) {
    ops::adamw_update_chunks(exec_, *s.master, *s.grad, *s.exp_avg, *s.exp_avg_sq, *s.chunks, h.lr, h.beta1, h.beta2,
                             h.eps, h.weight_decay, steps_, grad_scale);
  });
}

StepLaunches ShardedAdamW::clip_and_step(const std::vector<TrainableShard>& shards, Communicator& shard_comm,
                                         const AdamWHyper& h, double clip_grad_norm, std::int64_t step) {
  if (!clip_.sum_sq.defined()) {
    clip_.sum_sq = Tensor::empty({1}, DType::f64, exec_.device(), "clip.sum_squares");
    clip_.norm = Tensor::zeros({1}, DType::f64, exec_.device(), "clip.grad_norm");
    clip_.scale = Tensor::empty({1}, DType::f32, exec_.device(), "clip.scale");
    clip_.diverged_step = Tensor::zeros({1}, DType::i64, exec_.device(), "clip.diverged_step");
  }
  // The arithmetic of grad_norm(): per-shard f64 partials added in shard
  // order, one f64 sum over the shard group, then sqrt; the clip factor as
  // a caller of step() computes it.
  ops::fill(exec_, clip_.sum_sq, 0.0f);
  for (const TrainableShard& s : shards) {
    if (s.norm_whole) {
      ops::sum_squares_accumulate(exec_, *s.grad, clip_.sum_sq);
    } else {
      for (const Tensor& part : s.norm_parts) ops::sum_squares_accumulate(exec_, part, clip_.sum_sq);
    }
  }
  if (shard_comm.size() > 1) shard_comm.all_reduce_sum(clip_.sum_sq, exec_.compute().record()).wait();
  ops::clip_coefficient(exec_, clip_.sum_sq, clip_grad_norm, step, clip_.norm, clip_.scale, clip_.diverged_step);
  return update_each(shards, [&](const TrainableShard& s) {
    ops::adamw_update_chunks_guarded(exec_, *s.master, *s.grad, *s.exp_avg, *s.exp_avg_sq, *s.chunks, h.lr, h.beta1,
                                     h.beta2, h.eps, h.weight_decay, steps_, clip_.scale, clip_.diverged_step);
  });
}

StepHealth ShardedAdamW::read_health() {
  StepHealth health;
  if (!clip_.sum_sq.defined()) return health;  // no step yet
  exec_.compute().synchronize();
  const auto host = [](const Tensor& t) { return t.device() == Device::host ? t : to_device(t, Device::host); };
  health.grad_norm = host(clip_.norm).data_as<double>()[0];
  health.first_diverged_step = host(clip_.diverged_step).data_as<std::int64_t>()[0];
  return health;
}

}  // namespace ftrain::optim
