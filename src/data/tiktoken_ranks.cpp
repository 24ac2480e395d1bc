// tiktoken rank file -> ByteLevelBpeModel (see byte_level_bpe.hpp).
//
// Format (tiktoken's load_tiktoken_bpe; Meta's Llama 3
// original/tokenizer.model): one "<base64 of the token's bytes> <rank>" per
// line. The rank is both the token id and its merge priority: tiktoken
// merges the adjacent pair whose concatenation has the lowest rank. That is
// a BPE whose merges are every split (left, right) of every token into two
// tokens, ranked by the token, and whose whole pieces are looked up first
// (ignore_merges). Among the splits of one token the order is transformers'
// (TikTokenConverter), so that this file encodes exactly as the
// tokenizer.json converted from it (Llama 3's) does. tiktoken itself
// breaks such ties leftmost; the two could differ only if two different
// splits of one token were adjacent and overlapping (ab|a|ba for "aba"), which
// a brute-force search over small vocabularies never reached.
//
// The file holds no special tokens; Meta's tokenizer.py appends 256 after
// the ranks. Their names are Llama 3.1's (llama-models' llama3/tokenizer.py,
// also Llama 3.2's tokenizer.json); Llama 3.0 called 128004, 128005,
// 128008, 128010 and 128011 reserved tokens. The ids that matter to a token
// file, bos 128000 and eos 128001, and the chat tokens 128006, 128007 and
// 128009 are the same in both.
#include <algorithm>
#include <array>
#include <fstream>

#include "base/error.hpp"
#include "data/byte_level_bpe.hpp"

namespace ftrain::data {

namespace {

std::vector<std::string> llama3_special_tokens() {
  std::vector<std::string> names = {"<|begin_of_text|>",   "<|end_of_text|>",       "<|reserved_special_token_0|>",
                                    "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|step_id|>",
                                    "<|start_header_id|>", "<|end_header_id|>",     "<|eom_id|>",
                                    "<|eot_id|>",          "<|python_tag|>",        "<|image|>"};
  for (int i = 2; names.size() < 256; ++i) names.push_back("<|reserved_special_token_" + std::to_string(i) + "|>");
  return names;
}

// Standard base64 (RFC 4648 with padding); false on any other character.
bool decode_base64(std::string_view text, std::string& out) {
  static const auto table = [] {
    std::array<int, 256> t{};
    t.fill(-1);
    const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) t[static_cast<unsigned char>(alphabet[i])] = i;
    return t;
  }();
  out.clear();
  if (text.empty() || text.size() % 4 != 0) return false;
  std::size_t pad = 0;
  while (pad < 2 && text[text.size() - 1 - pad] == '=') ++pad;
  unsigned buffer = 0;
  int bits = 0;
  for (std::size_t i = 0; i < text.size() - pad; ++i) {
    const int v = table[static_cast<unsigned char>(text[i])];
    if (v < 0) return false;
    buffer = (buffer << 6) | static_cast<unsigned>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((buffer >> bits) & 0xFF));
    }
  }
  return true;
}

}  // namespace

bool looks_like_tiktoken_line(std::string_view line) {
  const std::size_t space = line.find(' ');
  if (space == std::string_view::npos || space == 0 || space + 1 >= line.size()) return false;
  std::string bytes;
  if (!decode_base64(line.substr(0, space), bytes)) return false;
  for (std::size_t i = space + 1; i < line.size(); ++i)
    if (line[i] < '0' || line[i] > '9') return false;
  return true;
}

std::unique_ptr<ByteLevelBpeTokenizer> load_tiktoken_ranks(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) FT_USER_ERROR() << path << ": cannot open the tiktoken rank file";
  ByteLevelBpeModel model;
  model.source = path;
  model.ignore_merges = true;
  model.split_regex = kLlama3SplitRegex;
  std::string line, bytes;
  std::int64_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const std::size_t space = line.find(' ');
    std::uint64_t rank = 0;
    bool ok = space != std::string::npos && space + 1 < line.size() && decode_base64(std::string_view(line).substr(0, space), bytes);
    for (std::size_t i = space + 1; ok && i < line.size(); ++i) {
      ok = line[i] >= '0' && line[i] <= '9';
      rank = rank * 10 + static_cast<unsigned>(line[i] - '0');
      ok = ok && rank < (std::uint64_t{1} << 31);
    }
    if (!ok) FT_USER_ERROR() << path << ":" << line_number << ": expected \"<base64 token> <rank>\"";
    if (bytes.empty()) FT_USER_ERROR() << path << ":" << line_number << ": empty token";
    if (rank >= model.id_to_bytes.size()) model.id_to_bytes.resize(rank + 1);
    if (!model.id_to_bytes[rank].empty()) FT_USER_ERROR() << path << ":" << line_number << ": rank " << rank << " given twice";
    model.id_to_bytes[rank] = bytes;
  }
  if (in.bad()) FT_USER_ERROR() << path << ": read error after line " << line_number;
  if (model.id_to_bytes.empty()) FT_USER_ERROR() << path << ": no ranks";

  std::unordered_map<std::string, std::uint32_t> id_of;
  id_of.reserve(model.id_to_bytes.size());
  for (std::size_t id = 0; id < model.id_to_bytes.size(); ++id)
    if (!model.id_to_bytes[id].empty()) id_of.emplace(model.id_to_bytes[id], static_cast<std::uint32_t>(id));
  // Merges in the order of transformers' TikTokenConverter (how Meta's rank
  // file became Llama 3's tokenizer.json): by the merged token's rank, then
  // the left and right parts' ranks; the position in that list is the rank.
  for (std::size_t id = 0; id < model.id_to_bytes.size(); ++id) {
    const std::string& token = model.id_to_bytes[id];
    const std::size_t first = model.merges.size();
    for (std::size_t k = 1; k < token.size(); ++k) {
      const auto left = id_of.find(token.substr(0, k));
      const auto right = id_of.find(token.substr(k));
      if (left != id_of.end() && right != id_of.end())
        model.merges.push_back({left->second, right->second, static_cast<std::uint32_t>(id), 0});
    }
    std::sort(model.merges.begin() + static_cast<std::ptrdiff_t>(first), model.merges.end(),
              [](const BpeMerge& a, const BpeMerge& b) { return a.left != b.left ? a.left < b.left : a.right < b.right; });
  }
  for (std::size_t i = 0; i < model.merges.size(); ++i) model.merges[i].rank = static_cast<std::uint32_t>(i);

  const auto first_special = static_cast<std::uint32_t>(model.id_to_bytes.size());
  const auto names = llama3_special_tokens();
  for (std::size_t i = 0; i < names.size(); ++i)
    model.added_tokens.push_back({names[i], first_special + static_cast<std::uint32_t>(i)});
  model.prefix_ids = {first_special};   // <|begin_of_text|>
  model.eos_id = first_special + 1;     // <|end_of_text|>
  return std::make_unique<ByteLevelBpeTokenizer>(std::move(model));
}

}  // namespace ftrain::data
