// Loss masks (issue 16): a target of -100 (a prompt token of instruction
// data, data/token_dataset.hpp) contributes zero loss and zero gradient, and
// the step's loss is the mean over the trained targets only (Hugging Face's
// convention: the trainer divides by the global count of targets != -100).
// The distributed result must equal a single rank's on the whole batch.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "fsdp/engine.hpp"
#include "plugin/loader.hpp"

using namespace ftrain;

namespace {

constexpr std::int64_t kRows = 4, kSeq = 8, kVocab = 37;
constexpr std::int32_t kIgnore = -100;

ModelHandle tiny_llama() {
  return PluginLoader().create_model("llama", "tiny",
                                     {{"hidden_size", "24"}, {"intermediate_size", "40"}, {"num_hidden_layers", "2"},
                                      {"vocab_size", std::to_string(kVocab)}});
}

// Rows [first, first + count) of a [kRows, kSeq] batch.
Batch rows_of(const std::vector<std::int32_t>& inputs, const std::vector<std::int32_t>& targets, std::int64_t first,
              std::int64_t count) {
  Batch b;
  b.inputs = Tensor::empty({count, kSeq}, DType::i32);
  b.targets = Tensor::empty({count, kSeq}, DType::i32);
  for (std::int64_t i = 0; i < count * kSeq; ++i) {
    b.inputs.data_as<std::int32_t>()[i] = inputs[static_cast<std::size_t>(first * kSeq + i)];
    b.targets.data_as<std::int32_t>()[i] = targets[static_cast<std::size_t>(first * kSeq + i)];
  }
  return b;
}

// The whole reduced gradient, gathered from the shard group, every unit.
std::vector<float> gathered_grads(FsdpEngine& engine) {
  std::vector<float> out;
  for (const auto& flat : engine.units()) {
    Tensor full = Tensor::empty({flat->padded_numel()}, DType::f32);
    engine.shard_comm().all_gather(flat->grad, full).wait();
    const auto v = to_float_vector(full);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

TEST(LossMask, MaskedTargetsAddNothingAndTheMeanIsOverTrainedTargetsOnEveryRankCount) {
  MpiCommunicator world(MPI_COMM_WORLD);
  if (kRows % world.size() != 0) GTEST_SKIP() << kRows << " rows do not split over " << world.size() << " ranks";
  // A batch like instruction data: per row a prompt (masked) then a response
  // (trained); row 2 is all prompt, so at np 4 one rank has no trained target.
  std::vector<std::int32_t> inputs(kRows * kSeq), full(kRows * kSeq), masked(kRows * kSeq);
  const std::int64_t prompt_length[kRows] = {3, 5, kSeq, 1};
  std::int64_t n_trained = 0;
  for (std::int64_t r = 0; r < kRows; ++r)
    for (std::int64_t t = 0; t < kSeq; ++t) {
      const auto i = static_cast<std::size_t>(r * kSeq + t);
      inputs[i] = static_cast<std::int32_t>((r * 11 + t * 7 + 3) % kVocab);
      full[i] = static_cast<std::int32_t>((r * 5 + t * 13 + 1) % kVocab);
      const bool trained = t >= prompt_length[r];
      masked[i] = trained ? full[i] : kIgnore;
      n_trained += trained;
    }
  const float scale = 1.0f / static_cast<float>(n_trained);
  FsdpOptions options;

  // Distributed: rank r reads its rows, the trainer's global-count scale.
  auto model = tiny_llama();
  FsdpEngine engine(*model, world, options);
  engine.init_random(5);
  engine.zero_grad();
  const std::int64_t mine = kRows / world.size();
  engine.forward_backward(rows_of(inputs, masked, world.rank() * mine, mine), scale);
  const double local_sum = engine.take_train_loss();
  const double loss = world.all_reduce_sum(local_sum) / static_cast<double>(n_trained);
  const std::vector<float> grads = gathered_grads(engine);

  // One rank, the whole batch, and the same batch target by target.
  MpiCommunicator self(MPI_COMM_SELF);
  auto ref_model = tiny_llama();
  FsdpEngine ref(*ref_model, self, options);
  ref.init_random(5);
  ref.zero_grad();
  ref.forward_backward(rows_of(inputs, masked, 0, kRows), scale);
  const double ref_loss = ref.take_train_loss() / n_trained;
  const std::vector<float> ref_grads = gathered_grads(ref);

  EXPECT_NEAR(loss, ref_loss, 1e-5 * std::abs(ref_loss)) << "np " << world.size() << " vs one rank";
  ASSERT_EQ(grads.size(), ref_grads.size());
  for (std::size_t i = 0; i < grads.size(); ++i)
    ASSERT_NEAR(grads[i], ref_grads[i], 1e-5f * (1.0f + std::abs(ref_grads[i]))) << "gradient element " << i;

  // The mean over trained targets only: the loss and gradient of the masked
  // batch are the sums of those of its trained targets taken one at a time,
  // divided by their count; masked positions appear in none of the terms.
  ref.zero_grad();
  double sum_of_singles = 0;
  for (std::size_t i = 0; i < masked.size(); ++i) {
    if (masked[i] == kIgnore) continue;
    std::vector<std::int32_t> single(masked.size(), kIgnore);
    single[i] = masked[i];
    ref.forward_backward(rows_of(inputs, single, 0, kRows), scale);
    sum_of_singles += ref.take_train_loss();
  }
  EXPECT_NEAR(sum_of_singles / n_trained, ref_loss, 1e-5 * std::abs(ref_loss));
  const std::vector<float> single_grads = gathered_grads(ref);
  for (std::size_t i = 0; i < grads.size(); ++i)
    ASSERT_NEAR(single_grads[i], ref_grads[i], 1e-5f * (1.0f + std::abs(ref_grads[i]))) << "gradient element " << i;

  // The unmasked batch trains on more targets: a different loss, so the
  // comparisons above could tell masked from unmasked.
  ref.zero_grad();
  ref.forward_backward(rows_of(inputs, full, 0, kRows), 1.0f);
  const double unmasked = ref.take_train_loss() / (kRows * kSeq);
  EXPECT_GT(std::abs(unmasked - ref_loss), 1e-3);

  // Every target masked: zero loss, every gradient element exactly zero.
  ref.zero_grad();
  const std::vector<std::int32_t> none(masked.size(), kIgnore);
  ref.forward_backward(rows_of(inputs, none, 0, kRows), scale);
  EXPECT_EQ(ref.take_train_loss(), 0.0);
  for (const float g : gathered_grads(ref)) ASSERT_EQ(g, 0.0f);
}

}  // namespace
