// Deck diagnostics: how the parser words its errors.
//
// Every deck error is one line, "FILE:LINE: message", that names the
// offending word and says what was expected. Words from the deck are echoed
// through quote_word() so that control characters, odd bytes or a huge token
// can never break the one-line promise. "Did you mean" suggestions use the
// optimal-string-alignment (restricted Damerau-Levenshtein) distance, so a
// swapped pair of letters counts as one edit.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.hpp"
#include "deck/config.hpp"

namespace ftrain::deck {

// 'word' with non-printable bytes escaped as \xNN and long words shortened.
std::string quote_word(std::string_view word);

// Edit distance where insertion, deletion, substitution and transposition of
// two adjacent characters each cost 1.
std::size_t edit_distance(std::string_view a, std::string_view b);

// " (did you mean 'x'?)" for the closest candidate within a distance that
// scales with the word length, or "" when nothing is close. A candidate that
// differs only in letter case always qualifies (FULL_SHARD -> full_shard).
std::string did_you_mean(std::string_view word, const std::vector<std::string_view>& candidates);

// Throws ftrain::UserError("FILE:LINE: message").
[[noreturn]] void fail_at(const DeckLocation& where, const std::string& message);

}  // namespace ftrain::deck
