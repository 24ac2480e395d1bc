/* The C entry point of an ops backend library (libftrain_cuda.so).
 *
 * The library exports FTRAIN_BACKEND_ENTRY_SYMBOL returning a static
 * descriptor. The loader (runtime/backend_library.hpp) refuses another
 * abi_version, then calls register_all(), which registers the backend's
 * allocator (runtime/allocator.hpp), stream factory
 * (runtime/execution_context.hpp) and op table (kernels/backend_registry.hpp)
 * and returns NULL, or a one-line message saying why it cannot (no device,
 * driver too old).
 */
#ifndef FTRAIN_BACKEND_H
#define FTRAIN_BACKEND_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version history (a library built for another version is refused):
 *   1  first backend ABI: the descriptor, register_all() and the C++
 *      interfaces it registers (DeviceAllocator, the stream factory, the
 *      op table).
 *   2  DeviceAllocator::allocate_pinned_host and is_pinned_host (host
 *      memory the device copies to and from directly: offloaded state) and
 *      AllocatorStats' pinned_host_bytes, peak_pinned_host_bytes,
 *      pinned_stream_copies and pageable_stream_copies. */
#define FTRAIN_BACKEND_ABI_VERSION 2
#define FTRAIN_BACKEND_ENTRY_SYMBOL "ftrain_backend_entry"

typedef struct ftrain_backend_descriptor {
  uint32_t abi_version;              /* FTRAIN_BACKEND_ABI_VERSION the library was built with */
  const char* name;                  /* "cuda" */
  const char* (*register_all)(void); /* NULL on success, else why not */
} ftrain_backend_descriptor;

typedef const ftrain_backend_descriptor* (*ftrain_backend_entry_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* FTRAIN_BACKEND_H */
