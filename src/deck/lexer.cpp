// Deck lexer (see lexer.hpp for the grammar).
#include "deck/lexer.hpp"

#include "deck/diagnostics.hpp"

namespace ftrain::deck {

namespace {

bool is_blank(char c) { return c == ' ' || c == '\t'; }

bool is_control(char c) {
  const auto u = static_cast<unsigned char>(c);
  return (u < 0x20 && c != '\t') || u == 0x7f;
}

std::string hex_byte(char c) {
  static constexpr char kHex[] = "0123456789abcdef";
  const auto u = static_cast<unsigned char>(c);
  return std::string("0x") + kHex[u >> 4] + kHex[u & 0xf];
}

void trim_trailing_blanks(std::string& s) {
  while (!s.empty() && is_blank(s.back())) s.pop_back();
}

bool only_blanks(std::string_view s) {
  for (char c : s) {
    if (!is_blank(c)) return false;
  }
  return true;
}

}  // namespace

bool is_variable_name(std::string_view name) {
  if (name.empty()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    const bool digit = c >= '0' && c <= '9';
    if (!(letter || (digit && i > 0))) return false;
  }
  return true;
}

std::vector<LogicalLine> split_logical_lines(std::string_view text, const std::string& file) {
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);

  std::vector<LogicalLine> lines;
  std::string pending;           // the logical line being assembled
  int pending_line = 0;          // its first physical line
  bool continuing = false;       // the previous physical line ended in '&'
  char quote = 0;                // open quote character, carried across '&'
  int quote_line = 0;
  int physical = 0;

  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view raw = text.substr(pos, end - pos);
    pos = end + 1;
    ++physical;
    if (!raw.empty() && raw.back() == '\r') raw.remove_suffix(1);

    if (!continuing) {
      pending.clear();
      pending_line = physical;
    }
    std::string segment;
    for (char c : raw) {
      if (is_control(c)) {
        fail_at({file, physical}, "unexpected control character " + hex_byte(c) +
                                      " (a deck is plain text: words, quotes, '#' comments)");
      }
      if (quote != 0) {
        if (c == quote) quote = 0;
      } else if (c == '\'' || c == '"') {
        quote = c;
        quote_line = physical;
      } else if (c == '#') {
        break;
      }
      segment += c;
    }
    trim_trailing_blanks(segment);
    continuing = !segment.empty() && segment.back() == '&';
    if (continuing) {
      segment.pop_back();
      pending += segment;
      pending += ' ';
      continue;
    }
    if (quote != 0) {
      fail_at({file, quote_line},
              std::string("unterminated quote: ") + quote + " opened on this line is never closed"
              " (quotes must close on the same line, or the line must end with '&')");
    }
    pending += segment;
    if (!only_blanks(pending)) lines.push_back({pending_line, pending});
  }
  if (continuing) {
    fail_at({file, physical}, "the last line ends with '&' but no line follows to continue it");
  }
  return lines;
}

std::vector<std::string> split_words(const LogicalLine& line, const std::string& file,
                                     const VariableExpander& expand) {
  const DeckLocation where{file, line.line};
  const std::string& text = line.text;
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  auto finish_word = [&] {
    if (in_word) words.push_back(std::move(word));
    word.clear();
    in_word = false;
  };

  // Reads "${name}" starting at text[i] == '$', returns the value and moves
  // i to the closing brace.
  auto read_reference = [&](std::size_t& i) {
    const std::size_t close = text.find('}', i + 2);
    if (close == std::string::npos) {
      fail_at(where, "unterminated variable reference " + quote_word(text.substr(i)) +
                         " (expected '${name}')");
    }
    const std::string name = text.substr(i + 2, close - i - 2);
    if (!is_variable_name(name)) {
      fail_at(where, "bad variable reference " + quote_word(text.substr(i, close - i + 1)) +
                         " (a name is letters, digits and '_', not starting with a digit)");
    }
    i = close;
    return expand(name);
  };

  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (is_blank(c)) {
      finish_word();
    } else if (c == '\'') {
      const std::size_t close = text.find('\'', i + 1);
      if (close == std::string::npos) {
        fail_at(where, "unterminated quote: ' opened on this line is never closed");
      }
      word.append(text, i + 1, close - i - 1);
      in_word = true;
      i = close;
    } else if (c == '"') {
      in_word = true;
      std::size_t j = i + 1;
      for (; j < text.size() && text[j] != '"'; ++j) {
        if (text[j] == '$' && j + 1 < text.size() && text[j + 1] == '{') {
          word += read_reference(j);
        } else {
          word += text[j];
        }
      }
      if (j >= text.size()) {
        fail_at(where, "unterminated quote: \" opened on this line is never closed");
      }
      i = j;
    } else if (c == '$' && i + 1 < text.size() && text[i + 1] == '{') {
      // Unquoted: the value's blanks separate words, as if typed in place.
      for (char v : read_reference(i)) {
        if (is_blank(v)) {
          finish_word();
        } else {
          word += v;
          in_word = true;
        }
      }
    } else {
      word += c;
      in_word = true;
    }
  }
  finish_word();
  return words;
}

}  // namespace ftrain::deck
