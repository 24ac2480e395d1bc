// ThreadSanitizer annotations for memory that uninstrumented code touches.
//
// Open MPI is not built with -fsanitize=thread, so TSan never sees the
// all-gather write its output or the reduce-scatter read its input: a
// compute op that read a gathered buffer without waiting for the collective
// would race with MPI unseen. The communicator therefore tells TSan what a
// collective reads and writes, on the thread that runs it (the MPI progress
// thread): reads when it starts, writes when it completes. With those, a
// missing event wait between the compute stream and a collective is a race
// TSan reports (share/scripts/tsan-check.sh; FTRAIN_DEBUG_DROP_WAIT proves
// it). In a build without -fsanitize=thread these are empty inline calls.
#pragma once

#include <cstddef>

#if defined(__SANITIZE_THREAD__)
#define FTRAIN_THREAD_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FTRAIN_THREAD_SANITIZER 1
#endif
#endif

#if defined(FTRAIN_THREAD_SANITIZER)
// The TSan runtime's range accessors (compiler-rt tsan_interface.cpp; the
// same entry points Go's race detector uses).
extern "C" void __tsan_read_range(void* addr, unsigned long size);
extern "C" void __tsan_write_range(void* addr, unsigned long size);
#endif

namespace ftrain::tsan {

inline constexpr bool enabled() {
#if defined(FTRAIN_THREAD_SANITIZER)
  return true;
#else
  return false;
#endif
}

// The calling thread read / wrote [p, p + bytes) outside instrumented code.
inline void note_read(const void* p, std::size_t bytes) {
#if defined(FTRAIN_THREAD_SANITIZER)
  if (p != nullptr && bytes > 0) __tsan_read_range(const_cast<void*>(p), bytes);
#else
  (void)p;
  (void)bytes;
#endif
}

inline void note_write(void* p, std::size_t bytes) {
#if defined(FTRAIN_THREAD_SANITIZER)
  if (p != nullptr && bytes > 0) __tsan_write_range(p, bytes);
#else
  (void)p;
  (void)bytes;
#endif
}

}  // namespace ftrain::tsan
