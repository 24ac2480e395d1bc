// The message of the ftrain::Error that `body` throws, or "<no error>": for
// tests that match on what an error says.
#pragma once

#include <functional>
#include <string>

#include "base/error.hpp"

namespace ftrain::testing {

inline std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace ftrain::testing
