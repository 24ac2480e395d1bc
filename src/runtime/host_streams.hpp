// Internal to runtime/: the host allocator orders a release after the work
// enqueued so far on every asynchronous host stream (stream.cpp keeps them).
#pragma once

#include <vector>

#include "runtime/stream.hpp"

namespace ftrain {

// One event per live asynchronous host stream, recorded now. Empty when
// every host stream is synchronous (then a release is safe at once).
std::vector<Event> record_on_async_host_streams();

}  // namespace ftrain
