// The rank's GPU, and the rule that every thread calling CUDA uses it.
//
// The CUDA runtime keeps the current device per host thread, and a thread
// that never called cudaSetDevice works on device 0: its first call creates
// (and keeps) a context there. So a rank bound to GPU 3 whose MPI progress
// thread or collective watchdog calls cudaEventQuery without setting the
// device puts a context, and memory, on GPU 0 (every rank of the node the
// same GPU). Two rules close that:
//  * the rank's device is chosen (bind_rank_device, from bind_local_gpu:
//    node-local rank, CUDA_VISIBLE_DEVICES) before any allocation, stream,
//    event, pool or library handle exists; binding later, to another device
//    than the one already used, is an error naming both;
//  * every entry point of the backend that calls CUDA starts with
//    use_rank_device(): cudaSetDevice once per thread (a thread-local check
//    afterwards), whichever thread it runs on.
// A run that never binds (one GPU, no MPI launcher) uses device 0, fixed at
// the first use.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "runtime/stream.hpp"

namespace ftrain::cuda {

// Binds this rank (the process) to device `ordinal` and makes it current on
// the calling thread. Throws if CUDA resources were already made on another
// device.
void bind_rank_device(int ordinal);
// The rank's device (binds device 0 if nothing was bound yet).
int rank_device();
// Makes the rank's device current on the calling thread (cudaSetDevice the
// first time on this thread, or after the binding changed).
void use_rank_device();

// "device 1, stream 0x7f..": the context an error message carries.
std::string describe_device_stream(cudaStream_t stream);

// Orders later work on `stream` after `event` without blocking the caller
// where CUDA can express it: a CUDA event is waited for on the device
// (cudaStreamWaitEvent). A host event (an MPI collective's completion) has no
// device form; the calling thread waits for it here, never a host function
// in the stream: CUDA forbids a host function to wait for work that is not
// already ordered before it, and one that waits for another thread which
// itself waits for the device deadlocks the device.
void wait_on_stream(cudaStream_t stream, const Event& event);

}  // namespace ftrain::cuda
