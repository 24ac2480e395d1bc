// Tensor: a contiguous, row-major buffer with a shape, a dtype and a device.
//
// No strides and no autograd: every op has an explicit forward
// and backward. A Tensor shares its storage; view() makes another Tensor over
// a sub-range of the same storage, which is how a unit's parameters are
// windows into its flat (gathered) parameter buffer.
//
// Storage comes from the stream-ordered allocator of the tensor's device
// (runtime/allocator.hpp; host memory is 64-byte aligned so that kernels can
// vectorise) and goes back to it, in stream order, when the last owning
// Tensor is gone. borrow() makes a Tensor that does NOT own its storage: what
// an enqueued op holds, like a CUDA kernel's raw pointer, and what the FSDP
// engine hands units for the gathered parameters, whose lifetime it alone
// decides.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "base/dtype.hpp"
#include "base/device.hpp"

namespace ftrain {

using Shape = std::vector<std::int64_t>;

std::int64_t shape_numel(const Shape& shape);
std::string shape_string(const Shape& shape);  // "[2, 3, 4]"

class Tensor {
 public:
  Tensor() = default;

  // Uninitialised contents, from the allocator of `device`; an error naming
  // the tensor when no backend for that device is loaded.
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::host, std::string name = {});
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::host, std::string name = {});
  // Zeroed HOST memory that `copies_with`'s copies reach directly (its
  // allocator's allocate_pinned_host: page-locked on a GPU), for host
  // buffers a device copies to and from on a stream (offloaded state). An
  // error naming the tensor when no backend for that device is loaded.
  static Tensor pinned_host(const Shape& shape, DType dtype, Device copies_with, std::string name = {});
  // A NON-OWNING tensor over `bytes`-sized memory at `data` that someone else
  // owns and frees, tagged with `device`. For backends that translate between
  // address spaces (the test-only simulated device hands its ops host-tagged
  // aliases of its memory); like borrow(), valid only while the owner lives.
  static Tensor external(void* data, const Shape& shape, DType dtype, Device device, std::string name = {});

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  // dim(-1) is the last dimension.
  std::int64_t dim(int i) const;
  std::int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel_) * dtype_size(dtype_); }
  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }

  void* data() const { return static_cast<char*>(storage_.get()) + byte_offset_; }
  // Typed access; checks that T matches the dtype.
  template <class T>
  T* data_as() const;

  // A tensor of `shape` over this tensor's storage, starting `element_offset`
  // elements into it. The view must fit inside this tensor.
  Tensor view(const Shape& shape, std::int64_t element_offset = 0, std::string name = {}) const;
  Tensor reshape(const Shape& shape) const { return view(shape, 0, name_); }
  // A copy on the same device with fresh storage.
  Tensor clone() const;
  // The same tensor without ownership of its storage: valid only while an
  // owning Tensor keeps the storage (the owner's release is stream-ordered,
  // so an op enqueued before the release may still use a borrowed view).
  Tensor borrow() const;
  // False for a borrowed tensor (and an undefined one).
  bool owns_storage() const { return storage_.use_count() > 0; }

  // "name f32[2, 3] host" for error messages.
  std::string describe() const;

 private:
  std::shared_ptr<void> storage_;
  std::size_t byte_offset_ = 0;
  std::size_t storage_bytes_ = 0;  // bytes from data() to end of storage
  Shape shape_;
  std::int64_t numel_ = 0;
  DType dtype_ = DType::f32;
  Device device_ = Device::host;
  std::string name_;
};

template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct dtype_of<bf16> {
  static constexpr DType value = DType::bf16;
};
template <>
struct dtype_of<f16> {
  static constexpr DType value = DType::f16;
};
template <>
struct dtype_of<fp8_e4m3> {
  static constexpr DType value = DType::fp8_e4m3;
};
template <>
struct dtype_of<fp8_e5m2> {
  static constexpr DType value = DType::fp8_e5m2;
};
template <>
struct dtype_of<std::int32_t> {
  static constexpr DType value = DType::i32;
};
template <>
struct dtype_of<std::int64_t> {
  static constexpr DType value = DType::i64;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::f64;
};

[[noreturn]] void throw_dtype_mismatch(const Tensor& t, DType wanted);

template <class T>
T* Tensor::data_as() const {
  if (dtype_ != dtype_of<T>::value) throw_dtype_mismatch(*this, dtype_of<T>::value);
  return static_cast<T*>(data());
}

// A copy of `t` on `device` (a plain copy when it is already there); goes
// through the allocators' host copies, synchronously.
Tensor to_device(const Tensor& t, Device device);

// Copies src into dst (same dtype and numel) within one device or between
// the host and a device, synchronously through the allocators. Neither
// tensor may be in use by queued work: the caller synchronized the streams
// that write src or touch dst. A no-op when both are the same memory.
void copy_tensor(const Tensor& src, Tensor& dst);
// `t` itself when it is on the host, else a host copy of it (to_device): how
// host code (checkpoints, initialisation) reads state that may live on a
// device, after synchronizing. To write, fill the result and copy_tensor it
// back (a no-op for a host tensor).
Tensor host_readable(const Tensor& t);

// Host-side copies between tensors of any float dtype (rounding as dtype.hpp
// says) or equal integer dtypes; shapes must have equal numel.
void copy_convert(const Tensor& src, Tensor& dst);
// Reads a HOST tensor of any dtype as a vector of float (tests, logging); a
// device tensor is refused, naming it (copy it with host_readable first).
std::vector<float> to_float_vector(const Tensor& t);
// Makes a host f32 tensor from values.
Tensor from_floats(const Shape& shape, const std::vector<float>& values, DType dtype = DType::f32);

}  // namespace ftrain
