// Deck lexer: physical lines -> logical lines -> words.
//
// The grammar is LAMMPS's (doc/src/Commands_parse.rst), in two passes:
//  1. split_logical_lines: '#' starts a comment unless inside quotes; a line
//     whose last non-blank character (after the comment is removed) is '&'
//     continues on the next one (joined with one space); CR before LF and a
//     UTF-8 byte-order mark are ignored; other control characters are
//     errors. A logical line is numbered by its first physical line.
//  2. split_words: words are separated by blanks; '...' is literal, "..." is
//     one word with ${name} substituted; quoted and unquoted pieces that
//     touch form one word (a"b c"d -> ab cd). Outside quotes a substituted
//     value is split at blanks (so a variable can hold several words) but
//     its quotes, '#' and '$' are never re-read: substitution happens once.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace ftrain::deck {

struct LogicalLine {
  int line = 0;  // first physical line, 1-based
  std::string text;
};

// file names the source in errors ("FILE:LINE: ...").
std::vector<LogicalLine> split_logical_lines(std::string_view text, const std::string& file);

// Returns the value of variable `name`, or throws (undefined variable).
using VariableExpander = std::function<std::string(std::string_view name)>;

std::vector<std::string> split_words(const LogicalLine& line, const std::string& file,
                                     const VariableExpander& expand);

// True when `name` is a valid variable name: [A-Za-z_][A-Za-z0-9_]*.
bool is_variable_name(std::string_view name);

}  // namespace ftrain::deck
