// Loading ops backends that live in their own shared library (the CUDA
// backend: libftrain_cuda.so), only when present.
//
// Where: FTRAIN_CUDA_BACKEND=<path> names the library explicitly (then a
// failure to load it is an error), FTRAIN_CUDA_BACKEND=none loads none; otherwise libftrain_cuda.so beside
// libftrain.so is loaded if it exists, and its absence just means a host-only
// ftrain; so does a library there that refuses to register (no GPU, no
// driver): the reason is kept for describe_backend_search(). The library's entry point (runtime/ftrain_backend.h) registers
// its allocator, streams and op table.
#pragma once

#include <string>

namespace ftrain {

// Loads `path` and runs its registration; throws ftrain::Error naming the
// path and the reason (dlopen error, missing entry point, ABI mismatch,
// registration refused).
void load_backend_library(const std::string& path);
// The optional libraries above, looked for once per process (later calls
// return at once). Called lazily when a non-host device is first asked for.
void load_optional_backend_libraries();
// "looked for FTRAIN_CUDA_BACKEND (unset) and /path/libftrain_cuda.so" for messages.
std::string describe_backend_search();

}  // namespace ftrain
