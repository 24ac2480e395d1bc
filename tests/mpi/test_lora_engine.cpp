// LoRA in the FSDP engine (issue 16), at np 1, 2 and 4: the frozen base has
// no gradient and no optimizer state (read from the engine's flat
// parameters), receives no gradient in a step and stays bit-identical after
// optimizer steps, while the adapters get gradients and change; the same
// mechanism adapts Llama (q_proj, v_proj) and ViT (all-linear: qkv, proj,
// fc1, fc2); a target that matches nothing is a user error naming what exists.
// Under param_dtype bf16 the frozen base is stored in bf16 (issue 36): 2
// bytes per parameter, as the plan says, training exactly as with an f32
// base and the same on 1 rank as on this run's ranks.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>

#include "comm/mpi_communicator.hpp"
#include "base/error.hpp"
#include "fsdp/engine.hpp"
#include "plugin/loader.hpp"
#include "train/plan.hpp"

using namespace ftrain;

namespace {

constexpr std::int64_t kHidden = 24, kInter = 40, kLayers = 2, kVocab = 37, kRank = 4;

ModelHandle tiny_llama() {
  return PluginLoader().create_model("llama", "tiny",
                                     {{"hidden_size", "24"}, {"intermediate_size", "40"}, {"num_hidden_layers", "2"},
                                      {"vocab_size", "37"}, {"num_attention_heads", "4"}, {"num_key_value_heads", "2"}});
}

FsdpOptions lora_options(ShardingStrategy strategy, int world_size) {
  FsdpOptions o;
  o.strategy = strategy;
  o.shard_group_size = world_size >= 2 ? 2 : 1;
  o.seed = 7;
  o.lora.enabled = true;
  o.lora.rank = kRank;
  o.lora.alpha = 8;
  o.lora.dropout = 0.1;
  o.lora.targets = {"q_proj", "v_proj"};
  return o;
}

Batch token_batch(int rank) {
  Batch batch;
  batch.inputs = Tensor::empty({2, 8}, DType::i32);
  batch.targets = Tensor::empty({2, 8}, DType::i32);
  for (int i = 0; i < 16; ++i) {
    batch.inputs.data_as<std::int32_t>()[i] = (i * 7 + rank) % kVocab;
    batch.targets.data_as<std::int32_t>()[i] = (i * 5 + 3 + rank) % kVocab;
  }
  batch.first_sample = 2 * rank;
  return batch;
}

std::vector<std::vector<float>> masters(const std::vector<FlatParameter*>& flats) {
  std::vector<std::vector<float>> out;
  for (const FlatParameter* f : flats) out.push_back(to_float_vector(f->master));
  return out;
}

double sum_squares(const Tensor& t) {
  double s = 0;
  for (float v : to_float_vector(t)) s += static_cast<double>(v) * v;
  return s;
}

class LoraEngine : public ::testing::TestWithParam<ShardingStrategy> {};

TEST_P(LoraEngine, FrozenBaseHasNoGradientNoOptimizerStateAndNeverChanges) {
  MpiCommunicator world(MPI_COMM_WORLD);
  const ShardingStrategy strategy = GetParam();
  if (strategy == ShardingStrategy::hybrid_shard && world.size() % 2 != 0 && world.size() != 1) GTEST_SKIP();
  auto model = tiny_llama();
  FsdpEngine engine(*model, world, lora_options(strategy, world.size()));
  engine.init_random(3);

  // The optimizer state, read from the engine: none for the base.
  std::vector<FlatParameter*> base, adapters;
  std::int64_t base_shard = 0, adapter_shard = 0;
  for (const auto& f : engine.units()) {
    base.push_back(f.get());
    base_shard += f->shard_numel();
    EXPECT_TRUE(f->master.defined()) << f->unit_name();
    EXPECT_FALSE(f->grad.defined()) << f->unit_name() << ": a frozen base must have no master gradient";
    EXPECT_FALSE(f->exp_avg.defined()) << f->unit_name() << ": a frozen base must have no AdamW m";
    EXPECT_FALSE(f->exp_avg_sq.defined()) << f->unit_name() << ": a frozen base must have no AdamW v";
  }
  for (const auto& f : engine.adapter_units()) {
    if (!f) continue;
    adapters.push_back(f.get());
    adapter_shard += f->shard_numel();
    EXPECT_TRUE(f->grad.defined() && f->exp_avg.defined() && f->exp_avg_sq.defined()) << f->unit_name();
  }
  ASSERT_EQ(adapters.size(), static_cast<std::size_t>(kLayers)) << "one adapter flat per decoder layer";
  // q_proj [24 -> 24] and v_proj [24 -> 12] (2 kv heads of 6) per layer.
  const std::int64_t per_layer = kRank * (kHidden + kHidden) + kRank * (kHidden + 12);
  EXPECT_EQ(engine.trainable_parameters(), kLayers * per_layer);
  EXPECT_EQ(adapters[0]->entries()[0].name, "model.layers.0.self_attn.q_proj.lora_A.weight");
  EXPECT_EQ(adapters[0]->entries()[3].name, "model.layers.0.self_attn.v_proj.lora_B.weight");
  EXPECT_EQ(engine.shard_state_bytes(), 4 * base_shard + 16 * adapter_shard);

  const auto base_before = masters(base);
  const auto adapters_before = masters(adapters);
  for (int step = 0; step < 2; ++step) {
    engine.zero_grad();
    engine.forward_backward(token_batch(world.rank()), 1.0f / 32.0f);
    // No gradient buffer was ever made for the base (dgrad only).
    for (const FlatParameter* f : base) {
      EXPECT_FALSE(f->grad.defined()) << f->unit_name();
      EXPECT_FALSE(f->full_grad.defined()) << f->unit_name();
    }
    // B starts at zero, so in step 1 only B has a gradient; both do after.
    double a_norm = 0, b_norm = 0;
    for (const FlatParameter* f : adapters)
      f->for_each_shard_piece([&](int e, std::int64_t, std::int64_t count, std::int64_t at) {
        (e % 2 == 0 ? a_norm : b_norm) += sum_squares(f->grad.view({count}, at));
      });
    a_norm = world.all_reduce_sum(a_norm);
    b_norm = world.all_reduce_sum(b_norm);
    EXPECT_GT(b_norm, 0.0) << "step " << step;
    if (step == 0) EXPECT_EQ(a_norm, 0.0) << "lora_B is zero at init, so lora_A's gradient is too";
    else EXPECT_GT(a_norm, 0.0);
    EXPECT_GT(engine.grad_norm(), 0.0);
    AdamWHyper h;
    h.lr = 1e-2f;
    h.weight_decay = 0.1f;  // would move the base if the optimizer touched it
    engine.optimizer_step(h, 1.0f);
  }
  const auto base_after = masters(base);
  for (std::size_t i = 0; i < base.size(); ++i)
    EXPECT_EQ(0, std::memcmp(base_before[i].data(), base_after[i].data(), base_before[i].size() * sizeof(float)))
        << base[i]->unit_name() << ": the frozen base changed";
  const auto adapters_after = masters(adapters);
  bool changed = false;
  for (std::size_t i = 0; i < adapters.size(); ++i) changed |= adapters_before[i] != adapters_after[i];
  EXPECT_TRUE(world.all_reduce_sum(changed ? 1.0 : 0.0) > 0) << "the adapters did not train";
}

INSTANTIATE_TEST_SUITE_P(Strategies, LoraEngine,
                         ::testing::Values(ShardingStrategy::full_shard, ShardingStrategy::shard_grad_op,
                                           ShardingStrategy::no_shard, ShardingStrategy::hybrid_shard),
                         [](const auto& info) { return std::string(sharding_strategy_name(info.param)); });

TEST(LoraEngineVit, AllLinearAdaptsTheBlockLinearsOfVit) {
  MpiCommunicator world(MPI_COMM_WORLD);
  auto model = PluginLoader().create_model("vit", "tiny", {});
  FsdpOptions o = lora_options(ShardingStrategy::full_shard, world.size());
  o.lora.all_linear = true;
  FsdpEngine engine(*model, world, o);
  engine.init_random(3);
  const auto config = model->config();
  const std::int64_t C = std::stoll(config.at("embed_dim")), M = std::stoll(config.at("mlp_dim")),
                     depth = std::stoll(config.at("depth"));
  // qkv [3C, C], proj [C, C], fc1 [M, C], fc2 [C, M]
  const std::int64_t per_block = kRank * ((3 * C + C) + (C + C) + (M + C) + (C + M));
  EXPECT_EQ(engine.trainable_parameters(), depth * per_block);
  std::vector<std::string> names;
  for (const auto& f : engine.adapter_units())
    if (f)
      for (const auto& e : f->entries()) names.push_back(e.name);
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names[0], "blocks.0.attn.qkv.lora_A.weight");
  EXPECT_EQ(names.size(), static_cast<std::size_t>(8 * depth));

