// Safetensors: round trips, slice reads, a hand-made file in the published
// format, and every kind of malformed header giving a UserError (never a
// crash), including randomly mutated files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ckpt/safetensors.hpp"
#include "base/dtype.hpp"
#include "base/error.hpp"
#include "core/rng.hpp"

using namespace ftrain;
using namespace ftrain::ckpt;
namespace fs = std::filesystem;

namespace {

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("ftrain_st_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}
std::string le64(std::uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}
// A file from a header text and a data buffer of `data_bytes` bytes.
std::string make_file(const std::string& header, std::size_t data_bytes) {
  return le64(header.size()) + header + std::string(data_bytes, '\x01');
}

void expect_user_error(const std::function<void()>& body, const std::string& name, const std::string& what) {
  try {
    body();
    ADD_FAILURE() << "no error; expected one about '" << what << "'";
  } catch (const UserError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(name), std::string::npos) << message;
    EXPECT_NE(message.find(what), std::string::npos) << message;
  }
}

}  // namespace

TEST_F(SafetensorsTest, RoundTripAllDtypesAndMetadata) {
  std::vector<float> w(6);
  for (int i = 0; i < 6; ++i) w[i] = 0.25f * static_cast<float>(i) - 0.5f;
  std::vector<bf16> b(5);
  for (int i = 0; i < 5; ++i) b[i] = to_bf16(1.5f * static_cast<float>(i) + 0.125f);
  std::vector<f16> h(3);
  for (int i = 0; i < 3; ++i) h[i] = to_f16(-2.0f * static_cast<float>(i) + 0.75f);
  const std::vector<std::int64_t> ids = {7, -3};
  const std::string p = path("model.safetensors");
  write_safetensors(p,
                    {{"b.weight", DType::bf16, {5}, b.data()},
                     {"a.weight", DType::f32, {2, 3}, w.data()},
                     {"half", DType::f16, {3, 1}, h.data()},
                     {"ids", DType::i64, {2}, ids.data()},
                     {"empty", DType::f32, {0, 4}, nullptr}},
                    {{"format", "pt"}, {"model", "tiny"}});
  EXPECT_FALSE(fs::exists(p + ".tmp"));

  // The layout the format prescribes, checked on the raw bytes.
  const std::string bytes = read_bytes(p);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ((8 + n) % 8, 0u);
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(header["a.weight"]["dtype"], "F32");
  EXPECT_EQ(header["b.weight"]["dtype"], "BF16");
  EXPECT_EQ(header["half"]["dtype"], "F16");
  EXPECT_EQ(header["ids"]["dtype"], "I64");
  EXPECT_EQ(header["__metadata__"]["format"], "pt");
  EXPECT_EQ(header["ids"]["data_offsets"][0], 0);  // 8-byte elements first: aligned
  EXPECT_EQ(bytes.size(), 8 + n + 6 * 4 + 5 * 2 + 3 * 2 + 2 * 8);

  const SafetensorsFile f(p);
  ASSERT_EQ(f.tensors().size(), 5u);
  EXPECT_EQ(f.metadata().at("model"), "tiny");
  EXPECT_EQ(f.tensor("a.weight").shape, (Shape{2, 3}));
  EXPECT_EQ(f.tensor("empty").shape, (Shape{0, 4}));
  EXPECT_EQ(f.tensor("half").dtype, StDType::F16);
  EXPECT_TRUE(f.contains("ids"));
  EXPECT_FALSE(f.contains("nope"));
  for (const auto& t : f.tensors()) EXPECT_EQ((f.tensor(t.name).begin) % st_dtype_size(t.dtype), 0u) << t.name;

  std::vector<float> out(6);
  f.read_into("a.weight", 0, 6, out.data());
  EXPECT_EQ(out, w);
  f.read_into("b.weight", 0, 5, out.data());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(out[i], to_float(b[i]));
  f.read_into("half", 0, 3, out.data());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(out[i], to_float(h[i]));
  std::int64_t ids_back[2];
  std::memcpy(ids_back, f.raw_data("ids"), sizeof ids_back);
  EXPECT_EQ(ids_back[0], 7);
  EXPECT_EQ(ids_back[1], -3);
  expect_user_error([&] { f.read_into("ids", 0, 2, out.data()); }, p, "not a floating-point type");
  expect_user_error([&] { (void)f.tensor("missing"); }, p, "has no tensor 'missing'");

  // Writing again replaces the file as a whole.
  write_safetensors(p, {{"only", DType::f32, {1}, w.data()}});
  EXPECT_EQ(SafetensorsFile(p).tensors().size(), 1u);
}

