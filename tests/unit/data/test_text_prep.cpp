// ftrain-prep text: byte and SentencePiece tokenizers, plain text and JSON
// lines inputs, error messages with line numbers, the train/eval split and
// constant memory on a multi-megabyte input.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "data/prep_cli.hpp"
#include "data/text_prep.hpp"
#include "data/text_tokenizer.hpp"
#include "data/token_file.hpp"

using namespace ftrain;
using namespace ftrain::data;
namespace fs = std::filesystem;

namespace {

class TextPrepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("ftrain_text_" + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// The documents of a token file: the runs of tokens before each eos.
std::vector<std::vector<std::uint32_t>> documents_of(const std::string& path) {
  const TokenFile file(path);
  file.validate_all();
  EXPECT_TRUE(file.header().has_eos());
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(file.n_tokens()));
  file.read(0, file.n_tokens(), tokens.data());
  std::vector<std::vector<std::uint32_t>> docs(1);
  for (const std::int32_t t : tokens) {
    if (static_cast<std::uint64_t>(t) == file.header().eos_id)
      docs.emplace_back();
    else
      docs.back().push_back(static_cast<std::uint32_t>(t));
  }
  EXPECT_TRUE(docs.back().empty()) << path << " does not end with an eos";
  docs.pop_back();
  EXPECT_EQ(docs.size(), file.header().n_documents);
  return docs;
}

std::vector<std::string> decoded_documents(const std::string& path, const TextTokenizer& tokenizer) {
  std::vector<std::string> texts;
  for (const auto& doc : documents_of(path)) texts.push_back(tokenizer.decode(doc));
  return texts;
}

int run_prep(std::vector<std::string> args) {
  args.insert(args.begin(), "ftrain-prep");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return prep_main(static_cast<int>(argv.size()), argv.data());
}

// Expects a UserError whose message contains every one of `parts`.
void expect_user_error(const std::function<void()>& body, const std::vector<std::string>& parts) {
  try {
    body();
    ADD_FAILURE() << "no error; expected one containing '" << parts.front() << "'";
  } catch (const UserError& e) {
    const std::string message = e.what();
    for (const auto& part : parts) EXPECT_NE(message.find(part), std::string::npos) << message;
  }
}

long peak_rss_kib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;  // KiB on Linux
}

// First in the file, so that the peak RSS it measures is not hidden by a
// larger peak reached by an earlier test of this process.
TEST_F(TextPrepTest, MultiMegabyteJsonlStreamsInConstantMemory) {
  const std::string input = path("big.jsonl");
  const int n_docs = 6000;
  std::int64_t expected_bytes = 0;
  {
    std::ofstream out(input, std::ios::binary);
    std::string body;
    for (int d = 0; d < n_docs; ++d) {
      body.clear();
      for (int w = 0; body.size() < 900; ++w) body += "word" + std::to_string((d * 31 + w * 7) % 1000) + " ";
      body += "end of document " + std::to_string(d);
      expected_bytes += static_cast<std::int64_t>(body.size());
      out << "{\"id\": " << d << ", \"content\": \"" << body << "\"}\n";
    }
  }
  ASSERT_GT(fs::file_size(input), 5u << 20);

  const long before = peak_rss_kib();
  TextPrepOptions options;
  options.out_path = path("big.tok");
  options.jsonl = true;
  options.text_field = "content";
  const auto tokenizer = make_byte_tokenizer();
  const TextPrepStats stats = prepare_text({input}, *tokenizer, options);
  const long growth_kib = peak_rss_kib() - before;

  EXPECT_EQ(stats.documents, n_docs);
  EXPECT_EQ(stats.tokens, expected_bytes + n_docs);
  const TokenFile file(options.out_path);
  EXPECT_EQ(file.n_tokens(), expected_bytes + n_docs);
  // Holding the input (> 5 MiB) or its tokens (4 bytes each) would add far more.
  EXPECT_LT(growth_kib, 3 * 1024) << "peak RSS grew by " << growth_kib << " KiB while preparing "
                                  << fs::file_size(input) << " bytes";
}