  Batch batch;
  const std::int64_t S = std::stoll(config.at("image_size")), ch = std::stoll(config.at("num_channels"));
  batch.inputs = Tensor::empty({2, S, S, ch}, DType::f32);
  float* px = batch.inputs.data_as<float>();
  for (std::int64_t i = 0; i < batch.inputs.numel(); ++i) px[i] = static_cast<float>((i * 37 % 101) / 101.0 - 0.5);
  batch.targets = Tensor::empty({2}, DType::i32);
  batch.targets.data_as<std::int32_t>()[0] = 1;
  batch.targets.data_as<std::int32_t>()[1] = 0;
  engine.zero_grad();
  engine.forward_backward(batch, 0.5f);
  EXPECT_GT(engine.grad_norm(), 0.0);
  for (const auto& f : engine.units()) EXPECT_FALSE(f->full_grad.defined() || f->grad.defined()) << f->unit_name();
}

// PEFT's initialisation: A kaiming-uniform(a=sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in)),
// or normal(0, 1/r) with `lora init gaussian`; B zero (so step 0 is the base).
TEST(LoraEngineInit, AIsKaimingUniformOrGaussianAndBIsZero) {
  MpiCommunicator world(MPI_COMM_WORLD);
  auto model = tiny_llama();
  for (const lora::AInit init : {lora::AInit::kaiming, lora::AInit::gaussian}) {
    FsdpOptions o = lora_options(ShardingStrategy::full_shard, world.size());
    o.lora.init = init;
    FsdpEngine engine(*model, world, o);
    double a_max = 0, a_sq = 0, b_abs = 0;
    std::int64_t a_n = 0;
    for (const auto& f : engine.adapter_units()) {
      if (!f) continue;
      const float* m = f->master.data_as<float>();
      f->for_each_shard_piece([&](int e, std::int64_t, std::int64_t count, std::int64_t at) {
        for (std::int64_t i = 0; i < count; ++i) {
          if (e % 2 == 0) {
            a_max = std::max(a_max, std::abs(static_cast<double>(m[at + i])));
            a_sq += static_cast<double>(m[at + i]) * m[at + i];
            ++a_n;
          } else {
            b_abs += std::abs(m[at + i]);
          }
        }
      });
    }
    a_max = world.all_reduce_max(a_max);
    a_sq = world.all_reduce_sum(a_sq);
    const double n = static_cast<double>(world.all_reduce_sum(a_n));
    EXPECT_EQ(world.all_reduce_sum(b_abs), 0.0) << "lora_B starts at zero";
    const double bound = 1.0 / std::sqrt(static_cast<double>(kHidden));  // every adapted linear here has in = 24
    if (init == lora::AInit::kaiming) {
      EXPECT_LE(a_max, bound);
      EXPECT_GT(a_max, 0.9 * bound) << "uniform over the whole bound";
      EXPECT_NEAR(std::sqrt(a_sq / n), bound / std::sqrt(3.0), 0.1 * bound);  // std of U(-b, b)
    } else {
      EXPECT_NEAR(std::sqrt(a_sq / n), 1.0 / kRank, 0.1 / kRank);
    }
  }
}

