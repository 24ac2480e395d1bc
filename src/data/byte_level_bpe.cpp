// Byte-level BPE engine (see byte_level_bpe.hpp).
#include "data/byte_level_bpe.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <queue>
#include <sstream>

#include "base/error.hpp"

namespace ftrain::data {

namespace {

// GPT-2 keeps the printable Latin-1 bytes as themselves.
bool byte_is_printable(unsigned b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255); }

struct ByteMap {
  char32_t to_unicode[256];
  ByteMap() {
    unsigned n = 0;
    for (unsigned b = 0; b < 256; ++b) to_unicode[b] = byte_is_printable(b) ? b : 256 + n++;
  }
};
const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

void append_utf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Length of the valid UTF-8 sequence at text[i], or 0 (RFC 3629: no
// overlongs, no surrogates, nothing above U+10FFFF).
std::size_t utf8_sequence_length(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned c = byte(i);
  if (c < 0x80) return 1;
  std::size_t n = 0;
  unsigned lo = 0x80, hi = 0xBF;  // range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > text.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  return n;
}

std::string printable(std::string_view bytes) {
  std::ostringstream s;
  s << '"';
  for (const char ch : bytes) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 32 && c < 127 && c != '"' && c != '\\') {
      s << ch;
    } else {
      static const char* hex = "0123456789abcdef";
      s << "\\x" << hex[c >> 4] << hex[c & 15];
    }
  }
  s << '"';
  return s.str();
}

std::uint64_t pair_key(std::uint32_t left, std::uint32_t right) {
  return (static_cast<std::uint64_t>(left) << 32) | right;
}

constexpr std::size_t kPieceCacheEntries = std::size_t{1} << 18;

}  // namespace

char32_t byte_to_unicode(std::uint8_t b) { return byte_map().to_unicode[b]; }

std::string byte_to_unicode_utf8(std::uint8_t b) {
  std::string s;
  append_utf8(byte_to_unicode(b), s);
  return s;
}

bool unicode_to_bytes(std::string_view mapped, std::string& bytes) {
  // The inverse table: code points 33..255 and 256..323.
  static const auto inverse = [] {
    std::vector<int> inv(324, -1);
    for (unsigned b = 0; b < 256; ++b) inv[byte_to_unicode(static_cast<std::uint8_t>(b))] = static_cast<int>(b);
    return inv;
  }();
  bytes.clear();
  for (std::size_t i = 0; i < mapped.size();) {
    const std::size_t n = utf8_sequence_length(mapped, i);
    if (n == 0) return false;
    const auto c0 = static_cast<unsigned char>(mapped[i]);
    char32_t cp = 0;
    if (n == 1) cp = c0;
    else if (n == 2) cp = ((c0 & 0x1Fu) << 6) | (static_cast<unsigned char>(mapped[i + 1]) & 0x3Fu);
    else cp = 0x110000;  // three or four bytes: far above U+0143, not a byte's image
    if (cp >= inverse.size() || inverse[cp] < 0) return false;
    bytes.push_back(static_cast<char>(inverse[cp]));
    i += n;
  }
  return true;
}

