// The deck's command table: one entry per command, the single source of truth
// for parsing, validation, defaults and the generated reference
// (deck_reference_markdown), so the documentation cannot drift from the code.
//
// A command has one or more forms. A command with several forms (init random
// | init safetensors) picks one by its first word; a single form may have an
// empty selector word. A form has positional parameters, then keyword/value
// pairs in any order. Each parameter knows its value kind (which fixes the
// validation and the "expected ..." wording), how to store itself into
// RunConfig, and how to read its default back out of a default RunConfig.
// A choice's words are its enum's (choices.hpp, via choices_of): RunConfig
// holds the enum value, and cross-field rules are applied when the deck is
// resolved into settings (train/run_settings.hpp), not here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "deck/choices.hpp"
#include "deck/config.hpp"

namespace ftrain::deck {

enum class ValueKind {
  positive_int,      // integer >= 1
  non_negative_int,  // unsigned 64-bit integer >= 0 (seed)
  positive_number,   // finite number > 0
  non_negative_number,
  fraction,          // finite number in [0, 1)
  choice,            // one of Param::choices
  on_off,            // on | off
  existing_path,     // a file or directory that exists (relative to the current directory)
  path,              // any non-empty path (checked later or by its user)
  name,              // a variable name
  text,              // anything
};

struct Value {
  std::string text;  // the word as written (after substitution)
  std::int64_t integer = 0;
  std::uint64_t unsigned_integer = 0;
  double number = 0.0;
  bool flag = false;
  int choice = -1;  // choice: the enum value of the word (Choice::value)

  // The choice as its enum (the parameter's choices were built by choices_of<E>).
  template <DeckChoice E>
  E as() const {
    FT_CHECK(choice >= 0 && static_cast<std::size_t>(choice) < ChoiceWords<E>::size)
        << "deck value '" << text << "' read as the wrong choice enum";
    return static_cast<E>(choice);
  }
};

struct Choice {
  std::string_view word;
  std::string_view maps_to = {};  // the PyTorch FSDP / Accelerate spelling, if any
  int value = -1;                 // the enum value the word stands for
};

// A choice parameter's words from the enum's word list (choices.hpp), each with
// its PyTorch spelling, given in enum order.
template <DeckChoice E>
std::vector<Choice> choices_of(std::initializer_list<std::string_view> maps_to) {
  FT_CHECK(maps_to.size() == ChoiceWords<E>::size) << "choices_of: " << maps_to.size() << " spellings for "
                                                   << ChoiceWords<E>::size << " words";
  std::vector<Choice> out;
  std::size_t i = 0;
  for (std::string_view spelling : maps_to) {
    out.push_back(Choice{ChoiceWords<E>::list[i], spelling, static_cast<int>(i)});
    ++i;
  }
  return out;
}

struct Param {
  std::string_view name;  // keyword; for positionals, the placeholder (N, PATH)
  ValueKind kind;
  std::string_view help;
  std::string_view maps_to = {};
  std::vector<Choice> choices = {};
  bool required = false;  // keywords only: positionals are always required
  void (*set)(RunConfig&, const Value&) = nullptr;
  std::string (*default_of)(const RunConfig&) = nullptr;  // nullptr: no default to show
};

struct ParsedCommand;

struct Form {
  std::string_view word;  // selector ("random"); empty for a command's only form
  std::string_view help;
  std::vector<Param> positionals = {};
  std::vector<Param> keywords = {};
  // model: keywords not in the table are collected in ParsedCommand::extra
  // (KEY VALUE pairs for the plugin) instead of being errors.
  bool passthrough_keywords = false;
  // Runs after the parameters' setters: records the form and the location.
  void (*apply)(RunConfig&, const ParsedCommand&) = nullptr;
};

struct Command {
  std::string_view name;
  std::string_view help;
  std::string_view maps_to;
  std::vector<Form> forms;
  bool required = false;    // the deck is incomplete without it
  bool repeatable = false;  // variable, include: may appear any number of times
  std::string_view example;
};

struct ParsedCommand {
  const Command* command = nullptr;
  const Form* form = nullptr;
  std::vector<std::pair<const Param*, Value>> values;
  std::vector<std::pair<std::string, std::string>> extra;
  DeckLocation where;
  // "FILE:LINE: file 'x' given to '...' does not exist ...", one per
  // existing_path value that does not exist (collected, not thrown).
  std::vector<std::string> missing_paths;

  const Value* find(std::string_view param_name) const;
};

const std::vector<Command>& command_table();
const Command* find_command(std::string_view name);
std::vector<std::string_view> command_names();

// Validates words[1..] against the command's table entry (words[0] names the
// command, already looked up). Throws UserError "FILE:LINE: ..." on the first
// problem; a path of kind existing_path that does not exist is noted in
// missing_paths instead.
ParsedCommand parse_command(const Command& command, const std::vector<std::string>& words,
                            const DeckLocation& where);

// Stores a parsed command into the config: setters, then the form's apply.
void apply_command(const ParsedCommand& parsed, RunConfig& config);

// "a positive integer", "one of a|b|c": the wording used in errors and docs.
std::string describe_kind(const Param& param);
// Placeholder for a keyword's value in a synopsis: N, X, on|off, PATH, ...
std::string value_placeholder(const Param& param);
// "optimizer adamw [lr X] [beta1 B] ..." for one form.
std::string synopsis(const Command& command, const Form& form);
// "q_proj,v_proj" or "all-linear": the lora targets as the deck writes them.
std::string lora_targets_text(const LoraSection& lora);
// Shortest text that reads back as the same double ("0.0003", "1e-08").
std::string format_number(double value);

}  // namespace ftrain::deck
