// libFuzzer target for the safetensors header parser.
//
// The input is a whole file's bytes. The parser must either accept them or
// throw ftrain::UserError; any other exception (an internal FT_CHECK, a
// std::bad_alloc from an unchecked size, a nlohmann type error) escapes and
// libFuzzer reports it, as do the sanitizers for memory errors.
// Build: clang++ -fsanitize=fuzzer,address,undefined (FTRAIN_FUZZ=ON).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ckpt/safetensors.hpp"
#include "base/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto header =
        ftrain::ckpt::parse_safetensors_header(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
    // Accepted headers must describe ranges inside the buffer.
    for (const auto& t : header.tensors)
      if (t.end > header.data_bytes || t.begin > t.end || header.data_start + header.data_bytes != size)
        __builtin_trap();
  } catch (const ftrain::UserError&) {
  }
  return 0;
}