std::size_t first_invalid_utf8(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = utf8_sequence_length(text, i);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

// The compiled pre-tokenizer regex and its match buffer.
struct ByteLevelBpeTokenizer::Regex {
  pcre2_code* code = nullptr;
  pcre2_match_data* match = nullptr;
  ~Regex() {
    if (match != nullptr) pcre2_match_data_free(match);
    if (code != nullptr) pcre2_code_free(code);
  }
};

ByteLevelBpeTokenizer::~ByteLevelBpeTokenizer() = default;

ByteLevelBpeTokenizer::ByteLevelBpeTokenizer(ByteLevelBpeModel model) : model_(std::move(model)) {
  const std::string& src = model_.source;
  vocab_size_ = model_.id_to_bytes.size();
  for (const auto& a : model_.added_tokens) vocab_size_ = std::max<std::uint64_t>(vocab_size_, std::uint64_t{a.id} + 1);
  if (vocab_size_ == 0) FT_USER_ERROR() << src << ": the tokenizer has an empty vocabulary";
  if (vocab_size_ > (std::uint64_t{1} << 31)) FT_USER_ERROR() << src << ": vocabulary of " << vocab_size_ << " ids is too large";

  bytes_to_id_.reserve(model_.id_to_bytes.size());
  for (std::size_t id = 0; id < model_.id_to_bytes.size(); ++id) {
    const std::string& bytes = model_.id_to_bytes[id];
    if (bytes.empty()) continue;
    const auto [it, inserted] = bytes_to_id_.emplace(bytes, static_cast<std::uint32_t>(id));
    if (!inserted)
      FT_USER_ERROR() << src << ": ids " << it->second << " and " << id << " are the same token " << printable(bytes);
  }
  for (unsigned b = 0; b < 256; ++b) {
    const auto it = bytes_to_id_.find(std::string(1, static_cast<char>(b)));
    if (it == bytes_to_id_.end())
      FT_USER_ERROR() << src << ": byte 0x" << std::hex << b << std::dec << " (" << byte_to_unicode_utf8(static_cast<std::uint8_t>(b))
                      << " in tokenizer.json's spelling) has no token: a byte-level BPE needs all 256 bytes in its "
                      << "vocabulary, or some text could not be encoded";
    byte_ids_[b] = it->second;
  }

  merge_rank_.reserve(model_.merges.size());
  for (std::size_t rank = 0; rank < model_.merges.size(); ++rank) {
    const BpeMerge& m = model_.merges[rank];
    for (const std::uint32_t id : {m.left, m.right, m.merged})
      if (id >= model_.id_to_bytes.size() || model_.id_to_bytes[id].empty())
        FT_USER_ERROR() << src << ": merge " << rank << " uses id " << id << ", which is not a vocabulary entry";
    if (model_.id_to_bytes[m.left] + model_.id_to_bytes[m.right] != model_.id_to_bytes[m.merged])
      FT_USER_ERROR() << src << ": merge " << rank << " makes id " << m.merged << " from ids " << m.left << " and "
                      << m.right << ", whose bytes do not concatenate to it";
    // A pair listed twice keeps its last rank, as Hugging Face's map does.
    merge_rank_.insert_or_assign(pair_key(m.left, m.right), std::make_pair(m.rank, m.merged));
  }

  for (const auto& a : model_.added_tokens) {
    if (a.content.empty()) FT_USER_ERROR() << src << ": added token " << a.id << " is empty";
    if (first_invalid_utf8(a.content) != std::string::npos)
      FT_USER_ERROR() << src << ": added token " << a.id << " is not valid UTF-8";
    const auto [it, inserted] = added_.emplace(a.content, a.id);
    if (!inserted && it->second != a.id)
      FT_USER_ERROR() << src << ": added token " << printable(a.content) << " has two ids, " << it->second << " and " << a.id;
    if (added_first_bytes_.find(a.content[0]) == std::string::npos) added_first_bytes_.push_back(a.content[0]);
  }
  for (const std::uint32_t id : model_.prefix_ids)
    if (id >= vocab_size_) FT_USER_ERROR() << src << ": the post-processor's token id " << id << " is outside the vocabulary";
  if (model_.eos_id >= vocab_size_) FT_USER_ERROR() << src << ": eos id " << model_.eos_id << " is outside the vocabulary";

  regex_ = std::make_unique<Regex>();
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  regex_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(model_.split_regex.data()), model_.split_regex.size(),
                               PCRE2_UTF | PCRE2_UCP, &error, &error_offset, nullptr);
  if (regex_->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    FT_USER_ERROR() << src << ": the pre-tokenizer regex does not compile with PCRE2 at offset " << error_offset << " ("
                    << reinterpret_cast<const char*>(message) << "): " << model_.split_regex;
  }
  // JIT is a speed-up only; the interpreter gives the same matches.
  (void)pcre2_jit_compile(regex_->code, PCRE2_JIT_COMPLETE);
  regex_->match = pcre2_match_data_create_from_pattern(regex_->code, nullptr);
  FT_CHECK(regex_->match != nullptr) << "pcre2_match_data_create_from_pattern";
}

