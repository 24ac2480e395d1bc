// Deck driver: files, includes, variables, one-per-deck commands and the
// checks that span several commands. Words come from lexer.*, command
// arguments are validated by the table in commands.*.
#include "deck/parser.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <optional>

#include "base/error.hpp"
#include "deck/commands.hpp"
#include "deck/diagnostics.hpp"
#include "deck/lexer.hpp"

namespace ftrain {

namespace deck {
namespace {

namespace fs = std::filesystem;

// A deck is a page of text; anything this large is a wrong path, and reading
// it whole would only waste memory.
constexpr std::size_t kMaxDeckBytes = std::size_t{16} << 20;
constexpr std::size_t kMaxIncludeDepth = 32;

bool has_control_character(std::string_view text) {
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\t') || u == 0x7f) return true;
  }
  return false;
}

int count_lines(std::string_view text) {
  int lines = 0;
  for (char c : text) lines += c == '\n' ? 1 : 0;
  if (!text.empty() && text.back() != '\n') ++lines;
  return lines > 0 ? lines : 1;
}

// The words of a command, quoted where needed so that the echo reads back as
// the same words.
std::string render_words(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& word : words) {
    if (!out.empty()) out += ' ';
    const bool plain = !word.empty() && word.find_first_of(" \t#'\"$&") == std::string::npos;
    if (plain) {
      out += word;
    } else if (word.find('\'') == std::string::npos) {
      out += "'" + word + "'";
    } else {
      out += "\"" + word + "\"";
    }
  }
  return out;
}

// Same file, however it was spelled: used to detect include loops.
fs::path identity_of(const fs::path& path) {
  std::error_code ec;
  fs::path canonical = fs::weakly_canonical(path, ec);
  if (ec) canonical = path.lexically_normal();
  return canonical;
}

// Reads a whole deck file. `where` is the include command (nullopt for the
// top-level deck, whose errors are "PATH: ...").
std::string read_deck_file(const fs::path& path, const std::string& shown,
                           const std::optional<DeckLocation>& where) {
  auto fail = [&](const std::string& why) {
    if (where) fail_at(*where, "cannot read include file " + quote_word(shown) + ": " + why);
    FT_USER_ERROR() << shown << ": cannot read input deck: " << why;
  };
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) fail("no such file");
  if (!fs::is_regular_file(status)) fail("not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open it");
  std::string text(kMaxDeckBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) fail("read error");
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > kMaxDeckBytes) fail("larger than 16 MiB, which is not a deck");
  return text;
}

class DeckReader {
 public:
  explicit DeckReader(const DeckVariables& command_line_vars) {
    for (const auto& [name, value] : command_line_vars) {
      if (!is_variable_name(name)) {
        FT_USER_ERROR() << "command line: -var " << quote_word(name)
                        << " is not a variable name (letters, digits and '_', not starting "
                           "with a digit)";
      }
      if (has_control_character(value)) {
        FT_USER_ERROR() << "command line: the value of -var " << name
                        << " contains a control character";
      }
      // A later -var of the same name wins, as with most command lines.
      variables_[name] = Variable{value, DeckLocation{"command line", 0}, true};
    }
  }

  void read_text(std::string_view text, const std::string& shown, const fs::path& identity,
                 const fs::path& base_dir) {
    if (chain_.empty()) end_of_deck_ = DeckLocation{shown, count_lines(text)};
    chain_.push_back(Frame{shown, identity});
    for (const LogicalLine& line : split_logical_lines(text, shown)) run_line(line, shown, base_dir);
    chain_.pop_back();
  }

  RunConfig finish(const std::string& deck_path, MissingPaths missing_paths) {
    for (const Command& command : command_table()) {
      if (command.required && seen_.find(command.name) == seen_.end()) {
        fail_at(end_of_deck_, "missing required command '" + std::string(command.name) +
                                  "' in deck " + quote_word(end_of_deck_.file) + " (e.g. '" +
                                  std::string(command.example) + "')");
      }
    }
    if (const auto schedule = seen_.find("schedule"); schedule != seen_.end()) {
      const ScheduleSection& s = config_.schedule;
      if (s.min_lr > config_.optimizer.lr) {
        fail_at(schedule->second, "'min_lr' " + format_number(s.min_lr) +
                                      " is larger than the optimizer's lr " +
                                      format_number(config_.optimizer.lr));
      }
      if (!s.warmup_ratio && s.warmup_steps > config_.max_steps) {
        fail_at(schedule->second, "'warmup_steps' " + std::to_string(s.warmup_steps) +
                                      " is more than max_steps " +
                                      std::to_string(config_.max_steps) + " (at " +
                                      seen_.at("max_steps").str() + ")");
      }
    }
    // A -var that no ${NAME} reads changes nothing: most often a misspelt
    // name (-var data_dri ...), which would otherwise pass silently.
    std::vector<std::string_view> read_names(read_.begin(), read_.end());
    for (const auto& [name, variable] : variables_) {
      if (!variable.from_command_line || read_.count(name) != 0) continue;
      config_.warnings.push_back("command line: -var " + name + " is never read by the deck (no ${" + name +
                                 "} in it), so it changes nothing" + did_you_mean(name, read_names));
    }
    if (missing_paths == MissingPaths::fail) throw_all(config_.missing_paths);
    config_.deck_path = deck_path;
    return std::move(config_);
  }

 private:
  struct Variable {
    std::string value;
    DeckLocation where;
    bool from_command_line = false;
  };
  struct Frame {
    std::string shown;
    fs::path identity;
  };

