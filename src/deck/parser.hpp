// Input deck parser: deck text -> RunConfig.
//
// Grammar (LAMMPS-like; details in lexer.hpp): one
// command per line, '#' comments, '&' continuation, '...' and "..." quotes,
// ${name} variables, include FILE. The commands and their keywords are
// defined once, in the command table (commands.hpp), which also renders
// the reference page (deck_reference_markdown).
//
// Variables: a -var NAME VALUE from the command line wins over the deck's
// `variable NAME VALUE` (which is then ignored), which wins over the
// environment. Defining a name twice in the deck is an error, unless the
// command line sets it. A reference sees only definitions above it.
//
// Every error is a ftrain::UserError with a one-line message
// "FILE:LINE: ..." naming the offending word and what was expected.
// Each command except variable and include may appear once.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "deck/config.hpp"

namespace ftrain {

using DeckVariables = std::vector<std::pair<std::string, std::string>>;

// What the parse does with input paths that do not exist (data, weights,
// adapters): `fail` throws one UserError naming all of them once the whole
// deck has parsed; `defer` leaves them in RunConfig::missing_paths, for a
// caller that reports them together with its own checks (ftrain --check).
enum class MissingPaths { fail, defer };

// Reads the deck at `path`. Includes are relative to the including file's
// directory; data and weight paths to the current directory.
RunConfig parse_deck_file(const std::string& path, const DeckVariables& command_line_vars,
                          MissingPaths missing_paths = MissingPaths::fail);

// Parses deck text; `virtual_file_name` names it in errors and
// resolved_lines. Includes are resolved relative to the current directory.
RunConfig parse_deck_string(std::string_view text, const std::string& virtual_file_name,
                            const DeckVariables& command_line_vars, MissingPaths missing_paths = MissingPaths::fail);

// One UserError listing every message ("N problems:" then one per line when
// there are several); nothing when `messages` is empty.
void throw_all(const std::vector<std::string>& messages);

// The deck reference (share/doc/deck.md) rendered from the command table:
// syntax, then every command with its forms, keywords, defaults (read from a
// default RunConfig), help and the FSDP / Accelerate option it maps to.
std::string deck_reference_markdown();

}  // namespace ftrain
