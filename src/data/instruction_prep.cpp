// Instruction templates and masked token file preparation (see instruction_prep.hpp).
#include "data/instruction_prep.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/error.hpp"
#include "data/token_file.hpp"

namespace ftrain::data {

namespace {

// Stanford Alpaca's PROMPT_DICT (tatsu-lab/stanford_alpaca, train.py).
constexpr const char* kAlpacaPromptInput =
    "Below is an instruction that describes a task, paired with an input that provides further context. "
    "Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n";
constexpr const char* kAlpacaPromptNoInput =
    "Below is an instruction that describes a task. "
    "Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n";

const std::string& string_field(const nlohmann::json& object, const std::string& name, const std::string& where,
                                const char* what = "") {
  const auto it = object.find(name);
  if (it == object.end() || !it->is_string())
    FT_USER_ERROR() << where << ": no string field '" << name << "'" << what;
  return it->get_ref<const std::string&>();
}

// The messages of a chat example, checked: objects with string role and
// content, roles system/user/assistant, the last the assistant's.
const nlohmann::json& chat_messages(const nlohmann::json& record, const InstructionPrepOptions& options,
                                    const std::string& where) {
  const auto it = record.find(options.messages_field);
  if (it == record.end() || !it->is_array())
    FT_USER_ERROR() << where << ": no array field '" << options.messages_field << "' of chat messages";
  const nlohmann::json& messages = *it;
  if (messages.empty()) FT_USER_ERROR() << where << ": '" << options.messages_field << "' holds no messages";
  for (std::size_t m = 0; m < messages.size(); ++m) {
    const std::string at = where + ": message " + std::to_string(m);
    if (!messages[m].is_object()) FT_USER_ERROR() << at << " is not a JSON object";
    const std::string& role = string_field(messages[m], "role", at);
    string_field(messages[m], "content", at);
    if (role != "system" && role != "user" && role != "assistant")
      FT_USER_ERROR() << at << " has role '" << role << "'; expected system, user or assistant";
    if (m + 1 == messages.size() && role != "assistant")
      FT_USER_ERROR() << at << " (the last) has role '" << role
                      << "'; a conversation must end with an assistant message, the response that is trained";
  }
  return messages;
}

void render_zephyr(const nlohmann::json& record, const InstructionPrepOptions& options, const std::string& where,
                   std::vector<TemplatePiece>& pieces) {
  const nlohmann::json& messages = chat_messages(record, options, where);
  for (std::size_t m = 0; m < messages.size(); ++m) {
    const std::string& role = messages[m]["role"].get_ref<const std::string&>();
    const bool assistant = role == "assistant";
    pieces.push_back({"<|" + role + "|>\n", false, false});
    pieces.push_back({messages[m]["content"].get<std::string>(), false, assistant});
    if (m + 1 < messages.size()) pieces.push_back({"", true, assistant});  // the last eos is the writer's
  }
}

nlohmann::json parse_record(std::string_view json_line, const std::string& where) {
  nlohmann::json record;
  try {
    record = nlohmann::json::parse(json_line);
  } catch (const nlohmann::json::parse_error& e) {
    FT_USER_ERROR() << where << ": malformed JSON (" << e.what() << ")";
  }
  if (!record.is_object()) FT_USER_ERROR() << where << ": expected a JSON object, got " << record.type_name();
  return record;
}

}  // namespace

bool parse_instruction_template(std::string_view name, InstructionTemplate& out) {
  if (name == "fields") out = InstructionTemplate::fields;
  else if (name == "alpaca") out = InstructionTemplate::alpaca;
  else if (name == "zephyr") out = InstructionTemplate::zephyr;
  else if (name == "chat") out = InstructionTemplate::chat;
  else return false;
  return true;
}

std::vector<TemplatePiece> render_instruction(std::string_view json_line, const InstructionPrepOptions& options,
                                              const std::string& where) {
  const nlohmann::json record = parse_record(json_line, where);
  std::vector<TemplatePiece> pieces;
  switch (options.format) {
    case InstructionTemplate::fields:
      pieces.push_back({string_field(record, options.prompt_field, where, " (the prompt)"), false, false});
      pieces.push_back({string_field(record, options.response_field, where, " (the response)"), false, true});
      break;
    case InstructionTemplate::alpaca: {
      const std::string& instruction = string_field(record, "instruction", where, " (Alpaca template)");
      const std::string& output = string_field(record, "output", where, " (Alpaca template)");
      std::string input;
      if (const auto it = record.find("input"); it != record.end() && !it->is_null()) {
        if (!it->is_string()) FT_USER_ERROR() << where << ": field 'input' is not a string";
        input = it->get<std::string>();
      }
      std::string prompt = input.empty() ? kAlpacaPromptNoInput : kAlpacaPromptInput;
      prompt += instruction;
      if (!input.empty()) prompt += "\n\n### Input:\n" + input;
      prompt += "\n\n### Response:";
      pieces.push_back({std::move(prompt), false, false});
      pieces.push_back({output, false, true});
      break;
    }
    case InstructionTemplate::zephyr:
      render_zephyr(record, options, where, pieces);
      break;
    case InstructionTemplate::chat:
      FT_CHECK(false) << "the model's chat template renders text, not pieces: encode_example";
      break;
    default:
      FT_CHECK(false) << "unknown instruction template " << static_cast<int>(options.format);
  }
  return pieces;
}

void encode_instruction(const std::vector<TemplatePiece>& pieces, const TextTokenizer& tokenizer,
                        std::vector<std::uint32_t>& ids, std::vector<std::uint8_t>& trained) {
  ids.clear();
  trained.clear();
  std::vector<std::uint32_t> piece_ids;
  for (const TemplatePiece& p : pieces) {
    if (p.eos) {
      ids.push_back(tokenizer.eos_id());
      trained.push_back(p.trained ? 1 : 0);
      continue;
    }
    if (p.text.empty()) continue;
    tokenizer.encode(p.text, piece_ids);
    // A bos the tokenizer puts before every text starts the example once,
    // untrained (no target predicts it), not every piece.
    const std::size_t prefix = tokenizer.document_prefix_length();
    const bool first_piece = ids.empty();
    const std::size_t skip = first_piece ? 0 : std::min(prefix, piece_ids.size());
    ids.insert(ids.end(), piece_ids.begin() + static_cast<std::ptrdiff_t>(skip), piece_ids.end());
    std::vector<std::uint8_t> piece_trained(piece_ids.size() - skip, p.trained ? 1 : 0);
    for (std::size_t i = 0; first_piece && i < std::min(prefix, piece_trained.size()); ++i) piece_trained[i] = 0;
    trained.insert(trained.end(), piece_trained.begin(), piece_trained.end());
  }
}

void encode_rendered_chat(const RenderedChat& chat, const TextTokenizer& tokenizer, std::vector<std::uint32_t>& ids,
                          std::vector<std::uint8_t>& trained) {
  std::vector<std::size_t> ends;
  tokenizer.encode_special(chat.text, ids, ends);
  trained.assign(ids.size(), 0);
  std::size_t span = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::size_t begin = i == 0 ? 0 : ends[i - 1], end = ends[i];
    while (span < chat.trained.size() && chat.trained[span].second <= begin) ++span;
    // Any byte of the token inside an assistant turn: every response byte is trained.
    if (span < chat.trained.size() && chat.trained[span].first < end && begin < end) trained[i] = 1;
  }
  if (!ids.empty() && ids.back() == tokenizer.eos_id()) {  // the writer appends it, trained
    ids.pop_back();
    trained.pop_back();
  }
}

