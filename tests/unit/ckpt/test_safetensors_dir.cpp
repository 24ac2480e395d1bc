// Sharded safetensors directories (SafetensorsSource) and the ftrain-convert
// conversions: a 2-shard directory written with the safetensors writer plus an
// index, lazy shard opening, every index error naming file and tensor, and
// safetensors <-> consolidated HDF5 round trips (f32 exact, bf16 bits exact).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ckpt/convert.hpp"
#include "ckpt/safetensors.hpp"
#include "ckpt/safetensors_dir.hpp"
#include "base/dtype.hpp"
#include "base/error.hpp"

using namespace ftrain;
using namespace ftrain::ckpt;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

class SafetensorsDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("ftrain_stdir_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "model");
    for (int i = 0; i < 12; ++i) a_[i] = 0.5f * static_cast<float>(i) - 2.0f;
    for (int i = 0; i < 6; ++i) b_[i] = 100.0f + static_cast<float>(i);
    for (int i = 0; i < 4; ++i) c_[i] = to_bf16(1.0f / static_cast<float>(i + 3)).bits;
    write_safetensors(path("model/model-00001-of-00002.safetensors"),
                      {{"layers.0.weight", DType::f32, {3, 4}, a_}}, {{"format", "pt"}});
    write_safetensors(path("model/model-00002-of-00002.safetensors"),
                      {{"layers.1.weight", DType::f32, {2, 3}, b_}, {"norm.weight", DType::bf16, {4}, c_}},
                      {{"format", "pt"}});
    index_ = {{"metadata", {{"total_size", 48 + 24 + 8}}},
              {"weight_map",
               {{"layers.0.weight", "model-00001-of-00002.safetensors"},
                {"layers.1.weight", "model-00002-of-00002.safetensors"},
                {"norm.weight", "model-00002-of-00002.safetensors"}}}};
    write_index(index_.dump());
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void write_index(const std::string& text) const {
    std::ofstream(path("model/model.safetensors.index.json"), std::ios::trunc) << text;
  }

  fs::path dir_;
  json index_;
  float a_[12], b_[6];
  std::uint16_t c_[4];
};

