// ftrain-prep command line (see prep_cli.hpp).
#include "data/prep_cli.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.hpp"
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/chat_template.hpp"
#include "data/instruction_prep.hpp"
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
    "       ftrain-prep instruct --out PATH (--tokenizer FILE | --tokenizer bytes | --tokenizer spm --model FILE)\n"
    "                            --template fields|alpaca|zephyr|chat [--chat-template FILE]\n"
    "                            [--prompt-field NAME --response-field NAME] [--messages-field NAME]\n"
    "                            [--eval-out PATH [--eval-every N]] INPUT...\n"
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
    "instruct   tokenizes JSON-lines instruction or chat examples into a token file\n"
    "           (format version 2) with a loss mask: prompt tokens are read but not\n"
    "           trained (their targets become -100), response tokens and the eos\n"
    "           after each example are trained. Templates (share/doc/data.md):\n"
    "  --template fields   [prompt]response<eos> from two string fields\n"
    "  --template alpaca   Stanford Alpaca's prompt over instruction/input/output\n"
    "  --template zephyr   a messages list of {role, content} (system, user,\n"
    "                      assistant) with Zephyr's <|role|> markers; every\n"
    "                      assistant turn and its eos is trained\n"
    "  --template chat     the same messages in the model's own chat template:\n"
    "                      tokenizer_config.json's chat_template next to the\n"
    "                      tokenizer (or --chat-template FILE, a\n"
    "                      tokenizer_config.json or .jinja file), rendered as\n"
    "                      transformers' apply_chat_template; every assistant\n"
    "                      turn and the end marker after it is trained\n"
    "  --prompt-field NAME     fields: the prompt field (default \"prompt\")\n"
    "  --response-field NAME   fields: the response field (default \"response\")\n"
    "  --messages-field NAME   zephyr, chat: the messages field (default \"messages\")\n"
    "  --tokenizer, --model, --eval-out, --eval-every as for text (every N-th example)\n"
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

// --eval-out / --eval-every, shared by text and instruct.
void parse_eval_split(const std::map<std::string, std::string>& options, const std::string& out_path,
                      std::string& eval_out_path, std::int64_t& eval_every) {
  if (options.count("--eval-every") != 0 && options.count("--eval-out") == 0)
    usage_error("--eval-every needs --eval-out");
  if (options.count("--eval-out") != 0) {
    eval_out_path = options.at("--eval-out");
    if (eval_out_path == out_path) usage_error("--eval-out must differ from --out");
    if (options.count("--eval-every") != 0) eval_every = parse_int("--eval-every", options.at("--eval-every"), 2);
  }
}

// The tokenizer file or directory the options name (--model for spm), or ""
// for the byte tokenizer: the model directory holds it, with config.json and
// tokenizer_config.json.
std::string tokenizer_location(const std::map<std::string, std::string>& options) {
  const std::string& kind = options.at("--tokenizer");
  if (kind == "bytes") return {};
  return kind == "spm" ? options.at("--model") : kind;
}

// A warning when the model's config.json (beside the tokenizer) names an
// eos other than the tokenizer's: every document of the token file ends with
// the tokenizer's, and a model that learns to end with it does not stop
// where generation with that config.json expects.
void warn_on_eos_mismatch(const TextTokenizer& tokenizer, const std::string& location) {
  if (location.empty()) return;
  namespace fs = std::filesystem;
  const fs::path dir = fs::is_directory(location) ? fs::path(location) : fs::path(location).parent_path();
  const fs::path config = (dir.empty() ? fs::path(".") : dir) / "config.json";
  std::ifstream in(config);
  if (!in) return;
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (!j.is_object() || !j.contains("eos_token_id") || j["eos_token_id"].is_null()) return;
  const nlohmann::json& eos = j["eos_token_id"];
  std::vector<std::uint64_t> ids;
  for (const nlohmann::json& id : eos.is_array() ? eos : nlohmann::json::array({eos}))
    if (id.is_number_unsigned()) ids.push_back(id.get<std::uint64_t>());
  if (std::find(ids.begin(), ids.end(), tokenizer.eos_id()) != ids.end()) return;
  std::fprintf(stderr,
               "ftrain-prep: warning: the tokenizer's eos id is %u, but %s has eos_token_id %s: every document in "
               "the token file ends with %u, and a model trained on it learns to stop with a token that generation "
               "with this config.json does not stop at. Use the tokenizer of that model, or check that this is "
               "intended.\n",
               tokenizer.eos_id(), config.string().c_str(), eos.dump().c_str(), tokenizer.eos_id());
}