  std::string expand(std::string_view name, const DeckLocation& where) {
    read_.emplace(name);
    if (const auto it = variables_.find(name); it != variables_.end()) return it->second.value;
    const std::string key(name);
    if (const char* env = std::getenv(key.c_str()); env != nullptr) {
      if (has_control_character(env)) {
        fail_at(where, "environment variable " + quote_word(key) + " used as '${" + key +
                           "}' contains a control character");
      }
      return env;
    }
    std::vector<std::string_view> known;
    for (const auto& entry : variables_) known.push_back(entry.first);
    fail_at(where, "undefined variable '${" + key + "}'" + did_you_mean(name, known) +
                       " (define it above with 'variable " + key + " VALUE', or pass -var " +
                       key + " VALUE on the command line)");
  }

  void run_line(const LogicalLine& line, const std::string& file, const fs::path& base_dir) {
    const DeckLocation where{file, line.line};
    const std::vector<std::string> words =
        split_words(line, file, [&](std::string_view name) { return expand(name, where); });
    if (words.empty()) return;  // e.g. a line that was only ${empty}

    const Command* command = find_command(words[0]);
    if (command == nullptr) {
      fail_at(where, "unknown command " + quote_word(words[0]) +
                         did_you_mean(words[0], command_names()));
    }
    // `init adapter DIR` (LoRA adapters) sits beside the base's `init ...`:
    // each may be given once.
    const std::string once_key = command->name == "init" && words.size() > 1 && words[1] == "adapter"
                                     ? std::string("init adapter")
                                     : std::string(command->name);
    if (!command->repeatable) {
      if (const auto it = seen_.find(once_key); it != seen_.end()) {
        fail_at(where, "'" + once_key + "' was already given at " +
                           it->second.str() +
                           " (each command appears once; use a variable to vary a value)");
      }
    }
    const ParsedCommand parsed = parse_command(*command, words, where);
    config_.missing_paths.insert(config_.missing_paths.end(), parsed.missing_paths.begin(),
                                 parsed.missing_paths.end());
    check_command(parsed);
    if (!command->repeatable) seen_.emplace(once_key, where);
    config_.resolved_lines.push_back(where.str() + ": " + render_words(words));

    if (command->name == "variable") {
      define(parsed);
    } else if (command->name == "include") {
      include(parsed, base_dir);
    } else {
      apply_command(parsed, config_);
    }
  }

  // Rules between keywords of one command that the table cannot express.
  static void check_command(const ParsedCommand& parsed) {
    if (parsed.command->name == "schedule" && parsed.find("warmup_steps") != nullptr &&
        parsed.find("warmup_ratio") != nullptr) {
      fail_at(parsed.where, "'schedule' takes 'warmup_steps' or 'warmup_ratio', not both");
    }
  }

  void define(const ParsedCommand& parsed) {
    const std::string& name = parsed.values.at(0).second.text;
    const std::string& value = parsed.values.at(1).second.text;
    if (const auto it = variables_.find(name); it != variables_.end()) {
      if (it->second.from_command_line) {  // the command line overrides the deck
        config_.resolved_lines.back() += "  # overridden by -var " + name;
        return;
      }
      fail_at(parsed.where, "variable " + quote_word(name) + " already defined at " +
                                it->second.where.str() + " (override it with -var " + name +
                                " VALUE instead)");
    }
    variables_.emplace(name, Variable{value, parsed.where, false});
  }

  void include(const ParsedCommand& parsed, const fs::path& base_dir) {
    const std::string& given = parsed.values.at(0).second.text;
    const fs::path requested(given);
    const fs::path resolved =
        requested.is_absolute() ? requested : (base_dir / requested).lexically_normal();
    const std::string shown = resolved.string();
    const fs::path identity = identity_of(resolved);
    for (const Frame& frame : chain_) {
      if (frame.identity == identity) {
        std::string loop;
        for (const Frame& f : chain_) loop += f.shown + " -> ";
        fail_at(parsed.where, "include loop: " + loop + shown);
      }
    }
    if (chain_.size() >= kMaxIncludeDepth) {
      fail_at(parsed.where, "include " + quote_word(given) + " nests deeper than " +
                                std::to_string(kMaxIncludeDepth) + " files");
    }
    const std::string text = read_deck_file(resolved, shown, parsed.where);
    read_text(text, shown, identity, resolved.parent_path());
  }

  std::map<std::string, Variable, std::less<>> variables_;
  std::set<std::string, std::less<>> read_;  // every ${NAME} expanded so far
  std::vector<Frame> chain_;
  std::map<std::string, DeckLocation, std::less<>> seen_;  // by command (and "init adapter")
  DeckLocation end_of_deck_;
  RunConfig config_;
};

}  // namespace
}  // namespace deck

void throw_all(const std::vector<std::string>& messages) {
  if (messages.empty()) return;
  if (messages.size() == 1) throw UserError(messages[0]);
  std::string all = std::to_string(messages.size()) + " problems:";
  for (const auto& m : messages) all += "\n  " + m;
  throw UserError(all);
}

RunConfig parse_deck_file(const std::string& path, const DeckVariables& command_line_vars,
                          MissingPaths missing_paths) {
  namespace fs = std::filesystem;
  deck::DeckReader reader(command_line_vars);
  const fs::path file(path);
  const std::string text = deck::read_deck_file(file, path, std::nullopt);
  reader.read_text(text, path, deck::identity_of(file), file.parent_path());
  return reader.finish(path, missing_paths);
}

RunConfig parse_deck_string(std::string_view text, const std::string& virtual_file_name,
                            const DeckVariables& command_line_vars, MissingPaths missing_paths) {
  deck::DeckReader reader(command_line_vars);
  reader.read_text(text, virtual_file_name, deck::identity_of(virtual_file_name), {});
  return reader.finish(virtual_file_name, missing_paths);
}

}  // namespace ftrain