TEST_F(SafetensorsTest, SliceReadsTouchOnlyTheSlice) {
  std::vector<float> big(10 * 7);
  std::vector<bf16> big16(10 * 7);
  for (int i = 0; i < 70; ++i) {
    big[i] = static_cast<float>(rng::normal(1, 2, i));
    big16[i] = to_bf16(big[i]);
  }
  const std::string p = path("slices.safetensors");
  write_safetensors(p, {{"w", DType::f32, {10, 7}, big.data()}, {"v", DType::bf16, {10, 7}, big16.data()}});
  const SafetensorsFile f(p);
  // Rows 3..5 of w, as a rank of an FSDP shard would read them.
  std::vector<float> rows(21, -1.0f);
  f.read_into("w", 3 * 7, 21, rows.data());
  for (int i = 0; i < 21; ++i) EXPECT_EQ(rows[i], big[21 + i]);
  std::vector<float> tail(5, -1.0f);
  f.read_into("v", 65, 5, tail.data());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(tail[i], to_float(big16[65 + i]));
  f.read_into("v", 70, 0, tail.data());  // empty slice at the end is fine
  EXPECT_THROW(f.read_into("v", 66, 5, tail.data()), Error);  // past the end: caller's bug
}

// A file written by hand exactly as the published format describes it
// (including space padding of the header), as another tool would.
TEST_F(SafetensorsTest, ReadsAHandMadeFile) {
  const std::string header =
      R"({"__metadata__":{"foo":"bar"},"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]},)"
      R"("x":{"dtype":"F16","shape":[2],"data_offsets":[16,20]},"y":{"dtype":"F64","shape":[],"data_offsets":[24,32]}})"
      "      ";
  std::string data(32, '\0');
  const std::int32_t ints[4] = {1, 2, 3, -4};
  std::memcpy(data.data(), ints, 16);
  data[16] = 0x00;
  data[17] = 0x3c;  // f16 1.0
  data[18] = 0x00;
  data[19] = static_cast<char>(0xc0);  // f16 -2.0
  const double pi = 3.25;
  std::memcpy(data.data() + 24, &pi, 8);
  const std::string p = path("hand.safetensors");
  write_bytes(p, le64(header.size()) + header + data);
  const SafetensorsFile f(p);
  EXPECT_EQ(f.metadata().at("foo"), "bar");
  EXPECT_EQ(f.tensor("test").dtype, StDType::I32);
  EXPECT_EQ(f.tensor("y").shape, Shape{});
  EXPECT_EQ(f.tensor("y").numel(), 1);
  float x[2], y;
  f.read_into("x", 0, 2, x);
  f.read_into("y", 0, 1, &y);
  EXPECT_EQ(x[0], 1.0f);
  EXPECT_EQ(x[1], -2.0f);
  EXPECT_EQ(y, 3.25f);
  std::int32_t back[4];
  std::memcpy(back, f.raw_data("test"), 16);
  EXPECT_EQ(back[3], -4);
}

