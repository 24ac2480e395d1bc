// Text files to token files: the work behind `ftrain-prep text`.
//
// Input formats:
//   plain text (default)  one document per input file; with doc_per_line,
//                         one document per non-empty line instead.
//   JSON lines (jsonl)    one JSON object per line; the document is the
//                         string field named text_field ("text" by default;
//                         seed 001's data sets use "content"). Blank lines
//                         are skipped.
// Documents whose text is empty are skipped (counted in empty_documents): a
// lone eos teaches nothing.
//
// Split: with an eval path, documents number 1, 2, ... across all inputs in
// order, and every eval_every-th one (N, 2N, ...) goes to the eval file; the
// rest go to the training file. The writer appends the eos after each.
//
// Memory: inputs are read line by line and each document is encoded and
// written before the next is read, so memory is bounded by the longest
// document (one JSON line, one plain-text file or line), never by the size
// of the input.
//
// Errors are UserErrors naming FILE:LINE: malformed JSON, a line that is not
// an object, a missing or non-string text field; and a missing input file.
// On error no output file is created (TokenFileWriter's temporary is removed).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/text_tokenizer.hpp"

namespace ftrain::data {

struct TextPrepOptions {
  std::string out_path;
  std::string eval_out_path;  // empty: no eval file
  std::int64_t eval_every = 100;
  bool jsonl = false;
  std::string text_field = "text";
  bool doc_per_line = false;  // plain text only
};

struct TextPrepStats {
  std::int64_t documents = 0;  // written, train + eval
  std::int64_t empty_documents = 0;
  std::int64_t tokens = 0;  // written, eos included
  std::int64_t train_documents = 0;
  std::int64_t train_tokens = 0;
  std::int64_t eval_documents = 0;
  std::int64_t eval_tokens = 0;
};

TextPrepStats prepare_text(const std::vector<std::string>& inputs, const TextTokenizer& tokenizer,
                           const TextPrepOptions& options);

}  // namespace ftrain::data
