// LoRA adapters in Hugging Face PEFT's format (issue 16), at np 1 and 2,
// against a fixture PEFT 0.14 wrote itself (tests/checkpoint/peft_fixture):
// adapter_config.json field by field; `init adapter` loads it into the
// sharded engine; save_adapter writes the same keys, shapes, dtypes and
// metadata back; merge_adapter gives W + scale B A within 1e-6 and the
// consolidated export (save_final) of the merged model loads back as a
// plain (non-LoRA) model with those weights. Mismatched configs are refused
// naming the field.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include <unistd.h>

#include "ckpt/consolidated.hpp"
#include "ckpt/peft_adapter.hpp"
#include "ckpt/safetensors.hpp"
#include "comm/mpi_communicator.hpp"
#include "base/error.hpp"
#include "fsdp/engine.hpp"
#include "plugin/loader.hpp"

using namespace ftrain;
namespace fs = std::filesystem;

namespace {

const std::string kFixture = FTRAIN_TEST_PEFT_FIXTURE;

ModelHandle fixture_llama() {  // the LlamaConfig the fixture was made for
  return PluginLoader().create_model("llama", "tiny",
                                     {{"vocab_size", "64"}, {"hidden_size", "32"}, {"intermediate_size", "64"},
                                      {"num_hidden_layers", "2"}, {"num_attention_heads", "4"},
                                      {"num_key_value_heads", "2"}});
}

lora::Config fixture_config() {
  lora::Config c;
  c.enabled = true;
  c.rank = 4;
  c.alpha = 8;
  c.dropout = 0.05;
  c.targets = {"q_proj", "v_proj"};
  return c;
}

FsdpOptions options(MpiCommunicator& world, bool lora) {
  FsdpOptions o;
  o.shard_group_size = world.size();
  o.seed = 11;
  if (lora) o.lora = fixture_config();
  return o;
}

// name -> full f32 values of every flat's entries, gathered over the shard group.
std::map<std::string, std::vector<float>> gather_all(FsdpEngine& engine, const std::vector<FlatParameter*>& flats) {
  std::map<std::string, std::vector<float>> out;
  for (FlatParameter* f : flats) {
    Tensor full = Tensor::empty({f->padded_numel()}, DType::f32);
    engine.shard_comm().all_gather(f->master, full).wait();
    const auto v = to_float_vector(full);
    for (const auto& e : f->entries())
      out[e.name] = std::vector<float>(v.begin() + e.offset, v.begin() + e.offset + e.numel);
  }
  return out;
}

std::vector<FlatParameter*> base_flats(FsdpEngine& e) {
  std::vector<FlatParameter*> out;
  for (const auto& f : e.units()) out.push_back(f.get());
  return out;
}
std::vector<FlatParameter*> adapter_flats(FsdpEngine& e) {
  std::vector<FlatParameter*> out;
  for (const auto& f : e.adapter_units())
    if (f) out.push_back(f.get());
  return out;
}

std::vector<float> fixture_tensor(const ckpt::SafetensorsFile& file, const std::string& key) {
  std::vector<float> v(static_cast<std::size_t>(file.tensor(key).numel()));
  file.read_into(key, 0, static_cast<std::int64_t>(v.size()), v.data());
  return v;
}

// A fresh directory every rank agrees on.
std::string scratch_dir(MpiCommunicator& world, const std::string& name) {
  const std::string dir = (fs::temp_directory_path() / ("ftrain_peft_" + std::to_string(::getpid()) + "_" + name)).string();
  std::string shared = dir;
  // rank 0's pid names it
  std::vector<char> buf(512, 0);
  if (world.rank() == 0) std::snprintf(buf.data(), buf.size(), "%s", dir.c_str());
  MPI_Bcast(buf.data(), static_cast<int>(buf.size()), MPI_CHAR, 0, MPI_COMM_WORLD);
  shared = buf.data();
  if (world.rank() == 0) {
    fs::remove_all(shared);
    fs::create_directories(shared);
  }
  world.barrier();
  return shared;
}

TEST(PeftAdapter, ConfigMatchesWhatPeftWrites) {
  std::ifstream in(kFixture + "/adapter_config.json");
  nlohmann::json fixture;
  in >> fixture;
  const nlohmann::json ours = ckpt::peft_adapter_config(fixture_config(), "", "CAUSAL_LM");
  std::set<std::string> fixture_keys, our_keys;
  for (const auto& [k, v] : fixture.items()) fixture_keys.insert(k);
  for (const auto& [k, v] : ours.items()) our_keys.insert(k);
  EXPECT_EQ(our_keys, fixture_keys) << "the field set differs from PEFT 0.14's";
  for (const auto& [k, v] : fixture.items()) {
    if (k == "target_modules") {  // a set in PEFT: order is arbitrary
      std::set<std::string> a(v.begin(), v.end()), b(ours[k].begin(), ours[k].end());
      EXPECT_EQ(a, b);
    } else {
      EXPECT_EQ(ours[k], v) << "field " << k;
    }
  }
  // rslora, gaussian init and all-linear are spelled as PEFT spells them.
  lora::Config c = fixture_config();
  c.rslora = true;
  c.init = lora::AInit::gaussian;
  c.all_linear = true;
  const auto j = ckpt::peft_adapter_config(c, "base", "");
  EXPECT_EQ(j["use_rslora"], true);
  EXPECT_EQ(j["init_lora_weights"], "gaussian");
  EXPECT_EQ(j["target_modules"], "all-linear");
  EXPECT_TRUE(j["task_type"].is_null());
}

TEST(PeftAdapter, LoadSaveMergeExportRoundTrip) {
  MpiCommunicator world(MPI_COMM_WORLD);
  auto model = fixture_llama();
  FsdpEngine engine(*model, world, options(world, true));
  engine.init_random(5);
  ckpt::load_adapter(engine, kFixture);

  // Loaded adapters are the fixture's, bit for bit, on every rank count.
  const ckpt::SafetensorsFile file(kFixture + "/adapter_model.safetensors");
  const auto adapters = gather_all(engine, adapter_flats(engine));
  ASSERT_EQ(adapters.size(), 8u);
  for (const auto& [name, values] : adapters) EXPECT_EQ(values, fixture_tensor(file, ckpt::peft_key(name))) << name;

  // save_adapter writes what PEFT wrote: keys, shapes, dtypes, metadata, values.
  const std::string out = scratch_dir(world, "save");
  ckpt::save_adapter(engine, world, out, "", "CAUSAL_LM");
  world.barrier();
  {
    const ckpt::SafetensorsFile saved(out + "/adapter_model.safetensors");
    ASSERT_EQ(saved.tensors().size(), file.tensors().size());
    for (const auto& t : file.tensors()) {
      ASSERT_TRUE(saved.contains(t.name)) << t.name;
      const auto& s = saved.tensor(t.name);
      EXPECT_EQ(s.shape, t.shape) << t.name;
      EXPECT_EQ(s.dtype, t.dtype) << t.name;
      EXPECT_EQ(fixture_tensor(saved, t.name), fixture_tensor(file, t.name)) << t.name;
    }
    EXPECT_EQ(saved.metadata(), file.metadata());
    std::ifstream cfg(out + "/adapter_config.json");
    nlohmann::json j;
    cfg >> j;
    EXPECT_EQ(j, ckpt::peft_adapter_config(fixture_config(), "", "CAUSAL_LM"));
    EXPECT_NO_THROW(ckpt::check_peft_adapter_config(out, fixture_config()));
  }

  // Merge: W += (alpha / r) B A on the adapted weights, nothing else moves.
  const auto before = gather_all(engine, base_flats(engine));
  ckpt::merge_adapter(engine);
  const auto merged = gather_all(engine, base_flats(engine));
  const double scale = 8.0 / 4.0;
  int adapted = 0;
  for (const auto& [name, w] : before) {
    const std::string module = lora::module_of_weight(name);
    const auto a_it = adapters.find(module + ".lora_A.weight");
    if (a_it == adapters.end()) {
      EXPECT_EQ(merged.at(name), w) << name << " is not adapted and must not change";
      continue;
    }
    ++adapted;
    const auto& A = a_it->second;
    const auto& B = adapters.at(module + ".lora_B.weight");
    const std::int64_t in = 32, r = 4, out_rows = static_cast<std::int64_t>(w.size()) / in;
    double worst = 0;
    for (std::int64_t o = 0; o < out_rows; ++o)
      for (std::int64_t i = 0; i < in; ++i) {
        double ba = 0;
        for (std::int64_t k = 0; k < r; ++k) ba += static_cast<double>(B[o * r + k]) * A[k * in + i];
        const double expected = w[o * in + i] + scale * ba;
        worst = std::max(worst, std::abs(merged.at(name)[o * in + i] - expected));
      }
    EXPECT_LT(worst, 1e-6) << name;
  }
  EXPECT_EQ(adapted, 4);

  // Export the merged model (save_final) and load it as a plain model.
  const std::string h5 = scratch_dir(world, "export") + "/merged.h5";
  ckpt::save_consolidated(engine, world, h5, "llama", model->config());
  FsdpEngine plain(*model, world, options(world, false));
  ckpt::load_consolidated(plain, h5);
  const auto reloaded = gather_all(plain, base_flats(plain));
  for (const auto& [name, w] : merged) EXPECT_EQ(reloaded.at(name), w) << name;
  world.barrier();
  if (world.rank() == 0) {
    fs::remove_all(fs::path(out));
    fs::remove_all(fs::path(h5).parent_path());
  }
}

TEST(PeftAdapter, MismatchedAdaptersAreRefusedNamingTheField) {
  lora::Config c = fixture_config();
  c.rank = 8;
  try {
    ckpt::check_peft_adapter_config(kFixture, c);
    ADD_FAILURE() << "rank 8 against r 4 must be refused";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("adapter_config.json: r 4, the lora line says rank 8"), std::string::npos)
        << e.what();
  }
  c = fixture_config();
  c.targets = {"q_proj", "k_proj"};
  try {
    ckpt::check_peft_adapter_config(kFixture, c);
    ADD_FAILURE() << "other targets must be refused";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("target_modules"), std::string::npos) << e.what();
  }
}

}  // namespace
