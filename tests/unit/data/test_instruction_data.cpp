// Instruction data (issue 16): token file version 2 (loss mask + document
// index) next to version 1 files written before it existed, the mask applied
// as targets -100 by the dataset, and `ftrain-prep instruct`'s templates with
// their exact tokens and masks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "core/tensor.hpp"
#include "data/instruction_prep.hpp"
#include "data/prep_cli.hpp"
#include "data/token_batch_source.hpp"
#include "data/token_dataset.hpp"
#include "data/token_file.hpp"

using namespace ftrain;
using namespace ftrain::data;
namespace fs = std::filesystem;

namespace {

class InstructionDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("ftrain_instr_" + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" + info->name());
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

void expect_user_error(const std::function<void()>& body, const std::string& where, const std::string& what) {
  try {
    body();
    ADD_FAILURE() << "no error; expected one about '" << what << "'";
  } catch (const UserError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(where), std::string::npos) << message;
    EXPECT_NE(message.find(what), std::string::npos) << message;
  }
}

std::vector<std::int64_t> to_int_vector(const Tensor& t) {
  const auto* p = t.data_as<std::int32_t>();
  return std::vector<std::int64_t>(p, p + t.numel());
}

std::vector<std::int32_t> all_tokens(const TokenFile& f) {
  std::vector<std::int32_t> out(static_cast<std::size_t>(f.n_tokens()));
  f.read(0, f.n_tokens(), out.data());
  return out;
}
std::vector<int> all_trained(const TokenFile& f) {
  std::vector<int> out;
  for (std::int64_t i = 0; i < f.n_tokens(); ++i) out.push_back(f.trained(i) ? 1 : 0);
  return out;
}

// A version 1 token file exactly as the writer before version 2 (main at
// 54e8a03) wrote it: vocab 300 (2-byte tokens), eos 299, documents
// {5, 280, 7}, {1, 2}, {298}.
const unsigned char kVersion1File[] = {
    0x46, 0x54, 0x52, 0x4e, 0x54, 0x4f, 0x4b, 0x31, 0x01, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x09, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2c, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2b, 0x01, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x05, 0x00, 0x18, 0x01, 0x07, 0x00, 0x2b, 0x01,
    0x01, 0x00, 0x02, 0x00, 0x2b, 0x01, 0x2a, 0x01, 0x2b, 0x01};

TEST_F(InstructionDataTest, Version1FileStillLoadsUnmasked) {
  const std::string p = path("v1.tok");
  write_bytes(p, std::string(reinterpret_cast<const char*>(kVersion1File), sizeof kVersion1File));
  const TokenFile f(p);
  EXPECT_EQ(f.header().version, 1u);
  EXPECT_FALSE(f.header().has_loss_mask());
  EXPECT_FALSE(f.has_document_index());
  EXPECT_EQ(all_tokens(f), (std::vector<std::int32_t>{5, 280, 7, 299, 1, 2, 299, 298, 299}));
  EXPECT_EQ(all_trained(f), std::vector<int>(9, 1));
  // Packing off finds the documents by eos; no target is masked.
  TokenDatasetOptions o;
  o.seq_len = 4;
  o.packing = false;
  TokenDataset d(p, o);
  ASSERT_EQ(d.n_windows(), 3);
  Tensor in = Tensor::empty({3, 4}, DType::i32), tg = Tensor::empty({3, 4}, DType::i32);
  d.fill_windows(0, 3, in, tg);
  EXPECT_EQ(to_int_vector(tg), (std::vector<std::int64_t>{280, 7, 299, -100, 2, 299, -100, -100, 299, -100, -100, -100}));
}

// Writes {tokens, trained} documents to a masked file.
void write_masked(const std::string& p, std::uint64_t vocab, std::uint64_t eos,
                  const std::vector<std::pair<std::vector<std::uint32_t>, std::vector<std::uint8_t>>>& docs) {
  TokenFileWriter w(p, vocab, eos, 0, TokenFileLayout::masked);
  for (const auto& [tokens, trained] : docs) w.append_document(tokens, trained);
  w.close();
}

TEST_F(InstructionDataTest, Version2CarriesTheMaskAndTheDocumentIndex) {
  const std::string p = path("v2.tok");
  // Document 1 is a two-turn chat: its inner eos (9) stays inside it.
  write_masked(p, 10, 9, {{{1, 2, 3}, {0, 0, 1}}, {{4, 9, 5, 6}, {0, 1, 0, 1}}, {{7}, {0}}});
  const std::string bytes = read_bytes(p);
  // 64 header + 11 u16 tokens (22 bytes, padded to 24) + 2 mask bytes (padded
  // to 8) + 4 index entries of 8 bytes.
  ASSERT_EQ(bytes.size(), 64u + 24u + 8u + 32u);
  const TokenFile f(p);
  EXPECT_EQ(f.header().version, 2u);
  EXPECT_EQ(f.header().n_documents, 3u);
  EXPECT_EQ(all_tokens(f), (std::vector<std::int32_t>{1, 2, 3, 9, 4, 9, 5, 6, 9, 7, 9}));
  EXPECT_EQ(all_trained(f), (std::vector<int>{0, 0, 1, 1, 0, 1, 0, 1, 1, 0, 1}));
  ASSERT_TRUE(f.has_document_index());
  EXPECT_EQ(f.document_begin(0), 0);
  EXPECT_EQ(f.document_begin(1), 4);
  EXPECT_EQ(f.document_begin(2), 9);
  EXPECT_EQ(f.document_begin(3), 11);
  EXPECT_EQ(static_cast<unsigned char>(bytes[64 + 24]), 0b10101100);  // mask bits 0..7, token 0 in bit 0
  EXPECT_EQ(static_cast<unsigned char>(bytes[64 + 24 + 1]), 0b101);

  auto expect_corrupt = [&](std::string b, const std::string& what) {
    const std::string bad = path("bad.tok");
    write_bytes(bad, b);
    expect_user_error([&] { TokenFile g(bad); }, bad, what);
  };
  expect_corrupt(bytes.substr(0, bytes.size() - 8), "truncated");
  expect_corrupt(bytes + std::string(8, '\0'), "trailing data");
  std::string b = bytes;
  b[64 + 24 + 1] = static_cast<char>(0b1101);  // a mask bit past token 10
  expect_corrupt(b, "padding bits");
  b = bytes;
  b[64 + 24 + 8 + 8] = 5;  // document 0 would end at token 5, a 4 (not eos)
  expect_corrupt(b, "does not end with the eos id");
  b = bytes;
  b[64 + 24 + 8 + 16] = 3;  // index not increasing
  expect_corrupt(b, "not after its start");
}

TEST_F(InstructionDataTest, WriterRefusesMaskOnPlainFilesAndMismatchedLengths) {
  const std::string p = path("w.tok");
  TokenFileWriter plain(p, 10, 9);
  const std::vector<std::uint32_t> t{1, 2};
  const std::vector<std::uint8_t> m{0, 1};
  EXPECT_THROW(plain.append_document(t, m), Error);
  TokenFileWriter masked(path("m.tok"), 10, 9, 0, TokenFileLayout::masked);
  const std::vector<std::uint8_t> short_mask{1};
  EXPECT_THROW(masked.append_document(t, short_mask), Error);
}

TEST_F(InstructionDataTest, DatasetTurnsUntrainedTargetsIntoIgnore) {
  const std::string p = path("v2.tok");
  write_masked(p, 10, 9, {{{1, 2, 3}, {0, 0, 1}}, {{4, 9, 5, 6}, {0, 1, 0, 1}}, {{7}, {0}}});
  // tokens  1 2 3 9 | 4 9 5 6 9 | 7 9
  // trained 0 0 1 1 | 0 1 0 1 1 | 0 1
  TokenDatasetOptions o;
  o.seq_len = 5;
  o.packing = false;  // one document per row, from the document index (not eos)
  TokenDataset off(p, o);
  ASSERT_EQ(off.n_windows(), 3);
  Tensor in = Tensor::empty({3, 5}, DType::i32), tg = Tensor::empty({3, 5}, DType::i32);
  off.fill_windows(0, 3, in, tg);
  EXPECT_EQ(to_int_vector(in), (std::vector<std::int64_t>{1, 2, 3, 9, 9, 4, 9, 5, 6, 9, 7, 9, 9, 9, 9}));
  EXPECT_EQ(to_int_vector(tg),
            (std::vector<std::int64_t>{-100, 3, 9, -100, -100, 9, -100, 6, 9, -100, 9, -100, -100, -100, -100}));
  o.packing = true;  // windows over the stream: target t is token w*T + t + 1
  o.seq_len = 4;
  TokenDataset on(p, o);
  ASSERT_EQ(on.n_windows(), 2);
  Tensor in2 = Tensor::empty({2, 4}, DType::i32), tg2 = Tensor::empty({2, 4}, DType::i32);
  on.fill_windows(0, 2, in2, tg2);
  EXPECT_EQ(to_int_vector(in2), (std::vector<std::int64_t>{1, 2, 3, 9, 4, 9, 5, 6}));
  EXPECT_EQ(to_int_vector(tg2), (std::vector<std::int64_t>{-100, 3, 9, -100, 9, -100, 6, 9}));
}

TEST_F(InstructionDataTest, DocumentMaskIdsRestartAtZeroInEveryWindow) {
  const std::string p = path("v2.tok");
  write_masked(p, 10, 9, {{{1, 2, 3}, {0, 0, 1}}, {{4, 9, 5, 6}, {0, 1, 0, 1}}, {{7}, {0}}});
  // tokens  1 2 3 9 | 4 9 5 6 9 | 7 9   (documents begin at 0, 4, 9)
  TokenDatasetOptions o;
  o.seq_len = 3;
  o.global_batch = 3;
  o.document_mask = true;
  TokenDataset ds(p, o);
  ASSERT_EQ(ds.n_windows(), 3);
  Tensor docs = Tensor::empty({3, 3}, DType::i32);
  ds.fill_window_documents(0, 3, docs);
  // Window 1 is tokens 3 4 5: the eos of document 0, then document 1.
  EXPECT_EQ(to_int_vector(docs), (std::vector<std::int64_t>{0, 0, 0, 0, 1, 1, 0, 0, 0}));
  Tensor batch_docs = Tensor::empty({2, 3}, DType::i32);
  ds.fill_batch_documents(1, 1, 2, batch_docs);  // samples 4, 5: windows 1, 2
  EXPECT_EQ(to_int_vector(batch_docs), (std::vector<std::int64_t>{0, 1, 1, 0, 0, 0}));
  o.seq_len = 10;  // one window over all three documents
  o.global_batch = 1;
  TokenDataset whole(p, o);
  Tensor one = Tensor::empty({1, 10}, DType::i32);
  whole.fill_window_documents(0, 1, one);
  EXPECT_EQ(to_int_vector(one), (std::vector<std::int64_t>{0, 0, 0, 0, 1, 1, 1, 1, 1, 2}));
}

// The batches training and evaluation read carry RoPE positions that
// restart at each document of a window (`positions restart`, the default),
// and none with `positions continue` (the model then uses 0..T-1).
TEST_F(InstructionDataTest, DocumentMaskBatchesRestartPositionsAtEachDocument) {
  const std::string p = path("v2.tok");
  write_masked(p, 10, 9, {{{1, 2, 3}, {0, 0, 1}}, {{4, 9, 5, 6}, {0, 1, 0, 1}}, {{7}, {0}}});
  // tokens  1 2 3 9 | 4 9 5 6 9 | 7 9   (documents begin at 0, 4, 9)
  TokenDatasetOptions o;
  o.seq_len = 10;  // one window over all three documents
  o.global_batch = 1;
  o.document_mask = true;
  TokenBatchSource source(p, o);
  Batch train;
  source.fill_batch(0, 0, 1, train);
  ASSERT_TRUE(train.positions.defined());
  EXPECT_EQ(to_int_vector(train.positions), (std::vector<std::int64_t>{0, 1, 2, 3, 0, 1, 2, 3, 4, 0}));
  Batch eval;
  source.fill_eval(0, 1, 2, eval);  // a second, padding row: one document, positions 0..T-1
  ASSERT_TRUE(eval.positions.defined());
  EXPECT_EQ(to_int_vector(eval.positions),
            (std::vector<std::int64_t>{0, 1, 2, 3, 0, 1, 2, 3, 4, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  o.restart_positions = false;
  TokenBatchSource continued(p, o);
  Batch kept;
  continued.fill_batch(0, 0, 1, kept);
  EXPECT_TRUE(kept.documents.defined());
  EXPECT_FALSE(kept.positions.defined());
  // A window that begins inside a document: its tail starts at position 0
  // (the mask lets it see nothing before the window either).
  const Tensor tail_ids = Tensor::empty({1, 4}, DType::i32);
  const std::vector<std::int32_t> ids = {0, 0, 1, 1};
  std::copy(ids.begin(), ids.end(), tail_ids.data_as<std::int32_t>());
  Tensor tail_positions = Tensor::empty({1, 4}, DType::i32);
  fill_document_positions(tail_ids, tail_positions);
  EXPECT_EQ(to_int_vector(tail_positions), (std::vector<std::int64_t>{0, 1, 0, 1}));
}

TEST_F(InstructionDataTest, DocumentMaskNeedsPackingAndADocumentIndex) {
  const std::string p = path("v2.tok");
  write_masked(p, 10, 9, {{{1, 2, 3}, {0, 0, 1}}, {{4, 9, 5, 6}, {0, 1, 0, 1}}});
  TokenDatasetOptions o;
  o.seq_len = 3;
  o.document_mask = true;
  o.packing = false;
  expect_user_error([&] { TokenDataset ds(p, o); }, p, "document_mask on needs packing on");
  const std::string plain = path("v1.tok");
  TokenFileWriter w(plain, 10, 9);
  const std::vector<std::uint32_t> tokens{1, 2, 3, 4, 5};
  w.append_document(tokens);
  w.close();
  o.packing = true;
  expect_user_error([&] { TokenDataset ds(plain, o); }, plain, "needs a token file with a document index");
}

// Runs `ftrain-prep instruct` with the byte tokenizer on `jsonl` and returns
// the token file's tokens and mask.
struct Prepared {
  std::vector<std::int32_t> tokens;
  std::vector<int> trained;
  std::vector<std::int64_t> documents;
};
Prepared prepare(const std::string& dir, const std::string& jsonl, std::vector<std::string> extra) {
  const std::string in = dir + "/in.jsonl", out = dir + "/out.tok";
  write_bytes(in, jsonl);
  std::vector<std::string> args{"ftrain-prep", "instruct", "--tokenizer", "bytes", "--out", out};
  args.insert(args.end(), extra.begin(), extra.end());
  args.push_back(in);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  EXPECT_EQ(prep_main(static_cast<int>(argv.size()), argv.data()), 0);
  const TokenFile f(out);
  Prepared p{all_tokens(f), all_trained(f), {}};
  for (std::int64_t d = 0; d <= static_cast<std::int64_t>(f.header().n_documents); ++d)
    p.documents.push_back(f.document_begin(d));
  return p;
}

// The expected tokens and mask: (text, trained) pieces, "\x01" = eos.
Prepared expected(const std::vector<std::pair<std::string, int>>& pieces) {
  Prepared p;
  for (const auto& [text, trained] : pieces) {
    if (text == "\x01") {
      p.tokens.push_back(static_cast<std::int32_t>(kByteTokenizerEos));
      p.trained.push_back(trained);
      continue;
    }
    for (const unsigned char c : text) {
      p.tokens.push_back(c);
      p.trained.push_back(trained);
    }
  }
  return p;
}

void expect_same(const Prepared& got, const Prepared& want) {
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.trained, want.trained);
}

TEST_F(InstructionDataTest, FieldsTemplate) {
  const Prepared got = prepare(dir_.string(), "{\"q\": \"2+2=\", \"a\": \"4\"}\n\n{\"q\": \"hi \", \"a\": \"yo\"}\n",
                               {"--template", "fields", "--prompt-field", "q", "--response-field", "a"});
  expect_same(got, expected({{"2+2=", 0}, {"4", 1}, {"\x01", 1}, {"hi ", 0}, {"yo", 1}, {"\x01", 1}}));
  EXPECT_EQ(got.documents, (std::vector<std::int64_t>{0, 6, 12}));
}

// Issue 36: packing off keeps an example's first seq_len+1 tokens; the
// count of cut examples and of those left without a trained target is what
// `ftrain --check` reports. Example 2 is a 40-token prompt, a 4-token
// response (tokens 40..43) and eos (44): targets are tokens 1..seq_len.
TEST_F(InstructionDataTest, CountsExamplesThatSeqLenCutsAndThoseLeftUntrained) {
  const std::string long_prompt(40, 'x');
  prepare(dir_.string(),
          "{\"prompt\": \"q\", \"response\": \"ok\"}\n{\"prompt\": \"" + long_prompt +
              "\", \"response\": \"lost\"}\n",
          {"--template", "fields"});
  const TokenFile file(dir_.string() + "/out.tok");
  struct Want {
    std::int64_t seq_len, truncated, untrained;
  };
  for (const Want w : {Want{16, 1, 1}, Want{39, 1, 1}, Want{40, 1, 0}, Want{43, 1, 0}, Want{44, 0, 0}}) {
    const ExampleTruncation n = count_example_truncation(file, w.seq_len);
    EXPECT_EQ(n.examples, 2) << "seq_len " << w.seq_len;
    EXPECT_EQ(n.longest_tokens, 45) << "seq_len " << w.seq_len;
    EXPECT_EQ(n.truncated, w.truncated) << "seq_len " << w.seq_len;
    EXPECT_EQ(n.untrained, w.untrained) << "seq_len " << w.seq_len;
  }
  // The dataset agrees: at seq_len 39 every target of example 2 is ignored.
  TokenDatasetOptions options;
  options.seq_len = 39;
  options.global_batch = 2;
  options.packing = false;
  TokenDataset dataset(std::make_shared<const TokenFile>(dir_.string() + "/out.tok"), options);
  Tensor inputs = Tensor::zeros({1, 39}, DType::i32), targets = Tensor::zeros({1, 39}, DType::i32);
  dataset.fill_windows(1, 1, inputs, targets);
  for (std::int64_t t = 0; t < 39; ++t) EXPECT_EQ(targets.data_as<std::int32_t>()[t], kIgnoreTarget) << t;
}

TEST_F(InstructionDataTest, AlpacaTemplateWithAndWithoutInput) {
  const Prepared got = prepare(dir_.string(),
                               "{\"instruction\": \"Add.\", \"input\": \"1 2\", \"output\": \"3\"}\n"
                               "{\"instruction\": \"Greet.\", \"input\": \"\", \"output\": \"Hello\"}\n"
                               "{\"instruction\": \"Wave.\", \"output\": \"o/\"}\n",
                               {"--template", "alpaca"});
  // Stanford Alpaca's PROMPT_DICT, written out independently of the code.
  const std::string with_input =
      "Below is an instruction that describes a task, paired with an input that provides further context. "
      "Write a response that appropriately completes the request.\n\n### Instruction:\nAdd.\n\n### Input:\n1 2"
      "\n\n### Response:";
  const std::string no_input =
      "Below is an instruction that describes a task. Write a response that appropriately completes the "
      "request.\n\n### Instruction:\n";
  expect_same(got, expected({{with_input, 0}, {"3", 1}, {"\x01", 1},
                             {no_input + "Greet.\n\n### Response:", 0}, {"Hello", 1}, {"\x01", 1},
                             {no_input + "Wave.\n\n### Response:", 0}, {"o/", 1}, {"\x01", 1}}));
}

TEST_F(InstructionDataTest, ZephyrTemplateTrainsEveryAssistantTurn) {
  const Prepared got = prepare(
      dir_.string(),
      "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": "
      "\"Hi\"}, {\"role\": \"assistant\", \"content\": \"Hey\"}, {\"role\": \"user\", \"content\": \"Bye\"}, "
      "{\"role\": \"assistant\", \"content\": \"Ciao\"}]}\n",
      {"--template", "zephyr"});
  expect_same(got, expected({{"<|system|>\nBe brief.", 0}, {"\x01", 0},
                             {"<|user|>\nHi", 0}, {"\x01", 0},
                             {"<|assistant|>\n", 0}, {"Hey", 1}, {"\x01", 1},
                             {"<|user|>\nBye", 0}, {"\x01", 0},
                             {"<|assistant|>\n", 0}, {"Ciao", 1}, {"\x01", 1}}));
  // One document although it holds five eos tokens.
  EXPECT_EQ(got.documents, (std::vector<std::int64_t>{0, static_cast<std::int64_t>(got.tokens.size())}));
}

// With SentencePiece each piece is encoded on its own: the tokens are
// encode(prompt) ++ encode(response) ++ eos, the mask 0...0 1...1 1.
TEST_F(InstructionDataTest, SentencePiecePiecesAreEncodedOneByOne) {
  if (std::system("command -v spm_train > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "spm_train not found (Debian package 'sentencepiece'); SentencePiece test skipped";
  {
    std::ofstream corpus(path("corpus.txt"));
    const char* words[] = {"what", "is", "the", "cat", "on", "mat", "it", "sat", "a", "dog"};
    for (int line = 0; line < 300; ++line) {
      for (int w = 0; w < 6; ++w) corpus << (w ? " " : "") << words[(line * 3 + w * 7 + line / 5) % 10];
      corpus << "\n";
    }
  }
  const std::string command = "spm_train --input=" + path("corpus.txt") + " --model_prefix=" + path("tiny") +
                              " --vocab_size=48 --model_type=bpe --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=-1"
                              " --minloglevel=2 > " + path("spm_train.log") + " 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << "spm_train failed; see " << path("spm_train.log");
  const std::string in = path("in.jsonl"), out = path("out.tok"), model = path("tiny.model");
  write_bytes(in, "{\"prompt\": \"what is on the mat\", \"response\": \"a cat sat\"}\n");
  std::vector<std::string> args{"ftrain-prep", "instruct", "--tokenizer", "spm", "--model", model,
                                "--template", "fields", "--out", out, in};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  ASSERT_EQ(prep_main(static_cast<int>(argv.size()), argv.data()), 0);
  const auto tokenizer = load_sentencepiece_tokenizer(model);
  std::vector<std::uint32_t> prompt, response;
  tokenizer->encode("what is on the mat", prompt);
  tokenizer->encode("a cat sat", response);
  std::vector<std::int32_t> want(prompt.begin(), prompt.end());
  want.insert(want.end(), response.begin(), response.end());
  want.push_back(2);
  std::vector<int> want_mask(prompt.size(), 0);
  want_mask.insert(want_mask.end(), response.size() + 1, 1);
  const TokenFile f(out);
  EXPECT_EQ(f.header().vocab_size, 48u);
  EXPECT_EQ(all_tokens(f), want);
  EXPECT_EQ(all_trained(f), want_mask);
}

// A tokenizer that puts a bos before every text (Llama 3's byte-level BPE):
// the example starts with one bos, untrained; the response piece gets none.
TEST_F(InstructionDataTest, ByteLevelBpeBosStartsTheExampleOnce) {
  const std::string tokenizer_json = std::string(FTRAIN_TEST_FIXTURES) + "/llama3_style_tokenizer.json";
  const auto tokenizer = load_tokenizer_file(tokenizer_json);
  ASSERT_EQ(tokenizer->document_prefix_length(), 1u) << "the fixture's post-processor adds <|begin_of_text|>";
  const std::string in = path("in.jsonl"), out = path("out.tok");
  write_bytes(in, "{\"prompt\": \"What is 2+2?\", \"response\": \" Four.\"}\n");
  std::vector<std::string> args{"ftrain-prep", "instruct", "--tokenizer", tokenizer_json,
                                "--template", "fields", "--out", out, in};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  ASSERT_EQ(prep_main(static_cast<int>(argv.size()), argv.data()), 0);
  std::vector<std::uint32_t> prompt, response;
  tokenizer->encode("What is 2+2?", prompt);     // bos + prompt
  tokenizer->encode(" Four.", response);         // bos + response
  ASSERT_GE(response.size(), 2u);
  std::vector<std::int32_t> want(prompt.begin(), prompt.end());
  want.insert(want.end(), response.begin() + 1, response.end());
  want.push_back(static_cast<std::int32_t>(tokenizer->eos_id()));
  std::vector<int> want_mask(prompt.size(), 0);
  want_mask.insert(want_mask.end(), response.size(), 1);  // response without its bos, + eos
  const TokenFile f(out);
  EXPECT_EQ(all_tokens(f), want);
  EXPECT_EQ(all_trained(f), want_mask);
}

TEST_F(InstructionDataTest, TemplateErrorsNameFileLineAndField) {
  InstructionPrepOptions o;
  o.format = InstructionTemplate::zephyr;
  expect_user_error(
      [&] { render_instruction(R"({"messages": [{"role": "user", "content": "x"}]})", o, "f.jsonl:3"); },
      "f.jsonl:3: message 0", "must end with an assistant message");
  expect_user_error(
      [&] { render_instruction(R"({"messages": [{"role": "bot", "content": "x"}]})", o, "f.jsonl:4"); },
      "f.jsonl:4: message 0", "role 'bot'");
  expect_user_error([&] { render_instruction(R"({"msgs": []})", o, "f.jsonl:5"); }, "f.jsonl:5", "'messages'");
  o.format = InstructionTemplate::alpaca;
  expect_user_error([&] { render_instruction(R"({"instruction": "x"})", o, "f.jsonl:6"); }, "f.jsonl:6",
                    "no string field 'output'");
  expect_user_error([&] { render_instruction("{oops", o, "f.jsonl:7"); }, "f.jsonl:7", "malformed JSON");
  // Through the command: the file and line reach the user, nothing is written.
  const std::string in = path("bad.jsonl"), out = path("out.tok");
  write_bytes(in, "{\"prompt\": \"a\", \"response\": \"b\"}\n{\"prompt\": \"a\"}\n");
  std::vector<std::string> args{"ftrain-prep", "instruct", "--tokenizer", "bytes", "--template", "fields",
                                "--out", out, in};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(prep_main(static_cast<int>(argv.size()), argv.data()), 1);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find(in + ":2: no string field 'response'"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".tmp"));
}

}  // namespace
