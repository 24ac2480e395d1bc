// Byte-level BPE (Llama 3's tokenizer) without the Python environment: GPT-2's
// byte mapping, Llama 3's split regex, the merge order and ignore_merges,
// both merge spellings of tokenizer.json, tiktoken rank files, the errors,
// and the committed fixture (a Llama 3-shaped BPE made by Hugging Face
// `tokenizers`, tests/interop/llama3_bpe_fixture.py) whose golden ids come
// from `tokenizers` itself. The live comparison against `tokenizers` on
// hundreds of texts is tests/interop/tokenizer_test.py.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "data/byte_level_bpe.hpp"
#include "data/prep_cli.hpp"
#include "data/text_prep.hpp"
#include "data/text_tokenizer.hpp"
#include "data/token_file.hpp"

using namespace ftrain;
using namespace ftrain::data;
namespace fs = std::filesystem;
using Ids = std::vector<std::uint32_t>;

namespace {

const std::string kFixtures = FTRAIN_TEST_FIXTURES;

class ByteLevelBpeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("ftrain_bpe_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name), std::ios::binary) << text;
    return path(name);
  }

  fs::path dir_;
};

void expect_user_error(const std::function<void()>& body, const std::vector<std::string>& parts) {
  try {
    body();
    ADD_FAILURE() << "no error; expected one containing '" << parts.front() << "'";
  } catch (const UserError& e) {
    const std::string message = e.what();
    for (const auto& part : parts) EXPECT_NE(message.find(part), std::string::npos) << message;
  }
}

// The 256 bytes in byte order (ids 0..255), then `extra` tokens; eos is an
// added token after them.
ByteLevelBpeModel small_model(const std::vector<std::string>& extra, const std::vector<BpeMerge>& merges,
                              bool ignore_merges) {
  ByteLevelBpeModel m;
  m.source = "test model";
  for (int b = 0; b < 256; ++b) m.id_to_bytes.emplace_back(1, static_cast<char>(b));
  for (const auto& e : extra) m.id_to_bytes.push_back(e);
  m.merges = merges;
  m.ignore_merges = ignore_merges;
  const auto eos = static_cast<std::uint32_t>(m.id_to_bytes.size());
  m.added_tokens = {{"<|end_of_text|>", eos}};
  m.eos_id = eos;
  return m;
}

// A tokenizer.json in GPT-2's spelling for the vocabulary a, b, c, "ab",
// "bc", "abc", " a" (Ġa) and the merges given.
std::string tiny_tokenizer_json(const std::string& merges_json, bool ignore_merges) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_to_unicode_utf8(static_cast<std::uint8_t>(b))] = b;
  vocab["ab"] = 256;
  vocab["bc"] = 257;
  vocab["abc"] = 258;
  vocab["\xc4\xa0" "a"] = 259;  // "Ġa": space + a
  nlohmann::json j = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens",
       {{{"id", 260}, {"content", "<|end_of_text|>"}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
         {"normalized", false}, {"special", true}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", kLlama3SplitRegex}}}, {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
        {"ignore_merges", ignore_merges}, {"vocab", vocab}, {"merges", nlohmann::json::parse(merges_json)}}}};
  return j.dump();
}

