// One lock for the HDF5 library across threads.
//
// Debian's HDF5 is the parallel build, which cannot be built thread-safe:
// two threads inside the library at once corrupt its global state. Since
// asynchronous checkpoints (ckpt/checkpoint_writer.hpp) write a rank file's
// metadata on a background thread while the main thread trains, every HDF5
// call sequence that can run during training holds this lock: the background
// writer for its metadata phase (milliseconds; the bulk data is written with
// plain pwrite outside the library), the HDF5 image reader per batch.
// Main-thread code that runs only when no checkpoint write is in flight
// (loading, save_final, consolidated saves) needs no lock.
#pragma once

#include <mutex>

namespace ftrain {

inline std::mutex& hdf5_library_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace ftrain