TEST(LoraEngineErrors, TargetsThatMatchNothingNameTheAdaptableLinears) {
  MpiCommunicator world(MPI_COMM_WORLD);
  auto model = tiny_llama();
  FsdpOptions o = lora_options(ShardingStrategy::full_shard, world.size());
  o.lora.targets = {"lm_head"};
  try {
    FsdpEngine engine(*model, world, o);
    ADD_FAILURE() << "expected a user error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("lora targets lm_head match no linear layer"), std::string::npos) << m;
    EXPECT_NE(m.find("model.layers.0.self_attn.q_proj"), std::string::npos) << m;
  }
}

// The frozen base lives in the compute dtype: under param_dtype bf16 its
// shards hold 2 bytes per parameter (PEFT's bf16 base), the adapters keep f32
// masters, and the plan (`--check`) states the bytes the engine holds.
TEST(LoraEngineBaseDtype, Bf16RunStoresTheFrozenBaseInBf16AndThePlanAgrees) {
  MpiCommunicator world(MPI_COMM_WORLD);
  auto model = tiny_llama();
  FsdpOptions o = lora_options(ShardingStrategy::full_shard, world.size());
  o.param_dtype = DType::bf16;
  FsdpEngine engine(*model, world, o);
  engine.init_random(3);
  std::int64_t base_shard = 0, adapter_shard = 0;
  for (const auto& f : engine.units()) {
    EXPECT_EQ(f->master.dtype(), DType::bf16) << f->unit_name() << ": the frozen base's shard";
    EXPECT_EQ(static_cast<std::int64_t>(f->master.nbytes()), 2 * f->shard_numel()) << f->unit_name();
    base_shard += f->shard_numel();
  }
  for (const auto& f : engine.adapter_units()) {
    if (!f) continue;
    EXPECT_EQ(f->master.dtype(), DType::f32) << f->unit_name() << ": trainable masters stay f32";
    adapter_shard += f->shard_numel();
  }
  EXPECT_EQ(engine.shard_state_bytes(), 2 * base_shard + 16 * adapter_shard);
  const RunPlan plan = make_plan(*model, RunConfig{}, o, world.size(), world.size());
  EXPECT_EQ(plan.state_bytes_per_rank, engine.shard_state_bytes()) << format_plan(plan);
  EXPECT_NE(format_plan(plan).find("frozen base: bf16 shards"), std::string::npos) << format_plan(plan);
}

