// Hugging Face tokenizer.json -> ByteLevelBpeModel (see byte_level_bpe.hpp).
//
// Accepted, because it is what GPT-2 and Llama 3 ship and what `tokenizers`
// writes for a byte-level BPE:
//   model           BPE: vocab {token: id}, merges as "a b" strings (older
//                   files, Meta's) or [a, b] lists (tokenizers >= 0.20),
//                   ignore_merges; no dropout, no subword prefix/suffix.
//   normalizer      none.
//   pre_tokenizer   ByteLevel(use_regex true: GPT-2's regex), or a Sequence
//                   of Split(Regex, "Isolated", invert false) and
//                   ByteLevel(use_regex false) (Llama 3); never
//                   add_prefix_space.
//   added_tokens    matched literally; no lstrip/rstrip/single_word.
//   post_processor  none, ByteLevel, TemplateProcessing (its special tokens
//                   before $A are the bos; after $A only the eos, which the
//                   token file writer appends anyway), or a Sequence of them.
//   eos             <|end_of_text|> (Llama 3), <|endoftext|> (GPT-2) or </s>,
//                   the first that the file defines.
// Anything else is refused with the JSON field that has it: a tokenizer
// that silently encodes differently from Hugging Face would poison a data
// set without anyone noticing.
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.hpp"
#include "data/byte_level_bpe.hpp"

namespace ftrain::data {

namespace {

using nlohmann::json;

bool is_null_or_absent(const json& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() || it->is_null();
}

std::string type_of(const json& node) {
  const auto it = node.find("type");
  return it != node.end() && it->is_string() ? it->get<std::string>() : std::string("(no type)");
}

bool flag(const json& node, const char* key, bool fallback) {
  const auto it = node.find(key);
  return it == node.end() || it->is_null() ? fallback : it->get<bool>();
}

struct Loader {
  std::string path;

  [[noreturn]] void refuse(const std::string& field, const std::string& why) const {
    FT_USER_ERROR() << path << ": " << field << ": " << why
                    << " (ftrain-prep reads byte-level BPE tokenizers as GPT-2 and Llama 3 ship them)";
  }

  // A ByteLevel pre-tokenizer; returns its use_regex.
  bool byte_level(const json& node, const std::string& field) const {
    if (flag(node, "add_prefix_space", true))
      refuse(field + ".add_prefix_space", "true is not supported (Llama 3 and GPT-2 set it false)");
    return flag(node, "use_regex", true);
  }

  std::string split_regex(const json& root) const {
    const auto it = root.find("pre_tokenizer");
    if (it == root.end() || it->is_null()) refuse("pre_tokenizer", "missing; a byte-level BPE needs ByteLevel");
    const json& pre = *it;
    if (type_of(pre) == "ByteLevel") {
      if (!byte_level(pre, "pre_tokenizer")) refuse("pre_tokenizer.use_regex", "false leaves the text unsplit");
      return kGpt2SplitRegex;
    }
    if (type_of(pre) != "Sequence") refuse("pre_tokenizer.type", "'" + type_of(pre) + "' is not supported");
    const json& steps = pre.at("pretokenizers");
    if (!steps.is_array() || steps.size() != 2 || type_of(steps[0]) != "Split" || type_of(steps[1]) != "ByteLevel")
      refuse("pre_tokenizer.pretokenizers", "expected [Split, ByteLevel] (Llama 3's), got " + steps.dump().substr(0, 200));
    const json& split = steps[0];
    const json& pattern = split.at("pattern");
    if (!pattern.is_object() || !pattern.contains("Regex") || !pattern["Regex"].is_string())
      refuse("pre_tokenizer.pretokenizers[0].pattern", "expected {\"Regex\": ...}, got " + pattern.dump().substr(0, 200));
    if (split.value("behavior", std::string()) != "Isolated")
      refuse("pre_tokenizer.pretokenizers[0].behavior", "only \"Isolated\" is supported, got " + split.value("behavior", std::string("(none)")));
    if (flag(split, "invert", false)) refuse("pre_tokenizer.pretokenizers[0].invert", "true is not supported");
    if (byte_level(steps[1], "pre_tokenizer.pretokenizers[1]"))
      refuse("pre_tokenizer.pretokenizers[1].use_regex", "true would split the Split's pieces again by GPT-2's regex; not supported");
    return pattern["Regex"].get<std::string>();
  }

