// Deck error wording and "did you mean" suggestions (see diagnostics.hpp).
#include "deck/diagnostics.hpp"

#include <algorithm>
#include <cctype>
#include <limits>

namespace ftrain::deck {

std::string quote_word(std::string_view word) {
  constexpr std::size_t kMaxShown = 80;  // a runaway token must not flood the log line
  std::string out = "'";
  const std::size_t shown = std::min(word.size(), kMaxShown);
  for (std::size_t i = 0; i < shown; ++i) {
    const auto c = static_cast<unsigned char>(word[i]);
    if (c < 0x20 || c == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (shown < word.size()) out += "...";
  out += "'";
  return out;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  // Three rolling rows of the optimal-string-alignment table.
  std::vector<std::size_t> before(b.size() + 1), previous(b.size() + 1), current(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        current[j] = std::min(current[j], before[j - 2] + 1);
      }
    }
    std::swap(before, previous);
    std::swap(previous, current);
  }
  return previous[b.size()];
}

namespace {
std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}
}  // namespace

std::string did_you_mean(std::string_view word, const std::vector<std::string_view>& candidates) {
  // Suggestions are for typos; a long token is something else entirely, and
  // the quadratic distance on it would only cost time.
  if (word.empty() || word.size() > 64) return "";
  const std::string word_lower = lower(word);
  // Allow about one edit per three letters, at least one and at most three.
  const std::size_t allowed = std::clamp<std::size_t>(word.size() / 3, 1, 3);
  std::size_t best = std::numeric_limits<std::size_t>::max();
  std::string_view best_candidate;
  for (std::string_view candidate : candidates) {
    const std::size_t d = edit_distance(word_lower, lower(candidate));
    if (d < best) {
      best = d;
      best_candidate = candidate;
    }
  }
  if (best_candidate.empty() || best > allowed || best_candidate == word) return "";
  return " (did you mean '" + std::string(best_candidate) + "'?)";
}

void fail_at(const DeckLocation& where, const std::string& message) {
  FT_USER_ERROR() << where.str() << ": " << message;
}

}  // namespace ftrain::deck
