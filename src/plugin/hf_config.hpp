// Plugin SDK: the pieces every plugin's Hugging Face config.json conversion
// (ftrain_plugin.h export_hf_config / import_hf_config) needs, so that the
// plugins write numbers and read them back the same way.
#pragma once

#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "base/error.hpp"

namespace ftrain::hf_config {

using json = nlohmann::json;

// A configuration value as the consolidated file stores it (text) as the
// JSON scalar it stands for: true/false, an integer, a number, else a string.
inline json value_of(const std::string& text) {
  if (text == "true") return true;
  if (text == "false") return false;
  std::int64_t i = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), i);
  if (ec == std::errc() && p == text.data() + text.size()) return i;
  char* end = nullptr;
  const double d = std::strtod(text.c_str(), &end);
  if (!text.empty() && end == text.c_str() + text.size()) return d;
  return text;
}

// A JSON scalar as a deck word: floats as the shortest text that reads back
// to the same double.
inline std::string deck_word(const json& v) {
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_number_integer()) return std::to_string(v.get<std::int64_t>());
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

// The UserError for a config.json value the plugin does not implement:
// "SOURCE: KEY = VALUE: WHY" (VALUE "(absent)" when the key is missing).
[[noreturn]] inline void refuse(const json& config, const std::string& source, const std::string& key,
                                const std::string& why) {
  FT_USER_ERROR() << source << ": " << key << " = " << (config.contains(key) ? config[key].dump() : "(absent)")
                  << ": " << why;
}

}  // namespace ftrain::hf_config
