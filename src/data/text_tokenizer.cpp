// Byte and SentencePiece tokenizers (see text_tokenizer.hpp).
#include "data/text_tokenizer.hpp"

#include <sentencepiece_processor.h>

#include <filesystem>
#include <fstream>

#include "base/error.hpp"
#include "data/byte_level_bpe.hpp"

namespace ftrain::data {

namespace {

class ByteTokenizer final : public TextTokenizer {
 public:
  std::uint64_t vocab_size() const override { return kByteTokenizerVocab; }
  std::uint32_t eos_id() const override { return kByteTokenizerEos; }
  void encode(std::string_view text, std::vector<std::uint32_t>& ids) const override {
    ids.resize(text.size());
    for (std::size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  }
  void encode_special(std::string_view text, std::vector<std::uint32_t>& ids,
                      std::vector<std::size_t>& ends) const override {
    encode(text, ids);  // no byte spells the eos (256)
    ends.resize(ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i) ends[i] = i + 1;
  }
  std::string decode(const std::vector<std::uint32_t>& ids) const override {
    std::string text;
    text.reserve(ids.size());
    for (const std::uint32_t id : ids) {
      FT_CHECK(id < 256) << "byte tokenizer cannot decode id " << id;
      text.push_back(static_cast<char>(id));
    }
    return text;
  }
  std::string describe() const override { return "bytes"; }
};

class SentencePieceTokenizer final : public TextTokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& path) : path_(path) {
    if (!std::filesystem::is_regular_file(path))
      FT_USER_ERROR() << path << ": SentencePiece model file not found";
    const auto status = processor_.Load(path);
    if (!status.ok()) FT_USER_ERROR() << path << ": cannot load SentencePiece model (" << status.ToString() << ")";
    if (processor_.eos_id() < 0)
      FT_USER_ERROR() << path << ": the SentencePiece model defines no eos piece; ftrain-prep needs one to mark "
                      << "document ends (train it with --eos_id=N)";
  }
  std::uint64_t vocab_size() const override { return static_cast<std::uint64_t>(processor_.GetPieceSize()); }
  std::uint32_t eos_id() const override { return static_cast<std::uint32_t>(processor_.eos_id()); }
  void encode(std::string_view text, std::vector<std::uint32_t>& ids) const override {
    const auto status = processor_.Encode(text, &scratch_);
    FT_CHECK(status.ok()) << path_ << ": SentencePiece encode failed: " << status.ToString();
    ids.resize(scratch_.size());
    for (std::size_t i = 0; i < scratch_.size(); ++i) ids[i] = static_cast<std::uint32_t>(scratch_[i]);
  }
  void encode_special(std::string_view text, std::vector<std::uint32_t>& ids,
                      std::vector<std::size_t>& ends) const override {
    // The bos and eos pieces spelled in the text are their ids; each stretch
    // between them is encoded on its own (with its word-start marker, as
    // Hugging Face's Llama 2 tokenizer does after a special token).
    std::vector<std::pair<std::string, std::uint32_t>> specials;
    for (const int id : {processor_.bos_id(), processor_.eos_id()})
      if (id >= 0) specials.emplace_back(processor_.IdToPiece(id), static_cast<std::uint32_t>(id));
    ids.clear();
    ends.clear();
    std::size_t start = 0;
    while (start <= text.size()) {
      std::size_t next = text.size(), length = 0;
      std::uint32_t special_id = 0;
      for (const auto& [piece, id] : specials) {
        const std::size_t at = text.find(piece, start);
        if (at != std::string_view::npos && (at < next || (at == next && piece.size() > length))) {
          next = at;
          length = piece.size();
          special_id = id;
        }
      }
      if (next > start) {
        const auto spt = processor_.EncodeAsImmutableProto(text.substr(start, next - start));
        for (const auto& p : spt.pieces()) {
          ids.push_back(p.id());
          ends.push_back(start + p.end());
        }
      }
      if (length == 0) break;
      ids.push_back(special_id);
      ends.push_back(next + length);
      start = next + length;
    }
  }
  std::string decode(const std::vector<std::uint32_t>& ids) const override {
    const std::vector<int> as_int(ids.begin(), ids.end());
    std::string text;
    const auto status = processor_.Decode(as_int, &text);
    FT_CHECK(status.ok()) << path_ << ": SentencePiece decode failed: " << status.ToString();
    return text;
  }
  std::string describe() const override { return "sentencepiece " + path_; }

 private:
  std::string path_;
  sentencepiece::SentencePieceProcessor processor_;
  mutable std::vector<int> scratch_;  // reused across documents: no allocation per document
};

}  // namespace

std::unique_ptr<TextTokenizer> make_byte_tokenizer() { return std::make_unique<ByteTokenizer>(); }

std::unique_ptr<TextTokenizer> load_sentencepiece_tokenizer(const std::string& model_path) {
  return std::make_unique<SentencePieceTokenizer>(model_path);
}

std::unique_ptr<TextTokenizer> load_tokenizer_file(const std::string& path) {
  namespace fs = std::filesystem;
  if (fs::is_directory(path)) {
    const fs::path json = fs::path(path) / "tokenizer.json";
    if (!fs::is_regular_file(json))
      FT_USER_ERROR() << path << ": a directory without tokenizer.json; name the tokenizer file itself";
    return load_hf_tokenizer_json(json.string());
  }
  if (!fs::is_regular_file(path)) FT_USER_ERROR() << path << ": tokenizer file not found";
  std::ifstream in(path, std::ios::binary);
  if (!in) FT_USER_ERROR() << path << ": cannot open tokenizer file";
  // The first line tells: JSON starts with '{', a rank file with base64 and a
  // number; a SentencePiece model is a binary protobuf and neither.
  std::string first_line;
  std::getline(in, first_line);
  if (!first_line.empty() && first_line.back() == '\r') first_line.pop_back();
  const std::size_t start = first_line.find_first_not_of(" \t");
  if (start != std::string::npos && first_line[start] == '{') return load_hf_tokenizer_json(path);
  if (looks_like_tiktoken_line(first_line)) return load_tiktoken_ranks(path);
  try {
    return load_sentencepiece_tokenizer(path);
  } catch (const UserError& e) {
    FT_USER_ERROR() << path << ": not a tokenizer.json (no JSON object), not a tiktoken rank file (first line is not "
                    << "\"<base64> <rank>\") and not a SentencePiece model: " << e.what();
  }
}

}  // namespace ftrain::data
