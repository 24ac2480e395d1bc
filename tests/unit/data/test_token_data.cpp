// Token files (format, validation), the window/sample mapping documented in
// data/token_dataset.hpp, the synthetic corpus and the ftrain-prep command.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "core/rng.hpp"
#include "core/tensor.hpp"
#include "data/prep_cli.hpp"
#include "data/synthetic_corpus.hpp"
#include "data/token_dataset.hpp"
#include "data/token_file.hpp"

using namespace ftrain;
using namespace ftrain::data;
namespace fs = std::filesystem;

namespace {

// A fresh directory per test, removed afterwards.
class TokenDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("ftrain_data_" + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" + info->name());
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
void put_u64(std::string& bytes, std::size_t offset, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) bytes[offset + i] = static_cast<char>(v >> (8 * i));
}
void put_u32(std::string& bytes, std::size_t offset, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) bytes[offset + i] = static_cast<char>(v >> (8 * i));
}

// Expects a UserError whose message names `path` and contains `what`.
void expect_user_error(const std::function<void()>& body, const std::string& path, const std::string& what) {
  try {
    body();
    ADD_FAILURE() << "no error; expected one about '" << what << "'";
  } catch (const UserError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find(what), std::string::npos) << message;
  }
}

std::vector<std::int32_t> all_tokens(const TokenFile& f) {
  std::vector<std::int32_t> out(static_cast<std::size_t>(f.n_tokens()));
  f.read(0, f.n_tokens(), out.data());
  return out;
}

// Tokens 0, 1, ..., n-1 with no eos: a token's value is its index, so a
// window's contents show exactly where it was read from.
void write_counting_file(const std::string& path, std::uint32_t n) {
  TokenFileWriter w(path, 1u << 20);
  std::vector<std::uint32_t> tokens(n);
  for (std::uint32_t i = 0; i < n; ++i) tokens[i] = i;
  w.append_document(tokens);
  w.close();
}

struct Batch {
  Tensor inputs, targets;
  Batch(std::int64_t rows, std::int64_t T)
      : inputs(Tensor::zeros({rows, T}, DType::i32)), targets(Tensor::zeros({rows, T}, DType::i32)) {}
  std::int32_t in(std::int64_t r, std::int64_t j) const { return inputs.data_as<std::int32_t>()[r * inputs.dim(1) + j]; }
  std::int32_t tg(std::int64_t r, std::int64_t j) const {
    return targets.data_as<std::int32_t>()[r * targets.dim(1) + j];
  }
};

}  // namespace

// ---- token file --------------------------------------------------------------

TEST_F(TokenDataTest, RoundTripUint16WithEos) {
  const std::string p = path("a.tok");
  {
    TokenFileWriter w(p, 1000, 999);
    EXPECT_EQ(w.header().token_bytes, 2u);
    w.append_document(std::vector<std::uint32_t>{1, 2, 3});
    w.append_document(std::vector<std::uint32_t>{});
    w.append_document(std::vector<std::uint32_t>{998, 0});
    w.close();
  }
  EXPECT_FALSE(fs::exists(p + ".tmp"));
  EXPECT_EQ(fs::file_size(p), 64u + 8u * 2u);
  const std::string bytes = read_bytes(p);
  EXPECT_EQ(bytes.substr(0, 8), "FTRNTOK1");
  const TokenFile f(p);
  EXPECT_EQ(f.header().version, 1u);
  EXPECT_EQ(f.header().token_bytes, 2u);
  EXPECT_EQ(f.header().n_tokens, 8u);
  EXPECT_EQ(f.header().vocab_size, 1000u);
  EXPECT_EQ(f.header().eos_id, 999u);
  EXPECT_EQ(f.header().n_documents, 3u);
  EXPECT_EQ(all_tokens(f), (std::vector<std::int32_t>{1, 2, 3, 999, 999, 998, 0, 999}));
}

