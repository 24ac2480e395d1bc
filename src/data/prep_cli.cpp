// ftrain-prep command line (see prep_cli.hpp).
#include "data/prep_cli.hpp"

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "data/synthetic_corpus.hpp"
#include "data/text_prep.hpp"
#include "data/text_tokenizer.hpp"
#include "data/token_file.hpp"

namespace ftrain::data {

namespace {

constexpr const char* kUsage =
    "usage: ftrain-prep synthetic --out PATH --tokens N --vocab V --seed S\n"
    "                             [--eval-out PATH --eval-tokens N]\n"
    "                             [--successors K] [--doc-len L]\n"
    "       ftrain-prep text --out PATH (--tokenizer FILE | --tokenizer bytes | --tokenizer spm --model FILE)\n"
    "                        [--jsonl [--text-field NAME]] [--doc-per-line]\n"
    "                        [--eval-out PATH [--eval-every N]] INPUT...\n"
    "       ftrain-prep info PATH\n"
    "       ftrain-prep --help\n"
    "\n"
    "synthetic  writes a learnable token file drawn from a random sparse Markov\n"
    "           chain over V tokens (eos = V-1) and prints its entropy rate: the\n"
    "           lowest mean loss (nats/token) a model can reach on it.\n"
    "  --out PATH          training token file to write\n"
    "  --tokens N          number of tokens in it\n"
    "  --vocab V           vocabulary size, 3..65536\n"
    "  --seed S            chain and sampling seed (same seed, same bytes)\n"
    "  --eval-out PATH     also write an evaluation file from the same chain\n"
    "  --eval-tokens N     its number of tokens (required with --eval-out)\n"
    "  --successors K      next-token choices per token (default 4)\n"
    "  --doc-len L         mean document length in tokens (default 64)\n"
    "text       tokenizes text files into a token file, an eos after each document.\n"
    "           Inputs are streamed: memory is bounded by the longest document.\n"
    "  --out PATH          training token file to write\n"
    "  --tokenizer FILE    a tokenizer file, its format read from its content:\n"
    "                      Hugging Face tokenizer.json (byte-level BPE, Llama 3;\n"
    "                      bos <|begin_of_text|> before each document, eos\n"
    "                      <|end_of_text|> after), a tiktoken rank file (Llama 3's\n"
    "                      original/tokenizer.model), a SentencePiece model (Llama\n"
    "                      2's tokenizer.model), or a directory with tokenizer.json\n"
    "  --tokenizer bytes   UTF-8 bytes 0..255, eos 256, vocab 257\n"
    "  --tokenizer spm     with --model FILE: a SentencePiece model, as before\n"
    "  --jsonl             inputs are JSON lines, one document per line\n"
    "  --text-field NAME   the string field holding the text (default \"text\")\n"
    "  --doc-per-line      plain text: one document per non-empty line\n"
    "                      (default: one document per input file)\n"
    "  --eval-out PATH     send every N-th document to this evaluation file\n"
    "  --eval-every N      that N (default 100)\n"
    "info       validates a token file and prints its header\n";

class UsageError : public UserError {
 public:
  using UserError::UserError;
};

[[noreturn]] void usage_error(const std::string& message) { throw UsageError(message); }

std::int64_t parse_int(const std::string& option, const std::string& text, std::int64_t min_value) {
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size())
    usage_error(option + " expects an integer, got '" + text + "'");
  if (value < min_value) usage_error(option + " must be at least " + std::to_string(min_value) + ", got " + text);
  return value;
}

std::uint64_t parse_u64(const std::string& option, const std::string& text) {
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size())
    usage_error(option + " expects a non-negative integer, got '" + text + "'");
  return value;
}

double parse_double(const std::string& option, const std::string& text) {
  try {
    std::size_t used = 0;
    const double value = std::stod(text, &used);
    if (used == text.size()) return value;
  } catch (const std::exception&) {
  }
  usage_error(option + " expects a number, got '" + text + "'");
}

