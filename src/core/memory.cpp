#include "core/memory.hpp"

#include <fstream>
#include <string>

namespace ftrain {
namespace {
std::int64_t status_field_kib(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string prefix = std::string(key) + ":";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) return std::stoll(line.substr(prefix.size()));
  }
  return 0;
}
}  // namespace

std::int64_t current_rss_bytes() { return status_field_kib("VmRSS") * 1024; }
std::int64_t peak_rss_bytes() { return status_field_kib("VmHWM") * 1024; }

}  // namespace ftrain