TEST(ByteToUnicode, IsGpt2sMapping) {
  EXPECT_EQ(byte_to_unicode('A'), U'A');
  EXPECT_EQ(byte_to_unicode('!'), U'!');
  EXPECT_EQ(byte_to_unicode('~'), U'~');
  EXPECT_EQ(byte_to_unicode(0xA1), U'\u00A1');  // printable Latin-1 stands for itself
  EXPECT_EQ(byte_to_unicode(0xFF), U'\u00FF');
  EXPECT_EQ(byte_to_unicode(0x00), U'\u0100');  // the 68 others, in byte order, from U+0100
  EXPECT_EQ(byte_to_unicode(' '), U'\u0120');   // Ġ
  EXPECT_EQ(byte_to_unicode('\n'), U'\u010A');  // Ċ
  EXPECT_EQ(byte_to_unicode(0x7F), U'\u0121');
  EXPECT_EQ(byte_to_unicode(0xA0), U'\u0142');
  EXPECT_EQ(byte_to_unicode(0xAD), U'\u0143');  // the last one
  EXPECT_EQ(byte_to_unicode_utf8(' '), "\xc4\xa0");
  // A bijection onto its image, and unicode_to_bytes inverts it.
  std::string all_mapped, back;
  for (int b = 0; b < 256; ++b) all_mapped += byte_to_unicode_utf8(static_cast<std::uint8_t>(b));
  ASSERT_TRUE(unicode_to_bytes(all_mapped, back));
  ASSERT_EQ(back.size(), 256u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(static_cast<unsigned char>(back[b]), b);
  EXPECT_FALSE(unicode_to_bytes("\xe2\x96\x81the", back));  // "▁the": SentencePiece's spelling
  EXPECT_FALSE(unicode_to_bytes(" a", back));               // a raw space is spelled Ġ
}

TEST(Utf8, FirstInvalidByte) {
  EXPECT_EQ(first_invalid_utf8("plain \xe6\x97\xa5\xf0\x9f\x98\x80"), std::string::npos);
  EXPECT_EQ(first_invalid_utf8("ab\xff"), 2u);
  EXPECT_EQ(first_invalid_utf8("a\xc0\xaf"), 1u);          // overlong
  EXPECT_EQ(first_invalid_utf8("a\xed\xa0\x80"), 1u);      // surrogate
  EXPECT_EQ(first_invalid_utf8("ab\xe6\x97"), 2u);         // truncated
  EXPECT_EQ(first_invalid_utf8("\xf4\x90\x80\x80"), 0u);   // above U+10FFFF
}

// Expected pieces are what tokenizers 0.21's Split(Llama 3 regex, isolated)
// returns for the same strings.
TEST(Llama3Split, MatchesHuggingFacesPieces) {
  const ByteLevelBpeTokenizer tok(small_model({}, {}, false));
  using V = std::vector<std::string>;
  EXPECT_EQ(tok.split("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(tok.split("I'M here, they'LL go"), (V{"I", "'M", " here", ",", " they", "'LL", " go"}));
  EXPECT_EQ(tok.split("1234567 x"), (V{"123", "456", "7", " x"}));
  EXPECT_EQ(tok.split("  \n\n  hi  "), (V{"  \n\n", " ", " hi", "  "}));
  EXPECT_EQ(tok.split("a\tb"), (V{"a", "\tb"}));
  EXPECT_EQ(tok.split("\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xe3\x83\x86\xe3\x82\xad\xe3\x82\xb9\xe3\x83\x88\xf0\x9f\x98\x80!!"),
            (V{"\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e", " \xe3\x83\x86\xe3\x82\xad\xe3\x82\xb9\xe3\x83\x88", "\xf0\x9f\x98\x80!!"}));
  EXPECT_EQ(tok.split("don'\xc5\xbf"), (V{"don", "'\xc5\xbf"}));  // ſ case-folds to s: a contraction
  EXPECT_EQ(tok.split("foo.bar();\n"), (V{"foo", ".bar", "();\n"}));
  EXPECT_EQ(tok.split("x  \r\n"), (V{"x", "  \r\n"}));
  EXPECT_EQ(tok.split("e\xcc\x81t\xc3\xa9"), (V{"e", "\xcc\x81t\xc3\xa9"}));  // a combining mark is not \p{L}
}

TEST(BpeMerges, LowestRankFirstLeftmostOnTiesAndIgnoreMerges) {
  // ids: 256 "ab", 257 "bc", 258 "abc", 259 "aa"
  const std::vector<BpeMerge> merges = {{'b', 'c', 257, 0}, {'a', 'b', 256, 1}, {256, 'c', 258, 2}, {'a', 'a', 259, 3}};
  const ByteLevelBpeTokenizer plain(small_model({"ab", "bc", "abc", "aa"}, merges, false));
  Ids ids;
  plain.encode_piece("abc", ids);  // bc (rank 0) first; "a"+"bc" is no merge
  EXPECT_EQ(ids, (Ids{'a', 257}));
  ids.clear();
  plain.encode_piece("abxabc", ids);
  EXPECT_EQ(ids, (Ids{256, 'x', 'a', 257}));
  ids.clear();
  plain.encode_piece("aaa", ids);  // equal ranks: the leftmost pair merges first
  EXPECT_EQ(ids, (Ids{259, 'a'}));
  const ByteLevelBpeTokenizer ignoring(small_model({"ab", "bc", "abc", "aa"}, merges, true));
  ids.clear();
  ignoring.encode_piece("abc", ids);  // a whole piece in the vocabulary is one token
  EXPECT_EQ(ids, (Ids{258}));
  ids.clear();
  ignoring.encode_piece("abcc", ids);
  EXPECT_EQ(ids, (Ids{'a', 257, 'c'}));
}

TEST_F(ByteLevelBpeTest, TokenizerJsonMergesAsStringsOrListsAgree) {
  // "bc" before "ab", as above; merges spelled "a b" (Meta's files) or [a, b]
  // (tokenizers >= 0.20).
  const std::string strings = R"(["b c", "a b", "ab c", "Ġ a"])";
  const std::string lists = R"([["b", "c"], ["a", "b"], ["ab", "c"], ["Ġ", "a"]])";
  for (const bool ignore : {false, true}) {
    const auto a = load_hf_tokenizer_json(write("strings.json", tiny_tokenizer_json(strings, ignore)));
    const auto b = load_hf_tokenizer_json(write("lists.json", tiny_tokenizer_json(lists, ignore)));
    Ids x, y;
    a->encode("abc a abc<|end_of_text|>", x);
    b->encode("abc a abc<|end_of_text|>", y);
    EXPECT_EQ(x, y);
    // Pieces: "abc", " a", " abc" (not in the vocabulary: merged, bc first,
    // then Ġa), then the added token.
    Ids want = ignore ? Ids{258} : Ids{'a', 257};
    want.insert(want.end(), {259, 259, 257, 260});
    EXPECT_EQ(x, want) << "ignore_merges " << ignore;
    EXPECT_EQ(a->eos_id(), 260u);
    EXPECT_EQ(a->vocab_size(), 261u);
    EXPECT_EQ(a->decode(x), "abc a abc<|end_of_text|>");
  }
}

TEST_F(ByteLevelBpeTest, FixtureEncodesAsHuggingFaceTokenizers) {
  const auto tok = load_tokenizer_file(kFixtures + "/llama3_style_tokenizer.json");
  EXPECT_EQ(tok->vocab_size(), 128256u);
  EXPECT_EQ(tok->eos_id(), 128001u);  // <|end_of_text|>
  std::ifstream in(kFixtures + "/llama3_style_expected.json");
  const auto cases = nlohmann::json::parse(in);
  ASSERT_GE(cases.size(), 100u);
  Ids ids;
  int mismatches = 0;
  for (const auto& c : cases) {
    const std::string text = c["text"].get<std::string>();
    const Ids want = c["ids"].get<Ids>();
    tok->encode(text, ids);
    if (ids != want && ++mismatches <= 5) ADD_FAILURE() << "text " << nlohmann::json(text).dump() << " encodes differently";
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids[0], 128000u);  // <|begin_of_text|> from the post-processor
    EXPECT_EQ(tok->decode(Ids(ids.begin() + 1, ids.end())), text);
  }
  EXPECT_EQ(mismatches, 0);
}

TEST_F(ByteLevelBpeTest, TiktokenRankFileIsDetectedAndEncodesByRank) {
  // Ranks: the 256 bytes, then "ab" (256), "bc" (257), "abc" (258). tiktoken
  // merges by the merged token's rank: "ab" before "bc", and "abc" is reached
  // from either split.
  std::string file;
  const auto b64 = [](const std::string& s) {
    static const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    unsigned v = 0;
    int bits = 0;
    for (const unsigned char c : s) {
      v = (v << 8) | c;
      bits += 8;
      while (bits >= 6) out.push_back(a[(v >> (bits -= 6)) & 63]);
    }
    if (bits > 0) out.push_back(a[(v << (6 - bits)) & 63]);
    while (out.size() % 4 != 0) out.push_back('=');
    return out;
  };
  for (int b = 0; b < 256; ++b) file += b64(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  file += b64("ab") + " 256\n" + b64("bc") + " 257\n" + b64("abc") + " 258\n";
  const std::string path = write("tokenizer.model", file);
  const auto tok = load_tokenizer_file(path);
  EXPECT_EQ(tok->vocab_size(), 259u + 256u);
  EXPECT_EQ(tok->eos_id(), 260u);  // <|end_of_text|> follows <|begin_of_text|>
  Ids ids;
  tok->encode("abcc xbc abx<|eot_id|>", ids);
  EXPECT_EQ(ids, (Ids{259, 258, 'c', ' ', 'x', 257, ' ', 256, 'x', 259 + 9}));
  EXPECT_NE(tok->describe().find("byte-level BPE"), std::string::npos);
  expect_user_error([&] { load_tiktoken_ranks(write("bad.model", "YQ== 0\nnot base64! 1\n")); }, {"bad.model:2"});
}

TEST_F(ByteLevelBpeTest, ErrorsNameTheFieldOrTheByte) {
  const auto tok = load_hf_tokenizer_json(write("t.json", tiny_tokenizer_json(R"([["a", "b"]])", true)));
  Ids ids;
  expect_user_error([&] { tok->encode("fine \xff then", ids); }, {"not valid UTF-8 at its byte 5"});
  TextPrepOptions options;
  options.out_path = path("bad.tok");
  const std::string input = write("latin1.txt", "caf\xe9");
  expect_user_error([&] { prepare_text({input}, *tok, options); }, {"latin1.txt: ", "not valid UTF-8 at its byte 3"});
  EXPECT_FALSE(fs::exists(path("bad.tok")));

  auto j = nlohmann::json::parse(tiny_tokenizer_json("[]", true));
  j["model"]["vocab"]["\xe2\x96\x81the"] = 300;
  expect_user_error([&] { load_hf_tokenizer_json(write("spm.json", j.dump())); }, {"spm.json", "model.vocab", "not a byte-level BPE"});

  j = nlohmann::json::parse(tiny_tokenizer_json("[]", true));
  j["model"]["vocab"].erase(byte_to_unicode_utf8(0x0A));
  expect_user_error([&] { load_hf_tokenizer_json(write("nobyte.json", j.dump())); }, {"nobyte.json", "byte 0xa"});

  j = nlohmann::json::parse(tiny_tokenizer_json("[]", true));
  j["normalizer"] = {{"type", "NFC"}};
  expect_user_error([&] { load_hf_tokenizer_json(write("nfc.json", j.dump())); }, {"nfc.json", "normalizer", "NFC"});

  j = nlohmann::json::parse(tiny_tokenizer_json("[]", true));
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  expect_user_error([&] { load_hf_tokenizer_json(write("ws.json", j.dump())); }, {"pre_tokenizer.type", "Whitespace"});

  j = nlohmann::json::parse(tiny_tokenizer_json(R"([["a", "q"]])", true));
  j["model"]["vocab"].erase("ab");
  expect_user_error([&] { load_hf_tokenizer_json(write("m.json", j.dump())); }, {"model.merges[0]", "\"aq\""});

  j = nlohmann::json::parse(tiny_tokenizer_json("[]", true));
  j["added_tokens"] = nlohmann::json::array();
  expect_user_error([&] { load_hf_tokenizer_json(write("noeos.json", j.dump())); }, {"noeos.json", "end-of-document"});

  expect_user_error([&] { load_tokenizer_file(path("missing.json")); }, {"missing.json", "not found"});
  expect_user_error([&] { load_tokenizer_file(write("notes.txt", "just some text\n")); },
                    {"notes.txt: not a tokenizer.json", "not a tiktoken rank file", "not a SentencePiece model"});
}

int run_prep(std::vector<std::string> args) {
  args.insert(args.begin(), "ftrain-prep");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return prep_main(static_cast<int>(argv.size()), argv.data());
}

TEST_F(ByteLevelBpeTest, PrepWritesLlama3TokenFiles) {
  const std::string input = write("docs.jsonl",
                                  "{\"text\": \"first document, it's short\"}\n"
                                  "{\"text\": \"<|start_header_id|>user<|end_header_id|>\\n\\nhi 12345<|eot_id|>\"}\n");
  const std::string tokenizer = kFixtures + "/llama3_style_tokenizer.json";
  ASSERT_EQ(run_prep({"text", "--out", path("out.tok"), "--tokenizer", tokenizer, "--jsonl", input}), 0);
  const TokenFile file(path("out.tok"));
  file.validate_all();
  EXPECT_EQ(file.header().token_bytes, 4u);  // ids up to 128255 need 32 bits
  EXPECT_EQ(file.header().vocab_size, 128256u);
  EXPECT_EQ(file.header().eos_id, 128001u);
  EXPECT_EQ(file.header().n_documents, 2u);
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(file.n_tokens()));
  file.read(0, file.n_tokens(), tokens.data());
  const auto tok = load_tokenizer_file(tokenizer);
  Ids first, second;
  tok->encode("first document, it's short", first);
  tok->encode("<|start_header_id|>user<|end_header_id|>\n\nhi 12345<|eot_id|>", second);
  Ids want = first;
  want.push_back(128001);
  want.insert(want.end(), second.begin(), second.end());
  want.push_back(128001);
  EXPECT_EQ(Ids(tokens.begin(), tokens.end()), want);
  EXPECT_EQ(first[0], 128000u);
  EXPECT_EQ(second[1], 128006u);  // <|start_header_id|>
  EXPECT_EQ(second.back(), 128009u);  // <|eot_id|>

  // A directory stands for its tokenizer.json.
  fs::create_directories(path("model"));
  fs::copy_file(tokenizer, path("model/tokenizer.json"));
  ASSERT_EQ(run_prep({"text", "--out", path("dir.tok"), "--tokenizer", path("model"), "--jsonl", input}), 0);
  EXPECT_EQ(TokenFile(path("dir.tok")).n_tokens(), file.n_tokens());

  // Text spelling the eos token literally would end the document early.
  const std::string bad = write("bad.jsonl", "{\"text\": \"a<|end_of_text|>b\"}\n");
  EXPECT_EQ(run_prep({"text", "--out", path("bad.tok"), "--tokenizer", tokenizer, "--jsonl", bad}), 1);
  EXPECT_FALSE(fs::exists(path("bad.tok")));
}

}  // namespace