TEST_F(TokenDataTest, RoundTripUint32WithoutEos) {
  const std::string p = path("b.tok");
  {
    TokenFileWriter w(p, 100000);
    EXPECT_EQ(w.header().token_bytes, 4u);
    w.append_document(std::vector<std::uint32_t>{99999, 65536, 0});
    w.append_document(std::vector<std::uint32_t>{70000});
    w.close();
  }
  const TokenFile f(p);
  EXPECT_EQ(f.header().token_bytes, 4u);
  EXPECT_FALSE(f.header().has_eos());
  EXPECT_EQ(f.header().n_documents, 2u);
  EXPECT_EQ(fs::file_size(p), 64u + 4u * 4u);
  EXPECT_EQ(all_tokens(f), (std::vector<std::int32_t>{99999, 65536, 0, 70000}));
  // A 4-byte file of a small vocabulary is legal too.
  const std::string q = path("c.tok");
  {
    TokenFileWriter w(q, 10, 9, 4);
    w.append_document(std::vector<std::uint32_t>{5});
    w.close();
  }
  EXPECT_EQ(all_tokens(TokenFile(q)), (std::vector<std::int32_t>{5, 9}));
}

TEST_F(TokenDataTest, WriterRejectsBadInputAndCleansUp) {
  const std::string p = path("w.tok");
  expect_user_error([&] { TokenFileWriter w(p, 70000, kNoEosId, 2); }, p, "4-byte tokens");
  expect_user_error([&] { TokenFileWriter w(p, 10, 10); }, p, "eos id 10");
  expect_user_error(
      [&] {
        TokenFileWriter w(p, 10, 9);
        w.append_document(std::vector<std::uint32_t>{1, 10});
      },
      p, "not below the vocabulary size 10");
  expect_user_error(
      [&] {
        TokenFileWriter w(p, 10, 9);
        w.append_document(std::vector<std::uint32_t>{9});
      },
      p, "eos id");
  // An abandoned writer leaves neither the file nor its temporary.
  EXPECT_FALSE(fs::exists(p));
  EXPECT_FALSE(fs::exists(p + ".tmp"));
}

TEST_F(TokenDataTest, EveryCorruptionIsAUserErrorNamingTheFile) {
  const std::string good_path = path("good.tok");
  {
    TokenFileWriter w(good_path, 50, 49);
    w.append_document(std::vector<std::uint32_t>{1, 2, 3});
    w.append_document(std::vector<std::uint32_t>{4});
    w.close();
  }
  const std::string good = read_bytes(good_path);
  ASSERT_EQ(good.size(), 64u + 6u * 2u);
  const std::string p = path("bad.tok");
  auto expect_corrupt = [&](std::string bytes, const std::string& what) {
    write_bytes(p, bytes);
    expect_user_error([&] { TokenFile f(p); }, p, what);
  };

  expect_user_error([&] { TokenFile f(path("missing.tok")); }, path("missing.tok"), "cannot open");
  expect_corrupt(good.substr(0, 30), "shorter than the 64-byte header");
  expect_corrupt(good.substr(0, good.size() - 1), "truncated");
  expect_corrupt(good + std::string(2, '\0'), "trailing data");
  std::string b = good;
  b[0] = 'X';
  expect_corrupt(b, "wrong magic");
  b = good;
  put_u32(b, 8, 3);
  expect_corrupt(b, "format version 3");
  b = good;
  put_u32(b, 12, 3);
  expect_corrupt(b, "3-byte tokens");
  b = good;
  put_u64(b, 24, 0);
  expect_corrupt(b, "vocabulary size 0");
  b = good;
  put_u64(b, 24, 70000);
  expect_corrupt(b, "2-byte tokens");
  b = good;
  put_u64(b, 32, 50);
  expect_corrupt(b, "eos id 50");
  b = good;
  put_u64(b, 16, 1000);
  expect_corrupt(b, "truncated");
  b = good;
  put_u64(b, 40, 3);
  expect_corrupt(b, "declares 3 documents");
  b = good;
  b[60] = 1;
  expect_corrupt(b, "reserved");
  b = good;
  b[64 + 2 * 2] = 50;  // token 2 := 50 = vocab size
  expect_corrupt(b, "token 2 has id 50");
  // And the untouched bytes still read back.
  write_bytes(p, good);
  EXPECT_EQ(all_tokens(TokenFile(p)), (std::vector<std::int32_t>{1, 2, 3, 49, 4, 49}));
}