void encode_example(std::string_view json_line, const InstructionPrepOptions& options, const TextTokenizer& tokenizer,
                    const std::string& where, std::vector<std::uint32_t>& ids, std::vector<std::uint8_t>& trained) {
  if (options.format != InstructionTemplate::chat) {
    encode_instruction(render_instruction(json_line, options, where), tokenizer, ids, trained);
    return;
  }
  FT_CHECK(options.chat_template != nullptr) << "--template chat without the model's chat template";
  const nlohmann::json record = parse_record(json_line, where);
  encode_rendered_chat(render_model_chat(chat_messages(record, options, where), *options.chat_template, where),
                       tokenizer, ids, trained);
}

InstructionPrepStats prepare_instructions(const std::vector<std::string>& inputs, const TextTokenizer& tokenizer,
                                          const InstructionPrepOptions& options) {
  FT_CHECK(!inputs.empty()) << "no input files";
  FT_CHECK(options.eval_every >= 1) << "eval_every " << options.eval_every;
  for (const auto& path : inputs)
    if (!std::filesystem::is_regular_file(path)) FT_USER_ERROR() << path << ": input file not found";
  TokenFileWriter train(options.out_path, tokenizer.vocab_size(), tokenizer.eos_id(), 0, TokenFileLayout::masked);
  std::optional<TokenFileWriter> eval;
  if (!options.eval_out_path.empty())
    eval.emplace(options.eval_out_path, tokenizer.vocab_size(), tokenizer.eos_id(), 0, TokenFileLayout::masked);
  InstructionPrepStats stats;
  std::vector<std::uint32_t> ids;
  std::vector<std::uint8_t> trained;
  for (const auto& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    if (!in) FT_USER_ERROR() << path << ": cannot open input file";
    std::string line;
    std::int64_t line_number = 0;
    while (std::getline(in, line)) {
      ++line_number;
      if (line.find_first_not_of(" \t\r\n") == std::string::npos) continue;
      const std::string where = path + ":" + std::to_string(line_number);
      encode_example(line, options, tokenizer, where, ids, trained);
      ++stats.examples;
      const auto n = static_cast<std::int64_t>(ids.size()) + 1;  // + the trained eos
      stats.tokens += n;
      stats.longest_example = std::max(stats.longest_example, n);
      for (const std::uint8_t t : trained) stats.trained_tokens += t;
      stats.trained_tokens += 1;
      if (eval && stats.examples % options.eval_every == 0) {
        eval->append_document(ids, trained);
        ++stats.eval_examples;
      } else {
        train.append_document(ids, trained);
        ++stats.train_examples;
      }
    }
    if (in.bad()) FT_USER_ERROR() << path << ": read error after line " << line_number;
  }
  if (stats.train_examples == 0)
    FT_USER_ERROR() << "no training examples in the input (" << stats.examples << " read, "
                    << stats.eval_examples << " went to the eval file)";
  train.close();
  if (eval) eval->close();
  return stats;
}

}  // namespace ftrain::data