// One global batch of 4 samples x 8 tokens, split over `ranks` ranks: this
// rank's samples, numbered globally (the dropout mask is keyed by them).
Batch global_batch_part(int rank, int ranks) {
  const std::int64_t per_rank = 4 / ranks, first = rank * per_rank;
  Batch batch;
  batch.inputs = Tensor::empty({per_rank, 8}, DType::i32);
  batch.targets = Tensor::empty({per_rank, 8}, DType::i32);
  for (std::int64_t i = 0; i < per_rank * 8; ++i) {
    const std::int64_t g = first * 8 + i;
    batch.inputs.data_as<std::int32_t>()[i] = static_cast<std::int32_t>((g * 7 + 1) % kVocab);
    batch.targets.data_as<std::int32_t>()[i] = static_cast<std::int32_t>((g * 5 + 3) % kVocab);
  }
  batch.first_sample = first;
  return batch;
}

// The global loss (mean per token) of each of `steps` steps on the same batch.
std::vector<double> bf16_lora_losses(Communicator& comm, bool base_f32, int steps) {
  auto model = tiny_llama();
  FsdpOptions o = lora_options(ShardingStrategy::full_shard, comm.size());
  o.param_dtype = DType::bf16;
  o.lora_base_f32 = base_f32;
  FsdpEngine engine(*model, comm, o);
  engine.init_random(3);
  AdamWHyper h;
  h.lr = 5e-2f;
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    engine.zero_grad();
    engine.forward_backward(global_batch_part(comm.rank(), comm.size()), 1.0f / 32.0f);
    losses.push_back(comm.all_reduce_sum(engine.take_train_loss()));
    engine.clip_and_step(h, 1.0, step + 1);
  }
  return losses;
}

