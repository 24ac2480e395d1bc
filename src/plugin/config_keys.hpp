// Plugin SDK: reading a model's hyperparameter overrides (the deck's
// `model NAME ... key value` words) the same way in every plugin, so that a
// bad value or an unknown key gets the same answer whichever model it names.
//
//   unknown llama hyperparameter 'hiden_size' (did you mean 'hidden_size'?)
//   unknown vit hyperparameter 'batch'; known hyperparameters: image_size, ...
//   llama hyperparameter 'hidden_size' must be a positive integer, got 'abc'
//
// The suggestion follows the deck's rule (deck/diagnostics.hpp: about one
// edit per three letters, a swapped pair counting as one); names from other
// codebases that are too far from the key they mean for that rule are given
// as aliases.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ftrain::plugin_config {

// `model` is the plugin's name ("llama"), `key` the word as the deck wrote it.
std::int64_t positive_int(std::string_view model, std::string_view key, const std::string& value);
double positive_number(std::string_view model, std::string_view key, const std::string& value);
// true/1/yes/on, false/0/no/off.
bool boolean(std::string_view model, std::string_view key, const std::string& value);

// A name users bring from elsewhere (Meta's `dim`) and the key it means.
struct KeyAlias {
  std::string_view alias;
  std::string_view key;
};

// Throws the UserError for an unknown key: the alias's key, else the
// closest known key when it is plausibly a typo, else every known key.
[[noreturn]] void refuse_unknown_key(std::string_view model, std::string_view key,
                                     const std::vector<std::string_view>& known,
                                     const std::vector<KeyAlias>& aliases = {});

// A hyperparameter as configuration text (the consolidated file's
// attributes): whole numbers as integers ("500000", not "5e+05"), others as
// the shortest text that reads back to the same double ("1e-05", "0.02").
std::string format_number(double value);

}  // namespace ftrain::plugin_config