TEST_F(TextPrepTest, BytesTokenizerRoundTripsPlainTextFiles) {
  const std::string a = "first document\nwith two lines\n";
  const std::string b = "second: caf\xc3\xa9 \xe4\xb8\x96\xe7\x95\x8c, no trailing newline";
  write_text(path("a.txt"), a);
  write_text(path("b.txt"), b);
  ASSERT_EQ(run_prep({"text", "--out", path("out.tok"), "--tokenizer", "bytes", path("a.txt"), path("b.txt")}), 0);

  const TokenFile file(path("out.tok"));
  EXPECT_EQ(file.header().vocab_size, kByteTokenizerVocab);
  EXPECT_EQ(file.header().eos_id, kByteTokenizerEos);
  EXPECT_EQ(file.header().n_documents, 2u);
  EXPECT_EQ(file.n_tokens(), static_cast<std::int64_t>(a.size() + b.size() + 2));
  const auto tokenizer = make_byte_tokenizer();
  EXPECT_EQ(decoded_documents(path("out.tok"), *tokenizer), (std::vector<std::string>{a, b}));

  // --doc-per-line: every non-empty line is a document.
  ASSERT_EQ(run_prep({"text", "--out", path("lines.tok"), "--tokenizer", "bytes", "--doc-per-line", path("a.txt")}), 0);
  EXPECT_EQ(decoded_documents(path("lines.tok"), *tokenizer),
            (std::vector<std::string>{"first document", "with two lines"}));
}

TEST_F(TextPrepTest, JsonlContentFieldKeepsUnicodeAndEscapedNewlines) {
  write_text(path("in.jsonl"),
             "{\"content\": \"caf\\u00e9 \xe4\xb8\x96\xe7\x95\x8c\\nline two\\t\\\"quoted\\\"\", \"id\": 1}\n"
             "\n"
             "{\"meta\": {\"x\": [1, 2]}, \"content\": \"\\ud83d\\ude00 emoji\"}\n"
             "{\"content\": \"\"}\n");
  ASSERT_EQ(run_prep({"text", "--out", path("out.tok"), "--tokenizer", "bytes", "--jsonl", "--text-field", "content",
                      path("in.jsonl")}),
            0);
  const auto tokenizer = make_byte_tokenizer();
  EXPECT_EQ(decoded_documents(path("out.tok"), *tokenizer),
            (std::vector<std::string>{"caf\xc3\xa9 \xe4\xb8\x96\xe7\x95\x8c\nline two\t\"quoted\"",
                                      "\xf0\x9f\x98\x80 emoji"}));
}

TEST_F(TextPrepTest, MalformedJsonNamesFileAndLine) {
  const std::string input = path("bad.jsonl");
  write_text(input, "{\"content\": \"ok\"}\n{\"content\": \"ok too\"}\n{\"content\": \"unterminated}\n");
  TextPrepOptions options;
  options.out_path = path("out.tok");
  options.jsonl = true;
  options.text_field = "content";
  const auto tokenizer = make_byte_tokenizer();
  expect_user_error([&] { prepare_text({input}, *tokenizer, options); }, {input + ":3: malformed JSON ("});
  EXPECT_FALSE(fs::exists(options.out_path));
  EXPECT_EQ(run_prep({"text", "--out", options.out_path, "--tokenizer", "bytes", "--jsonl", input}), 1);
}