// A bf16 frozen base trains exactly as an f32 one under bf16 compute: the
// gathered copies are the same bf16 bits (the cast that made them from the
// f32 master every step now runs once, at load), so the losses agree bit
// for bit; the adapters learn; and the curve on this run's ranks matches one
// rank's (here, on MPI_COMM_SELF) within 1e-6 relative: the order of the
// loss and gradient sums differs (measured on 2 and 4 ranks: at most 3.4e-8).
TEST(LoraEngineBaseDtype, Bf16BaseTrainsAsAnF32BaseOnAnyRankCount) {
  MpiCommunicator world(MPI_COMM_WORLD);
  if (4 % world.size() != 0) GTEST_SKIP() << "the 4-sample batch splits over 1, 2 or 4 ranks";
  constexpr int kSteps = 8;
  const std::vector<double> bf16_base = bf16_lora_losses(world, false, kSteps);
  const std::vector<double> f32_base = bf16_lora_losses(world, true, kSteps);
  for (int i = 0; i < kSteps; ++i) EXPECT_EQ(bf16_base[i], f32_base[i]) << "step " << i + 1;
  // q/v adapters of rank 4 over a near-uniform random base learn slowly:
  // the loss falls at every step, by about 3% over the 8.
  for (int i = 1; i < kSteps; ++i) EXPECT_LT(bf16_base[i], bf16_base[i - 1]) << "step " << i + 1;
  EXPECT_LT(bf16_base.back(), 0.99 * bf16_base.front()) << "the adapters did not learn";
  MpiCommunicator self(MPI_COMM_SELF);
  const std::vector<double> one_rank = bf16_lora_losses(self, false, kSteps);
  for (int i = 0; i < kSteps; ++i)
    EXPECT_NEAR(bf16_base[i], one_rank[i], 1e-6 * one_rank[i]) << "step " << i + 1 << " on " << world.size()
                                                                << " rank(s) vs 1";
}

// Every element of the bf16 base is its f32 value rounded once (round to
// nearest even, as the gather's cast did), across the 16 MiB staging pieces
// the shard is filled through: an embedding of 70000 x 64 = 4.48M elements
// is two pieces on one rank.
TEST(LoraEngineBaseDtype, EveryElementOfTheBf16BaseIsItsF32ValueRoundedOnce) {
  MpiCommunicator world(MPI_COMM_WORLD);
  auto model = PluginLoader().create_model("llama", "tiny",
                                           {{"hidden_size", "64"}, {"intermediate_size", "64"},
                                            {"num_hidden_layers", "1"}, {"vocab_size", "70000"},
                                            {"num_attention_heads", "4"}, {"num_key_value_heads", "2"}});
  FsdpOptions o = lora_options(ShardingStrategy::full_shard, world.size());
  o.param_dtype = DType::bf16;
  FsdpEngine bf16_base(*model, world, o);
  o.lora_base_f32 = true;
  FsdpEngine f32_base(*model, world, o);
  bf16_base.init_random(3);
  f32_base.init_random(3);
  ASSERT_EQ(bf16_base.units().size(), f32_base.units().size());
  for (std::size_t u = 0; u < f32_base.units().size(); ++u) {
    const FlatParameter& f = *f32_base.units()[u];
    const Tensor rounded = from_floats(f.master.shape(), to_float_vector(f.master), DType::bf16);
    const std::vector<float> want = to_float_vector(rounded), got = to_float_vector(bf16_base.units()[u]->master);
    ASSERT_EQ(got.size(), want.size()) << f.unit_name();
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float))) << f.unit_name();
  }
}

}  // namespace