// --key value pairs; every key must be one of `known`.
std::map<std::string, std::string> parse_options(const std::vector<std::string>& args,
                                                 const std::vector<std::string>& known) {
  std::map<std::string, std::string> options;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& key = args[i];
    bool is_known = false;
    for (const auto& k : known) is_known = is_known || k == key;
    if (!is_known) usage_error("unknown argument '" + key + "'");
    if (i + 1 >= args.size()) usage_error(key + " needs a value");
    if (options.count(key) != 0) usage_error(key + " given twice");
    options[key] = args[++i];
  }
  return options;
}

const std::string& required(const std::map<std::string, std::string>& options, const std::string& key) {
  const auto it = options.find(key);
  if (it == options.end()) usage_error("missing " + key);
  return it->second;
}

void print_stats(const char* what, const std::string& path, const SyntheticCorpusStats& s) {
  std::printf("%s %s: %lld tokens, %lld documents, vocab %lld, eos id %lld\n", what, path.c_str(),
              static_cast<long long>(s.n_tokens), static_cast<long long>(s.n_documents),
              static_cast<long long>(s.vocab_size), static_cast<long long>(s.eos_id));
}

int run_synthetic(const std::vector<std::string>& args) {
  const auto options = parse_options(
      args, {"--out", "--tokens", "--vocab", "--seed", "--eval-out", "--eval-tokens", "--successors", "--doc-len"});
  const std::string out = required(options, "--out");
  const std::int64_t tokens = parse_int("--tokens", required(options, "--tokens"), 1);
  const std::int64_t vocab = parse_int("--vocab", required(options, "--vocab"), 3);
  if (vocab > 65536) usage_error("--vocab must be at most 65536, got " + std::to_string(vocab));
  const std::uint64_t seed = parse_u64("--seed", required(options, "--seed"));
  SyntheticCorpusOptions corpus;
  if (options.count("--successors") != 0)
    corpus.successors = parse_int("--successors", options.at("--successors"), 1);
  if (options.count("--doc-len") != 0) {
    corpus.mean_document_tokens = parse_double("--doc-len", options.at("--doc-len"));
    if (!(corpus.mean_document_tokens >= 2.0 && corpus.mean_document_tokens <= 4096.0))
      usage_error("--doc-len must be in [2, 4096], got " + options.at("--doc-len"));
  }
  const bool eval = options.count("--eval-out") != 0;
  if (eval != (options.count("--eval-tokens") != 0)) usage_error("--eval-out and --eval-tokens go together");
  std::int64_t eval_tokens = 0;
  if (eval) {
    eval_tokens = parse_int("--eval-tokens", options.at("--eval-tokens"), 1);
    if (options.at("--eval-out") == out) usage_error("--eval-out must differ from --out");
  }

  corpus.sample_stream = 0;
  const SyntheticCorpusStats train = write_synthetic_corpus(out, tokens, vocab, seed, corpus);
  print_stats("wrote", out, train);
  if (eval) {
    corpus.sample_stream = 1;
    const SyntheticCorpusStats held_out = write_synthetic_corpus(options.at("--eval-out"), eval_tokens, vocab, seed, corpus);
    print_stats("wrote", options.at("--eval-out"), held_out);
  }
  std::printf("entropy rate %.4f nats/token (the best achievable loss); uniform guess ln(%lld) = %.4f\n",
              train.entropy_rate_nats, static_cast<long long>(vocab), train.uniform_entropy_nats);
  return 0;
}