void ByteLevelBpeTokenizer::encode_special(std::string_view text, std::vector<std::uint32_t>& ids,
                                           std::vector<std::size_t>& ends) const {
  encode(text, ids);  // added tokens are matched in the text already
  ids.erase(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(model_.prefix_ids.size()));
  ends.resize(ids.size());
  std::size_t offset = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::uint32_t id = ids[i];
    // Vocabulary tokens are nearly all of them; an added token is looked up.
    std::size_t length = id < model_.id_to_bytes.size() ? model_.id_to_bytes[id].size() : 0;
    if (length == 0) {
      const auto it = std::find_if(model_.added_tokens.begin(), model_.added_tokens.end(),
                                   [&](const BpeAddedToken& a) { return a.id == id; });
      FT_CHECK(it != model_.added_tokens.end()) << model_.source << ": id " << id << " has no text";
      length = it->content.size();
    }
    offset += length;
    ends[i] = offset;
  }
  FT_CHECK(offset == text.size()) << model_.source << ": token bytes add up to " << offset << " of " << text.size();
}

std::string ByteLevelBpeTokenizer::describe() const { return "byte-level BPE " + model_.source; }

std::int64_t ByteLevelBpeTokenizer::id_of(std::string_view token) const {
  if (const auto it = added_.find(std::string(token)); it != added_.end()) return it->second;
  if (const auto it = bytes_to_id_.find(std::string(token)); it != bytes_to_id_.end()) return it->second;
  return -1;
}

