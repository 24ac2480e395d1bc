// Start-up check of the host kernels' instruction set (FTRAIN_HOST_ISA).
// This file alone is compiled for the x86-64 baseline (cmake/FtrainHostIsa.cmake)
// so that it runs on the CPU it must refuse; the constructor runs before
// libftrain's other static initialisers (priority 101), which may already use
// the build's wider instructions.
#include "kernels/host_isa.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

#ifndef FTRAIN_HOST_ISA_NAME
#define FTRAIN_HOST_ISA_NAME "portable"
#endif
#ifndef FTRAIN_HOST_ISA_FEATURES
#define FTRAIN_HOST_ISA_FEATURES ""
#endif

namespace ftrain::host_isa {
namespace {

// Plain C only up to the refusal: an inline C++ function used here could be
// the copy the linker took from a file built for the wider ISA.
bool cpu_has(const char* feature) {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  // __builtin_cpu_supports wants a string literal: one branch per name that
  // cmake/FtrainHostIsa.cmake may list.
  if (std::strcmp(feature, "sse4.2") == 0) return __builtin_cpu_supports("sse4.2");
  if (std::strcmp(feature, "avx") == 0) return __builtin_cpu_supports("avx");
  if (std::strcmp(feature, "avx2") == 0) return __builtin_cpu_supports("avx2");
  if (std::strcmp(feature, "fma") == 0) return __builtin_cpu_supports("fma");
  if (std::strcmp(feature, "bmi2") == 0) return __builtin_cpu_supports("bmi2");
  if (std::strcmp(feature, "avx512f") == 0) return __builtin_cpu_supports("avx512f");
  if (std::strcmp(feature, "avx512bw") == 0) return __builtin_cpu_supports("avx512bw");
  if (std::strcmp(feature, "avx512vl") == 0) return __builtin_cpu_supports("avx512vl");
  if (std::strcmp(feature, "avx512dq") == 0) return __builtin_cpu_supports("avx512dq");
  if (std::strcmp(feature, "avx512bf16") == 0) return __builtin_cpu_supports("avx512bf16");
#endif
  (void)feature;
  return true;
}

// The built-for features this CPU lacks, space-separated, into out.
// FTRAIN_DEBUG_PRETEND_CPU_LACKS=<feature> counts that one as missing (the
// check's test).
void list_missing(char* out, std::size_t capacity) {
  out[0] = '\0';
  const char* pretend = std::getenv("FTRAIN_DEBUG_PRETEND_CPU_LACKS");
  char features[256];
  std::snprintf(features, sizeof features, "%s", FTRAIN_HOST_ISA_FEATURES);
  char* save = nullptr;
  for (char* f = strtok_r(features, ",", &save); f != nullptr; f = strtok_r(nullptr, ",", &save)) {
    if (cpu_has(f) && (pretend == nullptr || std::strcmp(pretend, f) != 0)) continue;
    const std::size_t used = std::strlen(out);
    std::snprintf(out + used, capacity - used, "%s%s", used == 0 ? "" : " ", f);
  }
}

__attribute__((constructor(101))) void refuse_a_cpu_without_the_built_isa() {
  char missing[256];
  list_missing(missing, sizeof missing);
  if (missing[0] == '\0') return;
  std::fprintf(stderr,
               "ftrain: error: this CPU lacks %s, which libftrain's host kernels were compiled for "
               "(FTRAIN_HOST_ISA=%s uses %s). Rebuild on this machine, or configure with "
               "-DFTRAIN_HOST_ISA=portable (any x86-64) or a -march value every node has (e.g. x86-64-v3).\n",
               missing, FTRAIN_HOST_ISA_NAME, FTRAIN_HOST_ISA_FEATURES);
  _exit(2);
}

}  // namespace

std::string missing_features() {
  char missing[256];
  list_missing(missing, sizeof missing);
  return missing;
}

std::string describe() {
  std::string features = FTRAIN_HOST_ISA_FEATURES;
  for (char& c : features)
    if (c == ',') c = ' ';
  return std::string(FTRAIN_HOST_ISA_NAME) + " (" + (features.empty() ? "x86-64 baseline" : features) + ")";
}

}  // namespace ftrain::host_isa