void expect_user_error(const std::function<void()>& body, const std::vector<std::string>& needles) {
  try {
    body();
    ADD_FAILURE() << "expected a UserError mentioning " << needles.front();
  } catch (const UserError& e) {
    for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_F(SafetensorsDirTest, ReadsTensorsAcrossShardsOpeningThemLazily) {
  SafetensorsSource source(path("model"));
  EXPECT_TRUE(source.sharded());
  EXPECT_EQ(source.names(), (std::vector<std::string>{"layers.0.weight", "layers.1.weight", "norm.weight"}));
  EXPECT_EQ(source.metadata().at("total_size"), "80");
  EXPECT_EQ(source.open_files(), 0u);  // the index alone was read
  EXPECT_TRUE(source.contains("norm.weight"));
  EXPECT_FALSE(source.contains("lm_head.weight"));

  float got[5];
  source.read_into("layers.1.weight", 1, 5, got);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(got[i], b_[i + 1]);
  EXPECT_EQ(source.open_files(), 1u);
  EXPECT_EQ(source.tensor("layers.0.weight").shape, (Shape{3, 4}));
  EXPECT_EQ(source.open_files(), 2u);
  source.read_into("norm.weight", 0, 4, got);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got[i], to_float(bf16{c_[i]}));
  EXPECT_EQ(source.tensor("norm.weight").dtype, StDType::BF16);
  EXPECT_EQ(source.open_files(), 2u);
  EXPECT_NE(source.file_of("norm.weight").find("model-00002-of-00002.safetensors"), std::string::npos);
  expect_user_error([&] { source.tensor("lm_head.weight"); }, {"model.safetensors.index.json", "lm_head.weight"});
}

TEST_F(SafetensorsDirTest, SingleFileAndSingleFileDirectory) {
  SafetensorsSource file(path("model/model-00001-of-00002.safetensors"));
  EXPECT_FALSE(file.sharded());
  EXPECT_EQ(file.names(), std::vector<std::string>{"layers.0.weight"});
  EXPECT_EQ(file.metadata().at("format"), "pt");

  fs::create_directories(dir_ / "single");
  fs::copy_file(path("model/model-00002-of-00002.safetensors"), path("single/model.safetensors"));
  SafetensorsSource dir(path("single"));
  EXPECT_FALSE(dir.sharded());
  float got[6];
  dir.read_into("layers.1.weight", 0, 6, got);
  EXPECT_EQ(got[5], b_[5]);

  fs::create_directories(dir_ / "empty");
  expect_user_error([&] { SafetensorsSource s(path("empty")); }, {"empty", "model.safetensors.index.json"});
  expect_user_error([&] { SafetensorsSource s(path("nowhere")); }, {"nowhere", "does not exist"});
}

TEST_F(SafetensorsDirTest, IndexErrorsNameTheFileAndTheTensor) {
  auto broken = index_;
  broken["weight_map"]["norm.weight"] = "model-00003-of-00003.safetensors";
  write_index(broken.dump());
  expect_user_error([&] { SafetensorsSource s(path("model")); },
                    {"model.safetensors.index.json", "norm.weight", "model-00003-of-00003.safetensors",
                     "does not exist"});

  broken = index_;
  broken["weight_map"]["norm.weight"] = "model-00001-of-00002.safetensors";
  write_index(broken.dump());
  SafetensorsSource lying(path("model"));  // the shard's header is read only when asked for
  expect_user_error([&] { lying.tensor("norm.weight"); },
                    {"model.safetensors.index.json", "norm.weight", "model-00001-of-00002.safetensors",
                     "no such tensor"});

  broken = index_;
  broken["weight_map"]["norm.weight"] = "../model/model-00002-of-00002.safetensors";
  write_index(broken.dump());
  expect_user_error([&] { SafetensorsSource s(path("model")); }, {"norm.weight", "expected a file name"});

  broken = index_;
  broken["weight_map"]["norm.weight"] = 7;
  write_index(broken.dump());
  expect_user_error([&] { SafetensorsSource s(path("model")); }, {"norm.weight", "not a file name string"});

  write_index(R"({"metadata": {}})");
  expect_user_error([&] { SafetensorsSource s(path("model")); }, {"model.safetensors.index.json", "weight_map"});
  write_index("[1, 2]");
  expect_user_error([&] { SafetensorsSource s(path("model")); }, {"model.safetensors.index.json", "JSON object"});
  write_index(R"({"weight_map": {"a": )");
  expect_user_error([&] { SafetensorsSource s(path("model")); }, {"model.safetensors.index.json", "not valid JSON"});

  // A damaged shard is SafetensorsFile's error, naming the shard.
  write_index(index_.dump());
  std::ofstream(path("model/model-00002-of-00002.safetensors"), std::ios::trunc) << "short";
  SafetensorsSource damaged(path("model"));
  expect_user_error([&] { damaged.tensor("norm.weight"); }, {"model-00002-of-00002.safetensors"});
}

TEST_F(SafetensorsDirTest, ConvertRoundTripsThroughConsolidatedHdf5) {
  // Directory -> h5 (f32 tensors stay f32, BF16 stays bf16 bits) -> directory.
  const auto to_h5 = safetensors_to_h5(path("model"), path("model.h5"), std::nullopt);
  EXPECT_EQ(to_h5.tensors, 3);
  EXPECT_EQ(to_h5.bytes, 80u);
  const auto back = h5_to_safetensors(path("model.h5"), path("out"), 60, std::nullopt);
  EXPECT_EQ(back.tensors, 3);
  EXPECT_EQ(back.files, 2);  // 48 bytes, then 24 + 8 would pass 60

  SafetensorsSource out(path("out"));
  EXPECT_EQ(out.names(), SafetensorsSource(path("model")).names());
  const auto& a = out.tensor("layers.0.weight");
  EXPECT_EQ(a.dtype, StDType::F32);
  EXPECT_EQ(std::memcmp(out.file_for("layers.0.weight").raw_data("layers.0.weight"), a_, sizeof a_), 0);
  EXPECT_EQ(std::memcmp(out.file_for("layers.1.weight").raw_data("layers.1.weight"), b_, sizeof b_), 0);
  EXPECT_EQ(out.tensor("norm.weight").dtype, StDType::BF16);
  EXPECT_EQ(std::memcmp(out.file_for("norm.weight").raw_data("norm.weight"), c_, sizeof c_), 0);
  const json index = json::parse(read_bytes(path("out/model.safetensors.index.json")));
  EXPECT_EQ(index["metadata"]["total_size"], 80);
  EXPECT_EQ(index["weight_map"]["norm.weight"], "model-00002-of-00002.safetensors");
  EXPECT_EQ(out.file_for("norm.weight").metadata().at("format"), "pt");
  EXPECT_FALSE(fs::exists(path("out/config.json")));  // no model_type llama here

  // --dtype bf16 rounds f32 to nearest even; --dtype f32 widens exactly.
  h5_to_safetensors(path("model.h5"), path("out16"), 1ull << 30, DType::bf16);
  EXPECT_TRUE(fs::exists(path("out16/model.safetensors")));  // one shard: save_pretrained's single-file layout
  EXPECT_FALSE(fs::exists(path("out16/model.safetensors.index.json")));
  SafetensorsSource out16(path("out16"));
  float got[12];
  out16.read_into("layers.0.weight", 0, 12, got);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(got[i], round_to_bf16(a_[i]));
  safetensors_to_h5(path("out16"), path("wide.h5"), DType::f32);
  h5_to_safetensors(path("wide.h5"), path("out32"), 1ull << 30, std::nullopt);
  SafetensorsSource out32(path("out32"));
  EXPECT_EQ(out32.tensor("norm.weight").dtype, StDType::F32);
  out32.read_into("norm.weight", 0, 4, got);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got[i], to_float(bf16{c_[i]}));
}

TEST(ConvertHelpers, ParsesByteSizes) {
  EXPECT_EQ(parse_byte_size("5GB"), 5000000000ull);
  EXPECT_EQ(parse_byte_size("2GiB"), 2ull << 30);
  EXPECT_EQ(parse_byte_size("500MB"), 500000000ull);
  EXPECT_EQ(parse_byte_size("4096"), 4096ull);
  for (const char* bad : {"", "GB", "0", "5XB", "-1GB", "5 GB", "99999999999999999999TB"})
    EXPECT_THROW(parse_byte_size(bad), UserError) << bad;
}
