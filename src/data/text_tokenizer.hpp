// Text tokenizers for ftrain-prep: text in, token ids out.
//
//   bytes  the UTF-8 bytes of the text as ids 0..255, eos id 256, vocab 257;
//          needs no model and round-trips any byte string exactly.
//   byte-level BPE  Llama 3 / GPT-2: a Hugging Face tokenizer.json or a
//          tiktoken rank file (byte_level_bpe.hpp); bos prepended by encode()
//          when the file's post-processor adds one, as Llama 3's does.
//   spm    a SentencePiece model file (Llama's tokenizer.model): ids from
//          SentencePieceProcessor::Encode, vocab = GetPieceSize(), eos =
//          the model's eos_id(). A model without an eos piece is refused: the
//          token file marks document ends with it.
//
// encode() never produces the eos id for ordinary text (it is a control
// symbol in SentencePiece and outside 0..255 for bytes), so the writer's
// appended eos is the only document boundary. The one exception: a
// byte-level BPE matches its special tokens in the text, as Hugging Face
// does, so text that spells <|end_of_text|> literally gets the eos id, and
// the token file writer refuses that document.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.hpp"

namespace ftrain::data {

// Text a tokenizer cannot take (a byte-level BPE's input must be UTF-8);
// the message names the byte, prepare_text adds the input file.
class InvalidTextError : public UserError {
 public:
  using UserError::UserError;
};

class TextTokenizer {
 public:
  virtual ~TextTokenizer() = default;
  virtual std::uint64_t vocab_size() const = 0;
  virtual std::uint32_t eos_id() const = 0;
  // Replaces `ids` with the tokens of `text`.
  virtual void encode(std::string_view text, std::vector<std::uint32_t>& ids) const = 0;
  // How many ids encode() puts before every text (Llama 3's bos); callers
  // that encode one document in several pieces keep them on the first only.
  virtual std::size_t document_prefix_length() const { return 0; }
  // Encodes `text` as Hugging Face encodes a chat template's output
  // (add_special_tokens=False): special tokens spelled in the text become
  // their ids (a byte-level BPE's added tokens; a SentencePiece model's bos
  // and eos pieces, Llama 2's <s> and </s>) and nothing is added before or
  // after. ends[i] is the byte offset in `text` just past token i.
  virtual void encode_special(std::string_view text, std::vector<std::uint32_t>& ids,
                              std::vector<std::size_t>& ends) const = 0;
  // The text of `ids` (eos excluded by the caller); for tests and inspection.
  virtual std::string decode(const std::vector<std::uint32_t>& ids) const = 0;
  // "bytes" or "sentencepiece <path>", for messages.
  virtual std::string describe() const = 0;
};

inline constexpr std::uint32_t kByteTokenizerEos = 256;
inline constexpr std::uint64_t kByteTokenizerVocab = 257;

std::unique_ptr<TextTokenizer> make_byte_tokenizer();
// UserError naming the path when the model cannot be loaded or has no eos.
std::unique_ptr<TextTokenizer> load_sentencepiece_tokenizer(const std::string& model_path);
// Any tokenizer file, its format told by its content: a Hugging Face
// tokenizer.json (a JSON object), a tiktoken rank file (base64 and rank per
// line; Llama 3's original/tokenizer.model) or a SentencePiece model (Llama
// 2's tokenizer.model). A directory means its tokenizer.json.
std::unique_ptr<TextTokenizer> load_tokenizer_file(const std::string& path);

}  // namespace ftrain::data