// Above kEagerValidationTokens the open-time scan is skipped; a bad id is
// then reported by the read that meets it.
TEST_F(TokenDataTest, LargeFilesAreValidatedAsTheyAreRead) {
  const std::uint64_t n = kEagerValidationTokens + 16;
  std::string bytes(64 + 2 * n, '\0');
  std::memcpy(bytes.data(), "FTRNTOK1", 8);
  put_u32(bytes, 8, 1);
  put_u32(bytes, 12, 2);
  put_u64(bytes, 16, n);
  put_u64(bytes, 24, 1000);
  put_u64(bytes, 32, kNoEosId);
  put_u64(bytes, 40, 1);
  const std::uint64_t bad = n - 5;
  put_u32(bytes, 64 + 2 * bad, 1000);  // also zeroes the next token: harmless
  const std::string p = path("large.tok");
  write_bytes(p, bytes);
  const TokenFile f(p);  // opens: not scanned
  std::vector<std::int32_t> out(8);
  f.read(0, 8, out.data());
  EXPECT_EQ(out, std::vector<std::int32_t>(8, 0));
  expect_user_error([&] { f.read(static_cast<std::int64_t>(bad) - 2, 4, out.data()); }, p,
                    "token " + std::to_string(bad) + " has id 1000");
  expect_user_error([&] { f.validate_all(); }, p, "has id 1000");
}

// ---- windows and sample order -------------------------------------------------

TEST_F(TokenDataTest, PackedWindowsFollowTheDocumentedFormula) {
  const std::string p = path("count.tok");
  write_counting_file(p, 100);
  const std::int64_t T = 8, B = 5;
  TokenDataset ds(p, {.seq_len = T, .global_batch = B, .packing = true, .shuffle = false, .seed = 7});
  ASSERT_EQ(ds.n_windows(), (100 - 1) / T);  // 12
  for (std::int64_t step = 0; step < 7; ++step) {
    // Two ranks' shares of the global batch: samples [0,2) and [2,5).
    for (auto [first, count] : {std::pair<std::int64_t, std::int64_t>{0, 2}, {2, 3}}) {
      Batch b(count, T);
      ds.fill_batch(step, first, count, b.inputs, b.targets);
      for (std::int64_t r = 0; r < count; ++r) {
        const std::int64_t w = (step * B + first + r) % ds.n_windows();
        EXPECT_EQ(ds.window_of_sample(step, first + r), w);
        for (std::int64_t j = 0; j < T; ++j) {
          EXPECT_EQ(b.in(r, j), w * T + j) << "step " << step << " sample " << first + r;
          EXPECT_EQ(b.tg(r, j), w * T + j + 1);
        }
      }
    }
  }
  // Evaluation windows are in file order; the last one ends at token 96.
  Batch e(3, T);
  ds.fill_windows(9, 3, e.inputs, e.targets);
  EXPECT_EQ(e.in(0, 0), 72);
  EXPECT_EQ(e.in(2, 0), 88);
  EXPECT_EQ(e.tg(2, T - 1), 96);
  // Exactly one window of T+1 tokens is the minimum.
  write_counting_file(path("short.tok"), 8);
  expect_user_error([&] { TokenDataset d(path("short.tok"), {.seq_len = 8}); }, path("short.tok"), "fewer than one window");
  write_counting_file(path("one.tok"), 9);
  EXPECT_EQ(TokenDataset(path("one.tok"), {.seq_len = 8}).n_windows(), 1);
}

TEST_F(TokenDataTest, ShuffleIsTheDocumentedPermutationPerEpoch) {
  const std::string p = path("count.tok");
  write_counting_file(p, 1000);
  const std::int64_t T = 10, B = 7;
  const TokenDatasetOptions options{.seq_len = T, .global_batch = B, .packing = true, .shuffle = true, .seed = 42};
  TokenDataset ds(p, options);
  const std::int64_t n = ds.n_windows();
  ASSERT_EQ(n, 99);

  // The documented Fisher-Yates, written out independently.
  auto documented = [&](std::int64_t epoch) {
    std::vector<std::int64_t> perm(n);
    for (std::int64_t i = 0; i < n; ++i) perm[i] = i;
    const std::uint64_t stream = rng::hash_name("ftrain.data.shuffle") + static_cast<std::uint64_t>(epoch);
    for (std::int64_t i = n - 1; i >= 1; --i)
      std::swap(perm[i], perm[rng::bits(42, stream, i) % static_cast<std::uint64_t>(i + 1)]);
    return perm;
  };

  // Steps covering three epochs (99 windows, 7 per step), read through batches.
  std::map<std::int64_t, std::vector<std::int64_t>> seen;  // epoch -> windows in order
  for (std::int64_t step = 0; step < 3 * n / B + 1; ++step) {
    Batch b(B, T);
    ds.fill_batch(step, 0, B, b.inputs, b.targets);
    for (std::int64_t k = 0; k < B; ++k) {
      const std::int64_t g = step * B + k;
      const std::int64_t w = b.in(k, 0) / T;
      EXPECT_EQ(b.in(k, 0), w * T);
      EXPECT_EQ(b.tg(k, T - 1), w * T + T);
      seen[g / n].push_back(w);
    }
  }
  for (std::int64_t epoch = 0; epoch < 3; ++epoch) {
    const auto& windows = seen[epoch];
    ASSERT_EQ(static_cast<std::int64_t>(windows.size()), n);
    EXPECT_EQ(windows, documented(epoch)) << "epoch " << epoch;
    EXPECT_EQ(std::set<std::int64_t>(windows.begin(), windows.end()).size(), static_cast<std::size_t>(n));
  }
  EXPECT_NE(seen[0], seen[1]);

  // Reproducible: a fresh dataset, asked out of order, agrees.
  TokenDataset again(p, options);
  EXPECT_EQ(again.window_of_sample(20, 3), ds.window_of_sample(20, 3));
  EXPECT_EQ(again.window_of_sample(0, 0), seen[0][0]);
  // Another seed gives another order.
  TokenDataset other(p, {.seq_len = T, .global_batch = B, .packing = true, .shuffle = true, .seed = 43});
  std::vector<std::int64_t> other_epoch0;
  for (std::int64_t g = 0; g < n; ++g) other_epoch0.push_back(other.window_of_sample(g / B, g % B));
  EXPECT_NE(other_epoch0, seen[0]);
}