TEST_F(TextPrepTest, MissingOrNonStringFieldNamesFileAndLine) {
  const std::string input = path("in.jsonl");
  TextPrepOptions options;
  options.out_path = path("out.tok");
  options.jsonl = true;
  options.text_field = "content";
  const auto tokenizer = make_byte_tokenizer();

  write_text(input, "{\"content\": \"ok\"}\n{\"text\": \"wrong field\"}\n");
  expect_user_error([&] { prepare_text({input}, *tokenizer, options); }, {input + ":2: no string field 'content'"});
  write_text(input, "{\"content\": \"ok\"}\n\n{\"content\": 42}\n");
  expect_user_error([&] { prepare_text({input}, *tokenizer, options); }, {input + ":3: no string field 'content'"});
  write_text(input, "[\"content\"]\n");
  expect_user_error([&] { prepare_text({input}, *tokenizer, options); }, {input + ":1: expected a JSON object"});
  EXPECT_FALSE(fs::exists(options.out_path));
}

TEST_F(TextPrepTest, MissingInputAndUsageErrors) {
  const auto tokenizer = make_byte_tokenizer();
  TextPrepOptions options;
  options.out_path = path("out.tok");
  expect_user_error([&] { prepare_text({path("absent.txt")}, *tokenizer, options); },
                    {path("absent.txt"), "input file not found"});
  EXPECT_EQ(run_prep({"text", "--out", path("out.tok"), "--tokenizer", "bytes", path("absent.txt")}), 1);
  EXPECT_FALSE(fs::exists(path("out.tok")));

  write_text(path("a.txt"), "text");
  EXPECT_EQ(run_prep({"text", "--out", path("out.tok"), "--tokenizer", "bytes"}), 2);  // no input
  EXPECT_EQ(run_prep({"text", "--out", path("out.tok"), "--tokenizer", "words", path("a.txt")}), 2);
  EXPECT_EQ(run_prep({"text", "--out", path("out.tok"), "--tokenizer", "spm", path("a.txt")}), 2);  // no --model
  EXPECT_EQ(run_prep({"text", "--out", path("out.tok"), "--tokenizer", "bytes", "--eval-every", "5", path("a.txt")}),
            2);
  EXPECT_EQ(run_prep({"text", "--tokenizer", "bytes", path("a.txt")}), 2);  // no --out

  write_text(path("not_a_model"), "this is not a sentencepiece model");
  expect_user_error([&] { load_sentencepiece_tokenizer(path("not_a_model")); },
                    {path("not_a_model"), "cannot load SentencePiece model"});
  expect_user_error([&] { load_sentencepiece_tokenizer(path("absent.model")); }, {path("absent.model"), "not found"});
  EXPECT_EQ(run_prep({"text", "--out", path("out.tok"), "--tokenizer", "spm", "--model", path("not_a_model"),
                      path("a.txt")}),
            1);
}

TEST_F(TextPrepTest, EveryNthDocumentGoesToTheEvalFile) {
  std::string lines;
  for (int d = 1; d <= 23; ++d) lines += "{\"text\": \"document " + std::to_string(d) + "\"}\n";
  write_text(path("in.jsonl"), lines);
  ASSERT_EQ(run_prep({"text", "--out", path("train.tok"), "--eval-out", path("eval.tok"), "--eval-every", "5",
                      "--tokenizer", "bytes", "--jsonl", path("in.jsonl")}),
            0);
  const auto tokenizer = make_byte_tokenizer();
  const auto eval = decoded_documents(path("eval.tok"), *tokenizer);
  EXPECT_EQ(eval, (std::vector<std::string>{"document 5", "document 10", "document 15", "document 20"}));
  const auto train = decoded_documents(path("train.tok"), *tokenizer);
  ASSERT_EQ(train.size(), 19u);
  EXPECT_EQ(train.front(), "document 1");
  EXPECT_EQ(train[4], "document 6");
  EXPECT_EQ(train.back(), "document 23");

  TextPrepOptions options;
  options.out_path = path("train2.tok");
  options.eval_out_path = path("eval2.tok");
  options.eval_every = 5;
  options.jsonl = true;
  const TextPrepStats stats = prepare_text({path("in.jsonl")}, *tokenizer, options);
  EXPECT_EQ(stats.documents, 23);
  EXPECT_EQ(stats.train_documents, 19);
  EXPECT_EQ(stats.eval_documents, 4);
  EXPECT_EQ(stats.train_tokens + stats.eval_tokens, stats.tokens);
  EXPECT_EQ(stats.eval_tokens, TokenFile(path("eval2.tok")).n_tokens());
  EXPECT_EQ(stats.train_tokens, TokenFile(path("train2.tok")).n_tokens());
}

