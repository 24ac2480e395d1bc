// libFuzzer target for the input deck parser.
//
// Any input must either parse or raise ftrain::Error with a one-line
// message; any other exception, a crash, or a sanitizer report is a finding.
// Includes resolve from the current directory, so run the fuzzer from a
// scratch directory (see tests/fuzz/CMakeLists.txt for the command).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "base/error.hpp"
#include "deck/parser.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  // One command-line variable so that the override path is exercised too.
  const ftrain::DeckVariables vars = {{"cli", "bf16"}};
  try {
    const ftrain::RunConfig config = ftrain::parse_deck_string(text, "fuzz.in", vars);
    for (const std::string& line : config.resolved_lines) {
      if (line.find('\n') != std::string::npos) std::abort();  // echo must stay one line
    }
  } catch (const ftrain::Error& e) {
    if (std::string_view(e.what()).find('\n') != std::string_view::npos) std::abort();
  }
  return 0;
}