int run_text(const std::vector<std::string>& args) {
  // Options first, then the inputs; flags (--jsonl, --doc-per-line) take no value.
  std::vector<std::string> valued;
  std::vector<std::string> inputs;
  TextPrepOptions prep;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--jsonl") {
      prep.jsonl = true;
    } else if (a == "--doc-per-line") {
      prep.doc_per_line = true;
    } else if (a.rfind("--", 0) == 0) {
      valued.push_back(a);
      if (i + 1 < args.size()) valued.push_back(args[++i]);
    } else {
      inputs.push_back(a);
    }
  }
  const auto options =
      parse_options(valued, {"--out", "--tokenizer", "--model", "--text-field", "--eval-out", "--eval-every"});
  prep.out_path = required(options, "--out");
  // --tokenizer names a kind (bytes, spm + --model) or a tokenizer file.
  const std::string kind = required(options, "--tokenizer");
  if (kind != "spm" && kind != "bytes" && !std::filesystem::exists(kind))
    usage_error("--tokenizer must be bytes, spm or a tokenizer file; '" + kind + "' is neither (no such file)");
  if ((kind == "spm") != (options.count("--model") != 0)) usage_error("--model goes with --tokenizer spm (only)");
  if (options.count("--text-field") != 0) {
    if (!prep.jsonl) usage_error("--text-field needs --jsonl");
    prep.text_field = options.at("--text-field");
  }
  if (prep.doc_per_line && prep.jsonl)
    usage_error("--doc-per-line is for plain text; JSON lines are one document each");
  if (options.count("--eval-every") != 0 && options.count("--eval-out") == 0)
    usage_error("--eval-every needs --eval-out");
  if (options.count("--eval-out") != 0) {
    prep.eval_out_path = options.at("--eval-out");
    if (prep.eval_out_path == prep.out_path) usage_error("--eval-out must differ from --out");
    if (options.count("--eval-every") != 0) prep.eval_every = parse_int("--eval-every", options.at("--eval-every"), 2);
  }
  if (inputs.empty()) usage_error("text needs at least one INPUT file");

  const std::unique_ptr<TextTokenizer> tokenizer = kind == "spm"     ? load_sentencepiece_tokenizer(options.at("--model"))
                                                   : kind == "bytes" ? make_byte_tokenizer()
                                                                     : load_tokenizer_file(kind);
  const TextPrepStats s = prepare_text(inputs, *tokenizer, prep);
  std::printf("tokenizer %s: vocab %llu, eos id %u\n", tokenizer->describe().c_str(),
              static_cast<unsigned long long>(tokenizer->vocab_size()), tokenizer->eos_id());
  std::printf("read %zu input file(s): %lld documents, %lld tokens (eos included), %lld empty documents skipped\n",
              inputs.size(), static_cast<long long>(s.documents), static_cast<long long>(s.tokens),
              static_cast<long long>(s.empty_documents));
  std::printf("wrote %s: %lld documents, %lld tokens\n", prep.out_path.c_str(),
              static_cast<long long>(s.train_documents), static_cast<long long>(s.train_tokens));
  if (!prep.eval_out_path.empty())
    std::printf("wrote %s: %lld documents, %lld tokens (every %lld-th document)\n", prep.eval_out_path.c_str(),
                static_cast<long long>(s.eval_documents), static_cast<long long>(s.eval_tokens),
                static_cast<long long>(prep.eval_every));
  return 0;
}

int run_info(const std::vector<std::string>& args) {
  if (args.size() != 1) usage_error("info takes exactly one PATH");
  const TokenFile file(args[0]);
  file.validate_all();
  const TokenFileHeader& h = file.header();
  std::printf("%s: token file version %u, %u-byte tokens, %llu tokens, vocab %llu, ", args[0].c_str(), h.version,
              h.token_bytes, static_cast<unsigned long long>(h.n_tokens),
              static_cast<unsigned long long>(h.vocab_size));
  if (h.has_eos())
    std::printf("eos id %llu, %llu documents\n", static_cast<unsigned long long>(h.eos_id),
                static_cast<unsigned long long>(h.n_documents));
  else
    std::printf("no eos id\n");
  return 0;
}

}  // namespace

int prep_main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (args.empty()) usage_error("missing command");
    if (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    for (const auto& a : args)
      if (a == "--help" || a == "-h") {
        std::fputs(kUsage, stdout);
        return 0;
      }
    const std::string command = args[0];
    args.erase(args.begin());
    if (command == "synthetic") return run_synthetic(args);
    if (command == "text") return run_text(args);
    if (command == "info") return run_info(args);
    usage_error("unknown command '" + command + "' (expected synthetic, text or info)");
  } catch (const UsageError& e) {
    std::fprintf(stderr, "ftrain-prep: %s\n\n%s", e.what(), kUsage);
    return 2;
  } catch (const UserError& e) {
    std::fprintf(stderr, "ftrain-prep: error: %s\n", e.what());
    return 1;
  }
}

}  // namespace ftrain::data
