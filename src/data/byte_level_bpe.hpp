// Byte-level BPE (GPT-2, Llama 3): the tokenizer of Hugging Face
// `tokenizer.json` files with a ByteLevel pre-tokenizer and a BPE model, and
// of tiktoken rank files (Meta's Llama 3 `original/tokenizer.model`).
//
// Encoding a document, in the order Hugging Face `tokenizers` applies it
// (the oracle: tests/interop/, tokenizers 0.21):
//  1. Added tokens (`<|begin_of_text|>`, `<|eot_id|>`, ...) are cut out of
//     the raw text first, leftmost-longest, and map to their ids directly.
//  2. Each stretch between them is split by the pre-tokenizer regex (Llama 3's
//     by default, PCRE2 in UTF + UCP mode so that \p{L}, \p{N}, \s and the
//     case-insensitive contractions follow Unicode as Oniguruma does for HF);
//     every match is one piece, and so is any gap between matches
//     (HF's Split behaviour "isolated").
//  3. Each piece is BPE-encoded on its bytes: start from one symbol per byte,
//     repeatedly merge the adjacent pair with the lowest merge rank (leftmost
//     on ties). With ignore_merges (Llama 3's tokenizer.json and every
//     tiktoken file), a piece that is itself a vocabulary entry is that one
//     token without merging.
//  4. prefix_ids (the bos of the post-processor template) go first. The eos
//     is not added here: the token file writer appends it after each
//     document.
//
// Strings inside the engine are raw bytes. GPT-2's byte-to-unicode mapping
// (printable bytes stand for themselves, the other 68 become U+0100...) is
// only how tokenizer.json spells those bytes; the loader undoes it.
//
// Text must be valid UTF-8 (Hugging Face only takes Unicode strings): other
// input is a UserError naming the byte offset, never a silent substitution.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/text_tokenizer.hpp"

namespace ftrain::data {

// Llama 3's pre-tokenizer (Meta's tiktoken pattern, also the Split regex of
// Llama 3's tokenizer.json).
inline constexpr const char* kLlama3SplitRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// GPT-2's, what a ByteLevel pre-tokenizer with use_regex true applies.
inline constexpr const char* kGpt2SplitRegex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// GPT-2's bytes_to_unicode: the code point that stands for byte b in
// tokenizer.json, and its UTF-8 spelling.
char32_t byte_to_unicode(std::uint8_t b);
std::string byte_to_unicode_utf8(std::uint8_t b);
// The inverse on a whole tokenizer.json string; false if some code point is
// not the image of a byte.
bool unicode_to_bytes(std::string_view mapped, std::string& bytes);

// Offset of the first byte that is not part of valid UTF-8, or npos.
std::size_t first_invalid_utf8(std::string_view text);

struct BpeMerge {
  std::uint32_t left = 0;
  std::uint32_t right = 0;
  std::uint32_t merged = 0;
  // Lower merges first. tokenizer.json: the index in "merges". tiktoken: the
  // rank of the merged token, shared by every split of it (ties go leftmost).
  std::uint32_t rank = 0;
};

struct BpeAddedToken {
  std::string content;  // raw text, matched literally
  std::uint32_t id = 0;
};

// What a loader produces; the tokenizer checks it once at construction.
struct ByteLevelBpeModel {
  std::string source;                    // the file, for messages
  std::vector<std::string> id_to_bytes;  // the vocabulary; "" marks an id with no BPE token
  std::vector<BpeMerge> merges;
  bool ignore_merges = false;
  std::string split_regex = kLlama3SplitRegex;
  std::vector<BpeAddedToken> added_tokens;  // ids may lie inside or past id_to_bytes
  std::vector<std::uint32_t> prefix_ids;    // before every document (bos)
  std::uint32_t eos_id = 0;
};

class ByteLevelBpeTokenizer final : public TextTokenizer {
 public:
  explicit ByteLevelBpeTokenizer(ByteLevelBpeModel model);
  ~ByteLevelBpeTokenizer() override;

  std::uint64_t vocab_size() const override { return vocab_size_; }
  std::uint32_t eos_id() const override { return model_.eos_id; }
  void encode(std::string_view text, std::vector<std::uint32_t>& ids) const override;
  std::size_t document_prefix_length() const override { return model_.prefix_ids.size(); }
  void encode_special(std::string_view text, std::vector<std::uint32_t>& ids,
                      std::vector<std::size_t>& ends) const override;
  std::string decode(const std::vector<std::uint32_t>& ids) const override;
  std::string describe() const override;

  // Step 2 alone on text without added tokens: the pre-tokenizer's pieces.
  std::vector<std::string> split(std::string_view text) const;
  // Step 3 alone: the BPE ids of one piece.
  void encode_piece(std::string_view piece, std::vector<std::uint32_t>& ids) const;
  // The id of a vocabulary entry or added token, or -1.
  std::int64_t id_of(std::string_view token) const;
  const ByteLevelBpeModel& model() const { return model_; }

 private:
  struct Regex;
  void split_into(std::string_view text, std::vector<std::string_view>& pieces) const;
  void encode_text(std::string_view text, std::vector<std::uint32_t>& ids) const;

  ByteLevelBpeModel model_;
  std::uint64_t vocab_size_ = 0;
  std::unique_ptr<Regex> regex_;
  std::unordered_map<std::string, std::uint32_t> bytes_to_id_;
  std::uint32_t byte_ids_[256] = {};
  // (left << 32 | right) -> (rank, merged id)
  std::unordered_map<std::uint64_t, std::pair<std::uint32_t, std::uint32_t>> merge_rank_;
  std::unordered_map<std::string, std::uint32_t> added_;
  std::string added_first_bytes_;  // first byte of each added token, for a quick scan
  // Memoised pieces: text repeats words, and BPE dominates the cost.
  mutable std::unordered_map<std::string, std::vector<std::uint32_t>> cache_;
  mutable std::vector<std::string_view> pieces_;
};

// Loaders (tokenizer_json.cpp, tiktoken_ranks.cpp); UserErrors name the file
// and the field at fault.
std::unique_ptr<ByteLevelBpeTokenizer> load_hf_tokenizer_json(const std::string& path);
// A tiktoken rank file ("<base64 token> <rank>" per line) with Llama 3's
// split regex and its 256 special tokens after the ranks
// (<|begin_of_text|> = bos, <|end_of_text|> = eos), as Meta's tokenizer.py
// defines them.
std::unique_ptr<ByteLevelBpeTokenizer> load_tiktoken_ranks(const std::string& path);
// True for a line of a tiktoken rank file (format detection).
bool looks_like_tiktoken_line(std::string_view line);

}  // namespace ftrain::data