// Trains a 64-piece SentencePiece model with Debian's spm_train, then
// tokenizes JSON lines with it through the command line.
TEST_F(TextPrepTest, SentencePieceModelFromSpmTrain) {
  if (std::system("command -v spm_train > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "spm_train not found (Debian package 'sentencepiece'); SentencePiece test skipped";
  const std::vector<std::string> words = {"the", "cat", "sat", "on", "a", "mat", "dog", "ran", "to", "big",
                                          "red", "house", "and", "small", "blue", "tree"};
  {
    std::ofstream corpus(path("corpus.txt"));
    for (int line = 0; line < 400; ++line) {
      for (int w = 0; w < 8; ++w) corpus << (w ? " " : "") << words[(line * 7 + w * 5 + line / 3) % words.size()];
      corpus << "\n";
    }
  }
  const std::string command = "spm_train --input=" + path("corpus.txt") + " --model_prefix=" + path("tiny") +
                              " --vocab_size=64 --model_type=bpe --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=-1"
                              " --minloglevel=2 > " + path("spm_train.log") + " 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << "spm_train failed; see " << path("spm_train.log");
  const std::string model = path("tiny.model");

  const std::vector<std::string> texts = {"the cat sat on a mat", "a big red dog ran to the small blue house",
                                          "tree and house", "the mat"};
  {
    std::ofstream in(path("in.jsonl"));
    for (const auto& t : texts) in << "{\"content\": \"" << t << "\"}\n";
  }
  ASSERT_EQ(run_prep({"text", "--out", path("out.tok"), "--tokenizer", "spm", "--model", model, "--jsonl",
                      "--text-field", "content", path("in.jsonl")}),
            0);
  const auto tokenizer = load_sentencepiece_tokenizer(model);
  EXPECT_EQ(tokenizer->vocab_size(), 64u);
  EXPECT_EQ(tokenizer->eos_id(), 2u);
  const TokenFile file(path("out.tok"));
  EXPECT_EQ(file.header().vocab_size, 64u);
  EXPECT_EQ(file.header().eos_id, 2u);
  EXPECT_EQ(file.header().n_documents, texts.size());

  // The eos sits exactly after each document's own encoding.
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(file.n_tokens()));
  file.read(0, file.n_tokens(), tokens.data());
  std::size_t at = 0;
  for (const auto& t : texts) {
    std::vector<std::uint32_t> ids;
    tokenizer->encode(t, ids);
    ASSERT_FALSE(ids.empty());
    ASSERT_LE(at + ids.size() + 1, tokens.size());
    for (std::size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(static_cast<std::uint32_t>(tokens[at + i]), ids[i]);
    EXPECT_EQ(tokens[at + ids.size()], 2) << "no eos after '" << t << "'";
    at += ids.size() + 1;
  }
  EXPECT_EQ(at, tokens.size());
  EXPECT_EQ(decoded_documents(path("out.tok"), *tokenizer), texts);

  // A model trained without an eos piece is refused.
  const std::string no_eos = "spm_train --input=" + path("corpus.txt") + " --model_prefix=" + path("noeos") +
                             " --vocab_size=64 --model_type=bpe --eos_id=-1 --minloglevel=2 > " +
                             path("spm_train2.log") + " 2>&1";
  ASSERT_EQ(std::system(no_eos.c_str()), 0);
  expect_user_error([&] { load_sentencepiece_tokenizer(path("noeos.model")); },
                    {path("noeos.model"), "no eos piece"});
}

}  // namespace
