// Streaming text-to-token-file preparation (see text_prep.hpp).
#include "data/text_prep.hpp"

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/error.hpp"
#include "data/token_file.hpp"

namespace ftrain::data {

namespace {

// Routes each document to the train or eval writer and keeps the counts.
class DocumentSink {
 public:
  DocumentSink(const TextTokenizer& tokenizer, const TextPrepOptions& options)
      : tokenizer_(tokenizer), options_(options),
        train_(options.out_path, tokenizer.vocab_size(), tokenizer.eos_id()) {
    if (!options.eval_out_path.empty())
      eval_.emplace(options.eval_out_path, tokenizer.vocab_size(), tokenizer.eos_id());
  }

  void add(std::string_view text) {
    if (text.empty()) {
      ++stats_.empty_documents;
      return;
    }
    tokenizer_.encode(text, ids_);
    if (ids_.empty()) {  // e.g. whitespace only, which SentencePiece drops
      ++stats_.empty_documents;
      return;
    }
    ++stats_.documents;
    const auto n = static_cast<std::int64_t>(ids_.size()) + 1;  // + eos
    stats_.tokens += n;
    if (eval_ && stats_.documents % options_.eval_every == 0) {
      eval_->append_document(ids_);
      ++stats_.eval_documents;
      stats_.eval_tokens += n;
    } else {
      train_.append_document(ids_);
      ++stats_.train_documents;
      stats_.train_tokens += n;
    }
  }

  TextPrepStats close() {
    train_.close();
    if (eval_) eval_->close();
    return stats_;
  }

 private:
  const TextTokenizer& tokenizer_;
  const TextPrepOptions& options_;
  TokenFileWriter train_;
  std::optional<TokenFileWriter> eval_;
  std::vector<std::uint32_t> ids_;
  TextPrepStats stats_;
};

std::ifstream open_input(const std::string& path) {
  if (!std::filesystem::is_regular_file(path)) FT_USER_ERROR() << path << ": input file not found";
  std::ifstream in(path, std::ios::binary);
  if (!in) FT_USER_ERROR() << path << ": cannot open input file";
  return in;
}

bool is_blank(const std::string& line) {
  return line.find_first_not_of(" \t\r\n") == std::string::npos;
}

void read_jsonl(const std::string& path, const std::string& field, DocumentSink& sink) {
  std::ifstream in = open_input(path);
  std::string line;
  std::int64_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (is_blank(line)) continue;
    nlohmann::json record;
    try {
      record = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      FT_USER_ERROR() << path << ":" << line_number << ": malformed JSON (" << e.what() << ")";
    }
    if (!record.is_object())
      FT_USER_ERROR() << path << ":" << line_number << ": expected a JSON object, got " << record.type_name();
    const auto it = record.find(field);
    if (it == record.end() || !it->is_string())
      FT_USER_ERROR() << path << ":" << line_number << ": no string field '" << field << "'";
    sink.add(it->get_ref<const std::string&>());
  }
  if (in.bad()) FT_USER_ERROR() << path << ": read error after line " << line_number;
}

void read_plain(const std::string& path, bool doc_per_line, DocumentSink& sink) {
  std::ifstream in = open_input(path);
  std::string line;
  if (doc_per_line) {
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      sink.add(line);
    }
  } else {
    // The whole file is one document; its bytes are kept exactly.
    std::string document;
    while (std::getline(in, line)) {
      document += line;
      if (!in.eof()) document += '\n';
    }
    sink.add(document);
  }
  if (in.bad()) FT_USER_ERROR() << path << ": read error";
}

}  // namespace

TextPrepStats prepare_text(const std::vector<std::string>& inputs, const TextTokenizer& tokenizer,
                           const TextPrepOptions& options) {
  FT_CHECK(!inputs.empty()) << "no input files";
  FT_CHECK(options.eval_every >= 1) << "eval_every " << options.eval_every;
  // Missing inputs fail before any output is started.
  for (const auto& path : inputs)
    if (!std::filesystem::is_regular_file(path)) FT_USER_ERROR() << path << ": input file not found";
  DocumentSink sink(tokenizer, options);
  for (const auto& path : inputs) {
    try {
      if (options.jsonl)
        read_jsonl(path, options.text_field, sink);
      else
        read_plain(path, options.doc_per_line, sink);
    } catch (const InvalidTextError& e) {
      FT_USER_ERROR() << path << ": " << e.what();
    }
  }
  return sink.close();
}

}  // namespace ftrain::data