TEST_F(TokenDataTest, UnpackedDocumentsArePaddedWithIgnoredTargets) {
  const std::string p = path("docs.tok");
  const std::uint32_t eos = 99;
  {
    TokenFileWriter w(p, 100, eos);
    w.append_document(std::vector<std::uint32_t>{10, 11});                                // 3 tokens with eos
    w.append_document(std::vector<std::uint32_t>{});                                      // eos only: skipped
    w.append_document(std::vector<std::uint32_t>{20, 21, 22, 23, 24, 25, 26, 27, 28});  // longer than T+1
    w.append_document(std::vector<std::uint32_t>{30, 31, 32, 33, 34, 35});               // exactly T+1 with eos
    w.close();
  }
  const std::int64_t T = 6;
  TokenDataset ds(p, {.seq_len = T, .global_batch = 2, .packing = false, .shuffle = false});
  ASSERT_EQ(ds.n_windows(), 3);
  Batch b(3, T);
  ds.fill_windows(0, 3, b.inputs, b.targets);
  const std::vector<std::vector<std::int32_t>> want_in = {
      {10, 11, 99, 99, 99, 99}, {20, 21, 22, 23, 24, 25}, {30, 31, 32, 33, 34, 35}};
  const std::vector<std::vector<std::int32_t>> want_tg = {
      {11, 99, -100, -100, -100, -100}, {21, 22, 23, 24, 25, 26}, {31, 32, 33, 34, 35, 99}};
  for (int r = 0; r < 3; ++r)
    for (int j = 0; j < T; ++j) {
      EXPECT_EQ(b.in(r, j), want_in[r][j]) << "row " << r << " col " << j;
      EXPECT_EQ(b.tg(r, j), want_tg[r][j]) << "row " << r << " col " << j;
    }
  EXPECT_EQ(kIgnoreTarget, -100);
  // Training order without shuffle: sample k of step s is document (2s+k) mod 3.
  Batch t(2, T);
  ds.fill_batch(1, 0, 2, t.inputs, t.targets);
  EXPECT_EQ(t.in(0, 0), 30);
  EXPECT_EQ(t.in(1, 0), 10);

  write_counting_file(path("noeos.tok"), 50);
  expect_user_error([&] { TokenDataset d(path("noeos.tok"), {.seq_len = 4, .packing = false}); }, path("noeos.tok"),
                    "no eos id");
}

// ---- synthetic corpus ---------------------------------------------------------

