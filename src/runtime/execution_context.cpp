#include "runtime/execution_context.hpp"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "base/error.hpp"

namespace ftrain {

ExecutionOptions ExecutionOptions::from_environment() {
  ExecutionOptions o;
  if (const char* v = std::getenv("FTRAIN_HOST_STREAM")) {
    const std::string s(v);
    if (s == "async") {
      o.asynchronous = true;
      static std::once_flag noted;
      std::call_once(noted, [] {
        std::fprintf(stderr, "ftrain: FTRAIN_HOST_STREAM=async: host ops run on stream worker threads\n");
      });
    } else if (!(s.empty() || s == "sync")) {
      FT_USER_ERROR() << "environment variable FTRAIN_HOST_STREAM='" << s << "': expected sync or async";
    }
  }
  return o;
}

namespace {
std::mutex& factory_mutex() {
  static std::mutex m;
  return m;
}
StreamFactory& cuda_factory() {
  static StreamFactory f = nullptr;
  return f;
}
}  // namespace

void register_stream_factory(Device device, StreamFactory factory) {
  FT_CHECK(device != Device::host) << "host streams are built in";
  std::lock_guard<std::mutex> lock(factory_mutex());
  cuda_factory() = factory;
}

std::unique_ptr<Stream> make_device_stream(Device device, const char* name) {
  FT_CHECK(device != Device::host) << "make_device_stream('" << name << "'): host streams are made by make_host_stream";
  StreamFactory factory = nullptr;
  {
    std::lock_guard<std::mutex> lock(factory_mutex());
    factory = cuda_factory();
  }
  FT_CHECK(factory != nullptr) << "stream '" << name << "' on " << device_name(device)
                               << ": no CUDA backend is loaded (libftrain_cuda.so registers its streams)";
  return factory(/*asynchronous=*/true, name);
}

ExecutionContext::ExecutionContext(const ExecutionOptions& options) : options_(options) {
  allocator_ = find_allocator(options_.device);
  if (options_.device == Device::host) {
    compute_ = make_host_stream(options_.asynchronous, "host.compute");
    communication_ = make_host_stream(options_.asynchronous, "host.communication");
  } else {
    StreamFactory factory = nullptr;
    {
      std::lock_guard<std::mutex> lock(factory_mutex());
      factory = cuda_factory();
    }
    FT_CHECK(allocator_ != nullptr && factory != nullptr)
        << "execution context on " << device_name(options_.device)
        << ": no CUDA backend is loaded (libftrain_cuda.so registers its streams and allocator)";
    compute_ = factory(options_.asynchronous, "cuda.compute");
    communication_ = factory(options_.asynchronous, "cuda.communication");
    // Tensor::empty / zeros / clone on this device are ordered on the
    // compute stream (runtime/allocator.hpp).
    allocator_->attach_stream(compute_.get());
  }
}

ExecutionContext::~ExecutionContext() {
  // Errors were the caller's to observe at its last synchronize(); a
  // destructor must not throw them.
  try {
    synchronize();
  } catch (...) {
  }
  if (allocator_ != nullptr && options_.device != Device::host) allocator_->detach_stream(compute_.get());
}

void ExecutionContext::synchronize() {
  communication_->synchronize();
  compute_->synchronize();
}

void* ExecutionContext::workspace(std::size_t bytes) {
  if (bytes > workspace_bytes_ || !workspace_) {
    workspace_ = allocator_->allocate(bytes);  // the old block goes back in stream order
    workspace_bytes_ = bytes;
  }
  return workspace_.get();
}

ExecutionContext& host_context() {
  static ExecutionContext* context = new ExecutionContext(ExecutionOptions{});  // synchronous, never destroyed
  return *context;
}

}  // namespace ftrain
