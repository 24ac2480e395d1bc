// CRC-32C (see crc32c.hpp): the SSE4.2 crc32 instruction where the CPU has
// it (chosen once at run time, so one build runs everywhere), else slicing by
// 8 with tables built at first use. Both give the standard CRC-32C
// (reflected polynomial 0x82F63B78, initial and final XOR 0xFFFFFFFF):
// crc32c("123456789") == 0xE3069283.
#include "ckpt/crc32c.hpp"

#include <array>
#include <cstring>

namespace ftrain::ckpt {

namespace {

constexpr std::uint32_t kPolynomial = 0x82F63B78u;

struct Tables {
  std::array<std::array<std::uint32_t, 256>, 8> t{};
  Tables() {
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPolynomial : c >> 1;
      t[0][i] = c;
    }
    for (std::uint32_t i = 0; i < 256; ++i)
      for (std::size_t s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
  }
};

std::uint32_t crc32c_table(const unsigned char* p, std::size_t n, std::uint32_t c) {
  static const Tables tables;
  const auto& t = tables.t;
  while (n >= 8) {
    std::uint64_t word;
    std::memcpy(&word, p, 8);  // little-endian: the reflected CRC eats low bytes first
    word ^= c;
    c = t[7][word & 0xFF] ^ t[6][(word >> 8) & 0xFF] ^ t[5][(word >> 16) & 0xFF] ^ t[4][(word >> 24) & 0xFF] ^
        t[3][(word >> 32) & 0xFF] ^ t[2][(word >> 40) & 0xFF] ^ t[1][(word >> 48) & 0xFF] ^ t[0][word >> 56];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xFF];
  return c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FTRAIN_CRC32C_SSE42 1
// Three independent streams would hide the instruction's 3-cycle latency;
// one stream already runs at ~8 bytes per 3 cycles, several GB/s, which is
// well above the disk, so the simple loop is kept.
__attribute__((target("sse4.2"))) std::uint32_t crc32c_sse42(const unsigned char* p, std::size_t n,
                                                              std::uint32_t c) {
  std::uint64_t c64 = c;
  while (n >= 8) {
    std::uint64_t word;
    std::memcpy(&word, p, 8);
    c64 = __builtin_ia32_crc32di(c64, word);
    p += 8;
    n -= 8;
  }
  c = static_cast<std::uint32_t>(c64);
  while (n-- > 0) c = __builtin_ia32_crc32qi(c, *p++);
  return c;
}

bool have_sse42() {
  static const bool yes = __builtin_cpu_supports("sse4.2");
  return yes;
}
#endif

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t size, std::uint32_t crc) {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "crc32c_table assumes a little-endian host");
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint32_t c = ~crc;
#ifdef FTRAIN_CRC32C_SSE42
  if (have_sse42()) return ~crc32c_sse42(p, size, c);
#endif
  return ~crc32c_table(p, size, c);
}

const char* crc32c_implementation() {
#ifdef FTRAIN_CRC32C_SSE42
  if (have_sse42()) return "sse4.2";
#endif
  return "table";
}

}  // namespace ftrain::ckpt