TEST_F(TokenDataTest, SyntheticCorpusIsDeterministicAndHasItsStatedEntropy) {
  const std::int64_t V = 48, N = 200000;
  const auto stats = write_synthetic_corpus(path("s1.tok"), N, V, 5);
  write_synthetic_corpus(path("s2.tok"), N, V, 5);
  write_synthetic_corpus(path("s3.tok"), N, V, 6);
  SyntheticCorpusOptions eval_options;
  eval_options.sample_stream = 1;
  const auto eval_stats = write_synthetic_corpus(path("e.tok"), N, V, 5, eval_options);
  EXPECT_EQ(read_bytes(path("s1.tok")), read_bytes(path("s2.tok")));
  EXPECT_NE(read_bytes(path("s1.tok")), read_bytes(path("s3.tok")));
  EXPECT_NE(read_bytes(path("s1.tok")), read_bytes(path("e.tok")));
  EXPECT_EQ(eval_stats.entropy_rate_nats, stats.entropy_rate_nats);

  const TokenFile f(path("s1.tok"));
  EXPECT_EQ(stats.n_tokens, N);
  EXPECT_EQ(f.n_tokens(), N);
  EXPECT_EQ(f.header().eos_id, static_cast<std::uint64_t>(V - 1));
  EXPECT_EQ(static_cast<std::int64_t>(f.header().n_documents), stats.n_documents);
  // Documents average ~64 tokens (63 + eos).
  EXPECT_NEAR(static_cast<double>(N) / stats.n_documents, 64.0, 4.0);
  EXPECT_DOUBLE_EQ(stats.uniform_entropy_nats, std::log(48.0));
  EXPECT_LT(stats.entropy_rate_nats, 0.4 * stats.uniform_entropy_nats);
  EXPECT_GT(stats.entropy_rate_nats, 0.3);

  // Empirical conditional entropy H(next | current) of the stream.
  const auto tokens = all_tokens(f);
  std::vector<double> pair(V * V, 0.0), first(V, 0.0);
  for (std::size_t i = 0; i + 1 < tokens.size(); ++i) {
    pair[tokens[i] * V + tokens[i + 1]] += 1;
    first[tokens[i]] += 1;
  }
  double h = 0.0;
  const double pairs = static_cast<double>(tokens.size() - 1);
  for (std::int64_t a = 0; a < V; ++a)
    for (std::int64_t c = 0; c < V; ++c)
      if (pair[a * V + c] > 0) h -= pair[a * V + c] / pairs * std::log(pair[a * V + c] / first[a]);
  EXPECT_NEAR(h, stats.entropy_rate_nats, 0.02 * stats.entropy_rate_nats);

  // The chain's rows are distributions and the stationary one sums to 1.
  const MarkovChain chain = make_synthetic_chain(V, 5, {});
  for (const auto& row : chain.prob) {
    double s = 0.0;
    for (double p : row) s += p;
    EXPECT_NEAR(s, 1.0, 1e-12);
  }
  double total = 0.0;
  for (double p : stationary_distribution(chain)) total += p;
  EXPECT_NEAR(total, 1.0, 1e-12);
}

// ---- ftrain-prep ----------------------------------------------------------------

namespace {
int run_prep(std::vector<std::string> args) {
  args.insert(args.begin(), "ftrain-prep");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return prep_main(static_cast<int>(args.size()), argv.data());
}
}  // namespace

TEST_F(TokenDataTest, PrepCommandLine) {
  EXPECT_EQ(run_prep({"--help"}), 0);
  EXPECT_EQ(run_prep({}), 2);
  EXPECT_EQ(run_prep({"bogus"}), 2);
  EXPECT_EQ(run_prep({"synthetic", "--tokens", "100", "--vocab", "10", "--seed", "1"}), 2);  // no --out
  EXPECT_EQ(run_prep({"synthetic", "--out", path("x.tok"), "--tokens", "ten", "--vocab", "10", "--seed", "1"}), 2);
  EXPECT_EQ(run_prep({"synthetic", "--out", path("x.tok"), "--tokens", "100", "--vocab", "10", "--seed", "1",
                      "--eval-out", path("y.tok")}),
            2);  // --eval-tokens missing
  EXPECT_FALSE(fs::exists(path("x.tok")));

  EXPECT_EQ(run_prep({"synthetic", "--out", path("t.tok"), "--tokens", "5000", "--vocab", "32", "--seed", "3",
                      "--eval-out", path("v.tok"), "--eval-tokens", "700"}),
            0);
  EXPECT_EQ(TokenFile(path("t.tok")).n_tokens(), 5000);
  EXPECT_EQ(TokenFile(path("v.tok")).n_tokens(), 700);
  EXPECT_EQ(run_prep({"info", path("t.tok")}), 0);
  EXPECT_EQ(run_prep({"info", path("nothing.tok")}), 1);
  EXPECT_EQ(run_prep({"synthetic", "--out", path("no_such_dir/t.tok"), "--tokens", "10", "--vocab", "32", "--seed",
                      "3"}),
            1);
}