  // The vocabulary, undoing GPT-2's byte-to-unicode spelling.
  void vocabulary(const json& model, ByteLevelBpeModel& out, std::unordered_map<std::string, std::uint32_t>& by_spelling) const {
    const json& vocab = model.at("vocab");
    if (!vocab.is_object()) refuse("model.vocab", "expected an object {token: id}");
    std::uint64_t max_id = 0;
    for (const auto& [token, id] : vocab.items()) {
      if (!id.is_number_unsigned()) refuse("model.vocab[\"" + token + "\"]", "the id is not a non-negative integer");
      max_id = std::max(max_id, id.get<std::uint64_t>());
    }
    if (max_id >= (std::uint64_t{1} << 31)) refuse("model.vocab", "id " + std::to_string(max_id) + " is too large");
    out.id_to_bytes.assign(vocab.empty() ? 0 : max_id + 1, std::string());
    std::string bytes;
    for (const auto& [token, id_node] : vocab.items()) {
      const auto id = id_node.get<std::uint32_t>();
      if (!unicode_to_bytes(token, bytes))
        refuse("model.vocab[\"" + token + "\"]",
               "not spelled in GPT-2's byte-to-unicode alphabet: this is not a byte-level BPE (Llama 2's tokenizer.json "
               "is SentencePiece-style; give ftrain-prep its tokenizer.model instead)");
      if (!out.id_to_bytes[id].empty()) refuse("model.vocab", "two tokens have id " + std::to_string(id));
      out.id_to_bytes[id] = bytes;
      by_spelling.emplace(token, id);
    }
  }

  void merges(const json& model, const std::unordered_map<std::string, std::uint32_t>& by_spelling,
              ByteLevelBpeModel& out) const {
    const json& merges = model.at("merges");
    if (!merges.is_array()) refuse("model.merges", "expected an array");
    out.merges.reserve(merges.size());
    for (std::size_t i = 0; i < merges.size(); ++i) {
      const json& m = merges[i];
      const std::string field = "model.merges[" + std::to_string(i) + "]";
      std::string left, right;
      if (m.is_string()) {  // "a b": byte-level spellings never contain a plain space
        const std::string s = m.get<std::string>();
        const std::size_t space = s.find(' ');
        if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
          refuse(field, "\"" + s + "\" is not two tokens separated by one space");
        left = s.substr(0, space);
        right = s.substr(space + 1);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        left = m[0].get<std::string>();
        right = m[1].get<std::string>();
      } else {
        refuse(field, "expected \"a b\" or [\"a\", \"b\"], got " + m.dump());
      }
      const auto find = [&](const std::string& token, const char* what) {
        const auto it = by_spelling.find(token);
        if (it == by_spelling.end()) refuse(field, std::string(what) + " \"" + token + "\" is not in model.vocab");
        return it->second;
      };
      out.merges.push_back({find(left, "token"), find(right, "token"), find(left + right, "merged token"),
                            static_cast<std::uint32_t>(i)});
    }
  }

  void added_tokens(const json& root, ByteLevelBpeModel& out) const {
    const auto it = root.find("added_tokens");
    if (it == root.end() || it->is_null()) return;
    for (std::size_t i = 0; i < it->size(); ++i) {
      const json& a = (*it)[i];
      const std::string field = "added_tokens[" + std::to_string(i) + "]";
      if (!a.contains("id") || !a["id"].is_number_unsigned() || !a.contains("content") || !a["content"].is_string())
        refuse(field, "needs an integer id and a string content");
      for (const char* key : {"single_word", "lstrip", "rstrip"})
        if (flag(a, key, false)) refuse(field + "." + key, "true is not supported");
      out.added_tokens.push_back({a["content"].get<std::string>(), a["id"].get<std::uint32_t>()});
    }
  }

  std::int64_t id_of(const ByteLevelBpeModel& model, const std::string& token) const {
    for (const auto& a : model.added_tokens)
      if (a.content == token) return a.id;
    for (std::size_t id = 0; id < model.id_to_bytes.size(); ++id)
      if (model.id_to_bytes[id] == token) return static_cast<std::int64_t>(id);
    return -1;
  }

