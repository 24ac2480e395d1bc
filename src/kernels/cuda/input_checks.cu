// The device range checks of token ids and targets and their one record
// (input_check_record.hpp: why, and the key). The record is device memory of
// kInputChecks keys, made and set to kNoBadInput the first time a check is
// enqueued (stream-ordered, on that check's stream), read by
// raise_input_check_errors when a stream is synchronized anyway.
#include <mutex>

#include "base/error.hpp"
#include "kernels/cuda/launch.cuh"
#include "kernels/math/embedding.hpp"

namespace ftrain::cuda {

namespace {

struct InputCheckRecord {
  std::mutex mutex;
  long long* device = nullptr;        // kInputChecks keys
  std::int64_t bound[kInputChecks] = {};  // per slot, the bound of its last check (for the message)
};

InputCheckRecord& record() {
  static InputCheckRecord r;  // process lifetime: the device memory goes with the context
  return r;
}

// Made on the first check's stream, stream-ordered (cudaMallocAsync and a
// memset): a synchronous cudaMalloc/cudaMemcpy here would be a
// device-wide barrier inside the first training step (the cuda-api engine
// test counts them). Later checks and raise_input_check_errors run on the
// compute stream, after it.
long long* slot(InputCheck check, std::int64_t bound, cudaStream_t stream) {
  InputCheckRecord& r = record();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.device == nullptr) {
    void* keys = nullptr;
    FTRAIN_CUDA_CHECK(cudaMallocAsync(&keys, sizeof(long long) * kInputChecks, stream));
    r.device = static_cast<long long*>(keys);
    FTRAIN_CUDA_CHECK(cudaMemsetAsync(r.device, kNoBadInputByte, sizeof(long long) * kInputChecks, stream));
  }
  r.bound[static_cast<int>(check)] = bound;
  return r.device + static_cast<int>(check);
}

__global__ void range_check_kernel(const std::int32_t* values, std::int64_t n, std::int64_t bound,
                                   bool ignore_index_valid, long long* slot) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const std::int32_t v = values[i];
    const bool valid = ignore_index_valid ? math::cross_entropy_target_valid(v, bound)
                                          : math::embedding_token_valid(v, bound);
    if (!valid) atomicMin(slot, bad_input_key(i, v));
  }
}

}  // namespace

void launch_input_range_check(InputCheck check, const std::int32_t* values, std::int64_t n, std::int64_t bound,
                              cudaStream_t stream) {
  if (n <= 0) return;
  FT_CHECK(n <= kMaxCheckedRows) << input_check_op(check) << ": " << n
                                  << " ids: the device range check keys rows below " << kMaxCheckedRows;
  long long* s = slot(check, bound, stream);
  const LaunchConfig c = elementwise_launch(n);
  range_check_kernel<<<static_cast<unsigned>(c.grid_x), static_cast<unsigned>(c.block), 0, stream>>>(
      values, n, bound, input_check_allows_ignore_index(check), s);
  FTRAIN_CUDA_CHECK_LAUNCH("ftrain::input_range_check");
}

void raise_input_check_errors(cudaStream_t stream) {
  InputCheckRecord& r = record();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.device == nullptr) return;
  long long keys[kInputChecks];
  FTRAIN_CUDA_CHECK(cudaMemcpyAsync(keys, r.device, sizeof keys, cudaMemcpyDeviceToHost, stream));
  FTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream));
  int first = -1;  // in op order (InputCheck): the first a step ran
  for (int c = kInputChecks - 1; c >= 0; --c)
    if (keys[c] != kNoBadInput) first = c;
  if (first < 0) return;
  const std::string message = describe_bad_input(static_cast<InputCheck>(first), keys[first], r.bound[first]);
  FTRAIN_CUDA_CHECK(cudaMemsetAsync(r.device, kNoBadInputByte, sizeof(long long) * kInputChecks, stream));
  FT_THROW() << message;
}

}  // namespace ftrain::cuda
