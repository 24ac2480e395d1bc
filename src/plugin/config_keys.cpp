#include "plugin/config_keys.hpp"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "base/error.hpp"
#include "deck/diagnostics.hpp"

namespace ftrain::plugin_config {

std::int64_t positive_int(std::string_view model, std::string_view key, const std::string& value) {
  std::int64_t out = 0;
  const char* end = value.data() + value.size();
  auto [ptr, ec] = std::from_chars(value.data(), end, out);
  if (ec != std::errc() || ptr != end || out <= 0)
    FT_USER_ERROR() << model << " hyperparameter '" << key << "' must be a positive integer, got '" << value << "'";
  return out;
}

double positive_number(std::string_view model, std::string_view key, const std::string& value) {
  errno = 0;
  char* end = nullptr;
  const double out = std::strtod(value.c_str(), &end);
  if (value.empty() || end != value.c_str() + value.size() || errno == ERANGE || !std::isfinite(out) || out <= 0)
    FT_USER_ERROR() << model << " hyperparameter '" << key << "' must be a positive number, got '" << value << "'";
  return out;
}

bool boolean(std::string_view model, std::string_view key, const std::string& value) {
  if (value == "true" || value == "1" || value == "yes" || value == "on") return true;
  if (value == "false" || value == "0" || value == "no" || value == "off") return false;
  FT_USER_ERROR() << model << " hyperparameter '" << key << "' must be true or false, got '" << value << "'";
}

void refuse_unknown_key(std::string_view model, std::string_view key, const std::vector<std::string_view>& known,
                        const std::vector<KeyAlias>& aliases) {
  for (const KeyAlias& a : aliases)
    if (a.alias == key)
      FT_USER_ERROR() << "unknown " << model << " hyperparameter '" << key << "' (did you mean '" << a.key << "'?)";
  const std::string suggestion = deck::did_you_mean(key, known);
  if (!suggestion.empty()) FT_USER_ERROR() << "unknown " << model << " hyperparameter '" << key << "'" << suggestion;
  std::ostringstream list;
  for (std::string_view k : known) list << (list.tellp() > 0 ? ", " : "") << k;
  FT_USER_ERROR() << "unknown " << model << " hyperparameter '" << key << "'; known hyperparameters: " << list.str();
}

std::string format_number(double value) {
  if (value == std::floor(value) && std::abs(value) < 1e15) return std::to_string(static_cast<std::int64_t>(value));
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, end);
}

}  // namespace ftrain::plugin_config