void ByteLevelBpeTokenizer::split_into(std::string_view text, std::vector<std::string_view>& pieces) const {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  PCRE2_SIZE start = 0;
  while (start < text.size()) {
    // The text was checked once (encode); PCRE2 would otherwise re-check the
    // whole subject at every call, quadratic in the document length.
    // NOTEMPTY: an empty match would cut nothing.
    const int rc = pcre2_match(regex_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK | PCRE2_NOTEMPTY,
                               regex_->match, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      FT_USER_ERROR() << model_.source << ": the pre-tokenizer regex failed at byte " << start << " of a document: "
                      << reinterpret_cast<const char*>(message);
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(regex_->match);
    if (ov[0] > start) pieces.push_back(text.substr(start, ov[0] - start));  // a gap is a piece of its own
    pieces.push_back(text.substr(ov[0], ov[1] - ov[0]));
    start = ov[1];
  }
  if (start < text.size()) pieces.push_back(text.substr(start));
}

std::vector<std::string> ByteLevelBpeTokenizer::split(std::string_view text) const {
  const std::size_t bad = first_invalid_utf8(text);
  if (bad != std::string_view::npos) FT_USER_ERROR() << "text is not valid UTF-8 at byte " << bad;
  std::vector<std::string_view> views;
  split_into(text, views);
  return {views.begin(), views.end()};
}

void ByteLevelBpeTokenizer::encode_piece(std::string_view piece, std::vector<std::uint32_t>& ids) const {
  if (piece.empty()) return;
  if (model_.ignore_merges) {
    if (const auto it = bytes_to_id_.find(std::string(piece)); it != bytes_to_id_.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  const std::size_t n = piece.size();
  std::vector<std::uint32_t> sym(n);
  std::vector<std::int64_t> prev(n), next(n);
  for (std::size_t i = 0; i < n; ++i) {
    sym[i] = byte_ids_[static_cast<unsigned char>(piece[i])];
    prev[i] = static_cast<std::int64_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<std::int64_t>(i + 1) : -1;
  }
  // Candidate merges, lowest rank first and leftmost among equal ranks.
  // Entries go stale when a neighbour merges; the ids they were made for
  // tell (the same check as Hugging Face's queue).
  struct Candidate {
    std::uint32_t rank;
    std::int64_t pos;
    std::uint32_t left, right, merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  const auto push = [&](std::int64_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    const auto it = merge_rank_.find(pair_key(sym[pos], sym[next[pos]]));
    if (it != merge_rank_.end()) queue.push({it->second.first, pos, sym[pos], sym[next[pos]], it->second.second});
  };
  for (std::size_t i = 0; i + 1 < n; ++i) push(static_cast<std::int64_t>(i));
  std::vector<bool> alive(n, true);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    if (!alive[c.pos] || next[c.pos] < 0 || sym[c.pos] != c.left || sym[next[c.pos]] != c.right) continue;
    const std::int64_t gone = next[c.pos];
    sym[c.pos] = c.merged;
    alive[gone] = false;
    next[c.pos] = next[gone];
    if (next[gone] >= 0) prev[next[gone]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  for (std::int64_t i = 0; i >= 0; i = next[i]) ids.push_back(sym[i]);
}

void ByteLevelBpeTokenizer::encode_text(std::string_view text, std::vector<std::uint32_t>& ids) const {
  pieces_.clear();
  split_into(text, pieces_);
  for (const std::string_view piece : pieces_) {
    std::string key(piece);
    if (const auto it = cache_.find(key); it != cache_.end()) {
      ids.insert(ids.end(), it->second.begin(), it->second.end());
      continue;
    }
    const std::size_t first = ids.size();
    encode_piece(piece, ids);
    if (cache_.size() >= kPieceCacheEntries) cache_.clear();
    cache_.emplace(std::move(key), std::vector<std::uint32_t>(ids.begin() + static_cast<std::ptrdiff_t>(first), ids.end()));
  }
}

void ByteLevelBpeTokenizer::encode(std::string_view text, std::vector<std::uint32_t>& ids) const {
  const std::size_t bad = first_invalid_utf8(text);
  if (bad != std::string_view::npos) {
    std::ostringstream m;
    m << "a document is not valid UTF-8 at its byte " << bad << " (" << describe()
      << " encodes Unicode text, as Hugging Face does)";
    throw InvalidTextError(m.str());
  }
  ids.assign(model_.prefix_ids.begin(), model_.prefix_ids.end());
  // Added tokens first, leftmost-longest; the text between them goes through
  // the pre-tokenizer and BPE.
  std::size_t done = 0;
  std::size_t i = added_first_bytes_.empty() ? text.size() : text.find_first_of(added_first_bytes_);
  while (i != std::string_view::npos && i < text.size()) {
    std::size_t best_len = 0;
    std::uint32_t best_id = 0;
    for (const auto& a : model_.added_tokens) {
      if (a.content.size() > best_len && text.compare(i, a.content.size(), a.content) == 0) {
        best_len = a.content.size();
        best_id = a.id;
      }
    }
    if (best_len == 0) {
      i = text.find_first_of(added_first_bytes_, i + 1);
      continue;
    }
    if (i > done) encode_text(text.substr(done, i - done), ids);
    ids.push_back(best_id);
    done = i + best_len;
    i = text.find_first_of(added_first_bytes_, done);
  }
  if (done < text.size()) encode_text(text.substr(done), ids);
}

std::string ByteLevelBpeTokenizer::decode(const std::vector<std::uint32_t>& ids) const {
  std::unordered_map<std::uint32_t, const std::string*> added_by_id;
  for (const auto& a : model_.added_tokens) added_by_id.emplace(a.id, &a.content);
  std::string text;
  for (const std::uint32_t id : ids) {
    if (const auto it = added_by_id.find(id); it != added_by_id.end()) {
      text += *it->second;
      continue;
    }
    FT_CHECK(id < model_.id_to_bytes.size() && !model_.id_to_bytes[id].empty())
        << model_.source << ": cannot decode id " << id << ", not a token";
    text += model_.id_to_bytes[id];
  }
  return text;
}

}  // namespace ftrain::data