TEST_F(SafetensorsTest, MalformedFilesAreUserErrors) {
  const std::string p = path("bad.safetensors");
  auto expect_bad = [&](const std::string& bytes, const std::string& what) {
    write_bytes(p, bytes);
    expect_user_error([&] { SafetensorsFile f(p); }, p, what);
    // The same bytes through the fuzzing entry point.
    expect_user_error([&] { parse_safetensors_header(bytes, "in-memory"); }, "in-memory", what);
  };
  auto entry = [](const std::string& name, const std::string& dtype, const std::string& shape, const std::string& offsets) {
    return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}";
  };

  expect_user_error([&] { SafetensorsFile f(path("absent.safetensors")); }, path("absent.safetensors"), "cannot open");
  expect_bad("", "truncated");
  expect_bad(std::string("\x10\x00\x00", 3), "truncated");
  expect_bad(le64(1000) + "{}", "runs past the end");
  expect_bad(le64(200ull << 20) + "{}", "100 MiB");
  expect_bad(le64(~0ull) + "{}", "100 MiB");
  expect_bad(make_file("[1, 2]", 0), "not a JSON object");
  expect_bad(make_file(" \"text\"", 0), "not a JSON object");
  expect_bad(make_file("", 0), "not a JSON object");
  expect_bad(make_file("{\"a\":", 0), "not valid JSON");
  expect_bad(make_file("{\"a\":{}} trailing", 0), "not valid JSON");
  expect_bad(make_file("{\"a\":\"\xff\xfe\"}", 0), "not valid JSON");  // not UTF-8
  expect_bad(make_file("{" + entry("w", "F32", "[2,2]", "[0,16]") + "}", 8), "run past the end");  // truncated data
  expect_bad(make_file("{" + entry("w", "F32", "[2,2]", "[0,12]") + "}", 16), "needs 16");
  expect_bad(make_file("{" + entry("w", "BF16", "[3]", "[0,4]") + "}", 16), "needs 6");
  expect_bad(make_file("{" + entry("w", "Q4_0", "[4]", "[0,4]") + "}", 16), "unknown dtype");
  expect_bad(make_file("{" + entry("w", "F32", "[-1]", "[0,4]") + "}", 16), "non-negative integers");
  expect_bad(make_file("{" + entry("w", "F32", "[1.0]", "[0,4]") + "}", 16), "non-negative integers");
  expect_bad(make_file("{" + entry("w", "F32", "4", "[0,16]") + "}", 16), "shape must be an array");
  expect_bad(make_file("{" + entry("w", "F32", "[4]", "[16,0]") + "}", 16), "end before they begin");
  expect_bad(make_file("{" + entry("w", "F32", "[4]", "[0,16,16]") + "}", 16), "[begin, end]");
  expect_bad(make_file("{" + entry("w", "U8", "[4611686018427387904,8]", "[0,16]") + "}", 16), "too many elements");
  expect_bad(make_file("{" + entry("w", "F32", "[2]", "[0,8]") + "," + entry("v", "F32", "[2]", "[4,12]") + "}", 16),
             "overlap");
  expect_bad(make_file("{" + entry("w", "F32", "[2]", "[0,8]") + "," + entry("w", "F32", "[2]", "[8,16]") + "}", 16),
             "'w' twice");
  expect_bad(make_file(R"({"w":{"dtype":"F32","shape":[1]}})", 16), "missing field 'data_offsets'");
  expect_bad(make_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":1}})", 16),
             "unexpected field 'extra'");
  expect_bad(make_file(R"({"w":[1,2,3]})", 16), "expected an object");
  expect_bad(make_file(R"({"w":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})", 16), "dtype must be a string");
  expect_bad(make_file(R"({"__metadata__":{"k":1}})", 0), "__metadata__ 'k' must be a string");
  expect_bad(make_file(R"({"__metadata__":[]})", 0), "__metadata__ must be an object");
  expect_bad(make_file(R"({"":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4), "empty name");

  // Empty tensors take no bytes and overlap nothing; a valid header parses.
  const auto ok = parse_safetensors_header(
      make_file("{" + entry("w", "F32", "[2]", "[0,8]") + "," + entry("e", "F32", "[0,3]", "[4,4]") + "}", 8), "ok");
  EXPECT_EQ(ok.tensors.size(), 2u);
  EXPECT_EQ(ok.data_bytes, 8u);
}

// Random byte flips, insertions and truncations of a valid file: each parse
// either succeeds or throws UserError, never anything else.
TEST_F(SafetensorsTest, MutatedFilesNeverCrash) {
  const std::vector<float> w = {1, 2, 3, 4, 5, 6};
  const std::string p = path("seed.safetensors");
  write_safetensors(p, {{"a", DType::f32, {2, 3}, w.data()}, {"b", DType::bf16, {2}, w.data()}}, {{"k", "v"}});
  const std::string seed = read_bytes(p);
  int accepted = 0, rejected = 0;
  for (std::uint64_t trial = 0; trial < 3000; ++trial) {
    std::string bytes = seed;
    const int edits = 1 + static_cast<int>(rng::bits(9, trial, 0) % 4);
    for (int e = 0; e < edits; ++e) {
      const std::uint64_t r = rng::bits(9, trial, 1 + e);
      const std::size_t at = (r >> 8) % bytes.size();
      switch (r % 4) {
        case 0: bytes[at] = static_cast<char>(r >> 40); break;
        case 1: bytes[at] = "{}[],:\"0-9 e."[(r >> 40) % 13]; break;
        case 2: bytes.resize(at); break;
        case 3: bytes.insert(at, 1, static_cast<char>(r >> 40)); break;
      }
      if (bytes.empty()) break;
    }
    try {
      parse_safetensors_header(bytes, "mutant");
      ++accepted;
    } catch (const UserError&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 1000);
  EXPECT_GT(accepted, 0);  // edits inside the data buffer leave a valid file
}