// --tokenizer / --model, shared by text and instruct.
std::unique_ptr<TextTokenizer> tokenizer_from(const std::map<std::string, std::string>& options) {
  // --tokenizer names a kind (bytes, spm + --model) or a tokenizer file.
  const std::string kind = required(options, "--tokenizer");
  if (kind != "spm" && kind != "bytes" && !std::filesystem::exists(kind))
    usage_error("--tokenizer must be bytes, spm or a tokenizer file; '" + kind + "' is neither (no such file)");
  if ((kind == "spm") != (options.count("--model") != 0)) usage_error("--model goes with --tokenizer spm (only)");
  std::unique_ptr<TextTokenizer> tokenizer;
  if (kind == "spm") tokenizer = load_sentencepiece_tokenizer(options.at("--model"));
  else if (kind == "bytes") tokenizer = make_byte_tokenizer();
  else tokenizer = load_tokenizer_file(kind);
  warn_on_eos_mismatch(*tokenizer, tokenizer_location(options));
  return tokenizer;
}

// --template chat: --chat-template FILE, else the template beside the tokenizer.
std::shared_ptr<const ModelChatTemplate> model_chat_template(const std::map<std::string, std::string>& options) {
  if (options.count("--chat-template") != 0)
    return std::make_shared<const ModelChatTemplate>(load_model_chat_template(options.at("--chat-template")));
  const std::string location = tokenizer_location(options);
  std::string looked_in;
  std::unique_ptr<ModelChatTemplate> found;
  if (!location.empty()) found = find_model_chat_template(location, looked_in);
  if (!found)
    FT_USER_ERROR() << "--template chat renders the model's own chat template, but "
                    << (location.empty() ? std::string("--tokenizer bytes has no model directory")
                                         : "there is no chat_template in " + looked_in +
                                               "/tokenizer_config.json (nor a chat_template.jinja there)")
                    << "; give --chat-template FILE (the model's tokenizer_config.json), or --template zephyr for "
                    << "Zephyr's <|role|> markers";
  return std::shared_ptr<const ModelChatTemplate>(std::move(found));
}