  // TemplateProcessing's "single": special tokens around $A.
  void template_processing(const json& node, const std::string& field, ByteLevelBpeModel& out,
                           std::vector<std::uint32_t>& suffix) const {
    const json& single = node.at("single");
    const json& specials = node.contains("special_tokens") ? node["special_tokens"] : json::object();
    bool seen_sequence = false;
    for (const json& piece : single) {
      if (piece.contains("Sequence")) {
        if (piece["Sequence"].value("id", std::string()) != "A") refuse(field + ".single", "only sequence $A is expected");
        seen_sequence = true;
        continue;
      }
      if (!piece.contains("SpecialToken")) refuse(field + ".single", "unexpected entry " + piece.dump());
      const std::string name = piece["SpecialToken"].at("id").get<std::string>();
      if (!specials.contains(name) || !specials[name].contains("ids"))
        refuse(field + ".special_tokens", "\"" + name + "\" is used in the template but not defined");
      for (const json& id : specials[name]["ids"]) (seen_sequence ? suffix : out.prefix_ids).push_back(id.get<std::uint32_t>());
    }
    if (!seen_sequence) refuse(field + ".single", "has no $A");
  }

  void post_processor(const json& root, ByteLevelBpeModel& out, std::vector<std::uint32_t>& suffix) const {
    const auto it = root.find("post_processor");
    if (it == root.end() || it->is_null()) return;
    std::vector<std::pair<const json*, std::string>> steps;
    if (type_of(*it) == "Sequence") {
      for (std::size_t i = 0; i < it->at("processors").size(); ++i)
        steps.emplace_back(&(*it)["processors"][i], "post_processor.processors[" + std::to_string(i) + "]");
    } else {
      steps.emplace_back(&*it, "post_processor");
    }
    for (const auto& [node, field] : steps) {
      if (type_of(*node) == "ByteLevel") continue;  // offsets only
      if (type_of(*node) == "TemplateProcessing") {
        template_processing(*node, field, out, suffix);
        continue;
      }
      refuse(field + ".type", "'" + type_of(*node) + "' is not supported");
    }
  }

  ByteLevelBpeModel load() const {
    std::ifstream in(path, std::ios::binary);
    if (!in) FT_USER_ERROR() << path << ": cannot open tokenizer.json";
    json root;
    try {
      root = json::parse(in);
    } catch (const json::exception& e) {
      FT_USER_ERROR() << path << ": malformed JSON (" << e.what() << ")";
    }
    try {
      return from_json(root);
    } catch (const json::exception& e) {  // a field of the wrong type or missing
      FT_USER_ERROR() << path << ": unexpected tokenizer.json structure (" << e.what() << ")";
    }
  }

  ByteLevelBpeModel from_json(const json& root) const {
    ByteLevelBpeModel out;
    out.source = path;
    if (!root.is_object() || !root.contains("model")) refuse("model", "missing: not a tokenizer.json");
    const json& model = root["model"];
    if (model.contains("type") && type_of(model) != "BPE")
      refuse("model.type", "'" + type_of(model) + "' is not BPE");
    if (!is_null_or_absent(model, "dropout")) refuse("model.dropout", "BPE dropout is for training-time sampling; not supported");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (!is_null_or_absent(model, key) && !model[key].get<std::string>().empty())
        refuse(std::string("model.") + key, "not supported in a byte-level BPE");
    if (flag(model, "byte_fallback", false)) refuse("model.byte_fallback", "true is not supported");
    if (!is_null_or_absent(root, "normalizer")) refuse("normalizer", "'" + type_of(root["normalizer"]) + "' is not supported (Llama 3 has none)");
    for (const char* key : {"truncation", "padding"})
      if (!is_null_or_absent(root, key)) refuse(key, "must be null: it would cut or pad every document");
    out.ignore_merges = flag(model, "ignore_merges", false);
    out.split_regex = split_regex(root);

    std::unordered_map<std::string, std::uint32_t> by_spelling;
    vocabulary(model, out, by_spelling);
    merges(model, by_spelling, out);
    added_tokens(root, out);
    std::vector<std::uint32_t> suffix;
    post_processor(root, out, suffix);

    std::int64_t eos = -1;
    for (const char* name : {"<|end_of_text|>", "<|endoftext|>", "</s>"})
      if (eos < 0) eos = id_of(out, name);
    if (eos < 0)
      refuse("added_tokens", "defines no end-of-document token (<|end_of_text|>, <|endoftext|> or </s>); the token "
                             "file marks document ends with it");
    out.eos_id = static_cast<std::uint32_t>(eos);
    if (!suffix.empty() && !(suffix.size() == 1 && suffix[0] == out.eos_id))
      refuse("post_processor", "the template adds tokens after $A other than the eos; not supported");
    return out;
  }
};

}  // namespace

std::unique_ptr<ByteLevelBpeTokenizer> load_hf_tokenizer_json(const std::string& path) {
  return std::make_unique<ByteLevelBpeTokenizer>(Loader{path}.load());
}

}  // namespace ftrain::data
