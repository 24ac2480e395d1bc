// The deck resolved into typed settings: each cross-field rule once, naming
// its deck line; every choice word maps to its own enum value.
#include <gtest/gtest.h>

#include <string>

#include "base/error.hpp"
#include "deck/commands.hpp"
#include "deck/parser.hpp"
#include "train/run_settings.hpp"

using namespace ftrain;

namespace {

RunConfig parse(const std::string& body) {
  return parse_deck_string("model llama preset tiny\nmax_steps 10\n" + body, "run.in", {});
}

std::string error_of(const std::string& body) {
  try {
    const RunConfig c = parse(body);
    const FsdpOptions o = resolve_fsdp_options(c, Device::host);
    resolve_shard_group_size(c, o, 2, 2);
    resolve_schedule(c);
  } catch (const UserError& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

TEST(RunSettings, EveryChoiceWordStoresItsOwnEnumValue) {
  for (const deck::Command& command : deck::command_table()) {
    for (const deck::Form& form : command.forms) {
      for (const auto* params : {&form.positionals, &form.keywords}) {
        for (const deck::Param& param : *params) {
          if (param.kind != deck::ValueKind::choice) continue;
          for (std::size_t i = 0; i < param.choices.size(); ++i)
            EXPECT_EQ(param.choices[i].value, static_cast<int>(i)) << command.name << " " << param.name;
        }
      }
    }
  }
}

TEST(RunSettings, TheDeckBecomesEngineOptions) {
  const RunConfig c = parse(
      "precision fp8\nfsdp shard_grad_op backward_prefetch none reduce_dtype bf16 no_sync on\n"
      "activation_checkpointing every 3\nattention_backend reference\ndevice_comm mpi\nhost_streams async\n"
      "fp8 format e4m3 amax_algo most_recent\n");
  const FsdpOptions o = resolve_fsdp_options(c, Device::host);
  EXPECT_EQ(o.strategy, ShardingStrategy::shard_grad_op);
  EXPECT_EQ(o.backward_prefetch, BackwardPrefetch::none);
  EXPECT_EQ(o.param_dtype, DType::bf16);  // fp8: everything but the block linears computes in bf16
  EXPECT_EQ(o.reduce_dtype, DType::bf16);
  EXPECT_TRUE(o.fp8);
  EXPECT_TRUE(o.no_sync);
  EXPECT_EQ(o.checkpoint_every, 3);
  EXPECT_EQ(o.attention_backend, AttentionBackend::reference);
  EXPECT_EQ(o.device_comm, DeviceComm::mpi);
  EXPECT_EQ(o.host_streams, HostStreams::async);
  EXPECT_EQ(o.fp8_recipe.format, fp8::Format::e4m3);
  EXPECT_EQ(o.fp8_recipe.amax_algo, fp8::AmaxAlgo::most_recent);
  EXPECT_EQ(resolve_fsdp_options(parse(""), Device::host).host_streams, HostStreams::from_environment);
  EXPECT_EQ(resolve_fsdp_options(parse("precision bf16\nfsdp full_shard param_dtype fp32\n"), Device::host).param_dtype,
            DType::f32);
}

TEST(RunSettings, CrossFieldRulesNameTheirDeckLine) {
  EXPECT_NE(error_of("fsdp full_shard no_sync on\n").find("run.in:3: no_sync on needs strategy no_shard or "
                                                          "shard_grad_op (with full_shard"),
            std::string::npos);
  EXPECT_NE(error_of("lora rank 4\nprecision fp8\n").find("run.in:3: 'lora' with precision fp8"), std::string::npos);
  EXPECT_NE(error_of("merge_adapter on\n").find("run.in:3: 'merge_adapter on' needs a 'lora' line"),
            std::string::npos);
  EXPECT_NE(error_of("fsdp hybrid_shard shard_group_size 3\n")
                .find("run.in:3: fsdp hybrid_shard shard_group_size 3 does not divide the 2 ranks"),
            std::string::npos);
  EXPECT_EQ(error_of("fsdp no_shard no_sync on\n"), "<no error>");
}

TEST(RunSettings, TheHeaderPrintsTheResolvedValues) {
  const RunConfig c = parse("fsdp no_shard backward_prefetch backward_post\nactivation_checkpointing every 2\n"
                            "schedule linear warmup_steps 3\nprecision bf16\n");
  const std::string text = describe_settings(c, resolve_fsdp_options(c, Device::host), 1);
  EXPECT_NE(text.find("fsdp: no_shard, param bf16, reduce f32, backward_prefetch backward_post"), std::string::npos)
      << text;
  EXPECT_NE(text.find("activation_checkpointing every 2"), std::string::npos) << text;
  EXPECT_NE(text.find("optimizer adamw"), std::string::npos) << text;
  EXPECT_NE(text.find("schedule linear warmup_steps 3"), std::string::npos) << text;
  EXPECT_NE(text.find("| precision bf16 |"), std::string::npos) << text;
}

// fsdp ... offload: on the host backend the state already is host memory, so
// it resolves, changes nothing and the header says so; a device backend
// takes it, with precision fp8 too (the FP8 all-gather casts the device's
// compute-dtype copy of the shard).
TEST(RunSettings, OffloadIsANoOpOnTheHostAndTakenWithFp8OnADevice) {
  EXPECT_EQ(resolve_fsdp_options(parse(""), Device::host).offload, Offload::none);
  const RunConfig optimizer = parse("fsdp full_shard offload optimizer\n");
  const FsdpOptions o = resolve_fsdp_options(optimizer, Device::host);
  EXPECT_EQ(o.offload, Offload::optimizer);
  EXPECT_EQ(resolve_fsdp_options(parse("fsdp full_shard offload all\n"), Device::host).offload, Offload::all);
  const std::string text = describe_settings(optimizer, o, 2);
  EXPECT_NE(text.find(", offload optimizer (no effect on the host backend: the sharded state already is host "
                      "memory)"),
            std::string::npos)
      << text;
  EXPECT_EQ(describe_settings(parse(""), resolve_fsdp_options(parse(""), Device::host), 2).find("offload"),
            std::string::npos);
  EXPECT_EQ(resolve_fsdp_options(parse("fsdp full_shard offload all\n"), Device::cuda).offload, Offload::all);
  EXPECT_EQ(resolve_fsdp_options(parse("fsdp full_shard offload optimizer\n"), Device::cuda).offload,
            Offload::optimizer);
  const FsdpOptions fp8 = resolve_fsdp_options(parse("precision fp8\nfsdp full_shard offload all\n"), Device::cuda);
  EXPECT_EQ(fp8.offload, Offload::all);
  EXPECT_TRUE(fp8.fp8);
  EXPECT_EQ(resolve_fsdp_options(parse("fsdp full_shard offload none\n"), Device::cuda).offload, Offload::none);
}

// The LoRA frozen base takes the compute dtype (issue 36): bf16 under
// precision bf16 (or fsdp param_dtype bf16), f32 under fp32 (the fp32
// goldens stay as they are), and `lora base_dtype f32` keeps f32.
TEST(RunSettings, TheLoraFrozenBaseIsStoredInTheComputeDtype) {
  const auto base_dtype = [](const std::string& body) {
    return frozen_base_dtype(resolve_fsdp_options(parse(body), Device::host));
  };
  EXPECT_EQ(base_dtype("precision bf16\nlora rank 4\n"), DType::bf16);
  EXPECT_EQ(base_dtype("precision fp32\nlora rank 4\n"), DType::f32);
  EXPECT_EQ(base_dtype("precision fp32\nfsdp full_shard param_dtype bf16\nlora rank 4\n"), DType::bf16);
  EXPECT_EQ(base_dtype("precision bf16\nlora rank 4 base_dtype f32\n"), DType::f32);
  EXPECT_EQ(base_dtype("precision bf16\nlora rank 4\nlora base_dtype f32\n"), DType::f32);
  EXPECT_EQ(base_dtype("precision bf16\n"), DType::f32) << "without LoRA every master is f32";
  EXPECT_NE(error_of("lora base_dtype f16\n").find("base_dtype"), std::string::npos);
}