int run_instruct(const std::vector<std::string>& args) {
  std::vector<std::string> valued;
  std::vector<std::string> inputs;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i].rfind("--", 0) == 0) {
      valued.push_back(args[i]);
      if (i + 1 < args.size()) valued.push_back(args[++i]);
    } else {
      inputs.push_back(args[i]);
    }
  }
  const auto options =
      parse_options(valued, {"--out", "--tokenizer", "--model", "--template", "--prompt-field", "--response-field",
                             "--messages-field", "--chat-template", "--eval-out", "--eval-every"});
  InstructionPrepOptions prep;
  prep.out_path = required(options, "--out");
  const std::string& name = required(options, "--template");
  if (!parse_instruction_template(name, prep.format))
    usage_error("--template must be fields, alpaca, zephyr or chat, got '" + name + "'");
  const bool fields = prep.format == InstructionTemplate::fields, chat = prep.format == InstructionTemplate::chat;
  const bool messages = chat || prep.format == InstructionTemplate::zephyr;
  for (const char* key : {"--prompt-field", "--response-field"})
    if (options.count(key) != 0 && !fields) usage_error(std::string(key) + " goes with --template fields");
  if (options.count("--messages-field") != 0 && !messages)
    usage_error("--messages-field goes with --template chat or zephyr");
  if (options.count("--chat-template") != 0 && !chat) usage_error("--chat-template goes with --template chat");
  if (options.count("--prompt-field") != 0) prep.prompt_field = options.at("--prompt-field");
  if (options.count("--response-field") != 0) prep.response_field = options.at("--response-field");
  if (options.count("--messages-field") != 0) prep.messages_field = options.at("--messages-field");
  if (fields && prep.prompt_field == prep.response_field)
    usage_error("--prompt-field and --response-field must differ");
  parse_eval_split(options, prep.out_path, prep.eval_out_path, prep.eval_every);
  if (inputs.empty()) usage_error("instruct needs at least one INPUT file (JSON lines)");

  const std::unique_ptr<TextTokenizer> tokenizer = tokenizer_from(options);
  if (chat) {
    prep.chat_template = model_chat_template(options);
    std::printf("chat template: %s\n", prep.chat_template->chat_template->origin().c_str());
  }
  const InstructionPrepStats s = prepare_instructions(inputs, *tokenizer, prep);
  std::printf("tokenizer %s: vocab %llu, eos id %u\n", tokenizer->describe().c_str(),
              static_cast<unsigned long long>(tokenizer->vocab_size()), tokenizer->eos_id());
  std::printf("read %zu input file(s): %lld examples (template %s), %lld tokens, %lld trained (%.1f%%)\n",
              inputs.size(), static_cast<long long>(s.examples), name.c_str(), static_cast<long long>(s.tokens),
              static_cast<long long>(s.trained_tokens),
              s.tokens > 0 ? 100.0 * static_cast<double>(s.trained_tokens) / static_cast<double>(s.tokens) : 0.0);
  std::printf("longest example %lld tokens (eos included): with packing off, seq_len %lld keeps every one whole\n",
              static_cast<long long>(s.longest_example), static_cast<long long>(s.longest_example - 1));
  std::printf("wrote %s: %lld examples\n", prep.out_path.c_str(), static_cast<long long>(s.train_examples));
  if (!prep.eval_out_path.empty())
    std::printf("wrote %s: %lld examples (every %lld-th)\n", prep.eval_out_path.c_str(),
                static_cast<long long>(s.eval_examples), static_cast<long long>(prep.eval_every));
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
  if (options.count("--text-field") != 0) {
    if (!prep.jsonl) usage_error("--text-field needs --jsonl");
    prep.text_field = options.at("--text-field");
  }
  if (prep.doc_per_line && prep.jsonl)
    usage_error("--doc-per-line is for plain text; JSON lines are one document each");
  parse_eval_split(options, prep.out_path, prep.eval_out_path, prep.eval_every);
  if (inputs.empty()) usage_error("text needs at least one INPUT file");

  const std::unique_ptr<TextTokenizer> tokenizer = tokenizer_from(options);
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
    std::printf("eos id %llu, %llu documents", static_cast<unsigned long long>(h.eos_id),
                static_cast<unsigned long long>(h.n_documents));
  else
    std::printf("no eos id");
  if (h.has_loss_mask()) {
    std::int64_t trained = 0;
    for (std::int64_t i = 0; i < file.n_tokens(); ++i) trained += file.trained(i) ? 1 : 0;
    std::printf(", loss mask: %lld tokens trained, %lld masked", static_cast<long long>(trained),
                static_cast<long long>(file.n_tokens() - trained));
  }
  std::printf("\n");
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
    if (command == "instruct") return run_instruct(args);
    if (command == "info") return run_info(args);
    usage_error("unknown command '" + command + "' (expected synthetic, text, instruct or info)");
  } catch (const UsageError& e) {
    std::fprintf(stderr, "ftrain-prep: %s\n\n%s", e.what(), kUsage);
    return 2;
  } catch (const UserError& e) {
    std::fprintf(stderr, "ftrain-prep: error: %s\n", e.what());
    return 1;
  }
}

}  // namespace ftrain::data
