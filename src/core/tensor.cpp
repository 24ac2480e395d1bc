#include "core/tensor.hpp"

#include <cstdlib>
#include <cstring>
#include <sstream>

#include "base/error.hpp"
#include "runtime/allocator.hpp"

namespace ftrain {

std::int64_t shape_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (auto d : shape) {
    FT_CHECK(d >= 0) << "negative dimension in shape " << shape_string(shape);
    n *= d;
  }
  return n;
}

std::string shape_string(const Shape& shape) {
  std::ostringstream s;
  s << "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << "]";
  return s.str();
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device, std::string name) {
  DeviceAllocator* allocator = find_allocator(device);
  FT_CHECK(allocator != nullptr) << "tensor '" << name << "' " << dtype_name(dtype) << shape_string(shape) << " on "
                                 << device_name(device) << ": no CUDA backend is loaded (no allocator is registered for "
                                 << device_name(device) << "; libftrain_cuda.so registers one when present)";
  Tensor t;
  t.shape_ = shape;
  t.numel_ = shape_numel(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  t.name_ = std::move(name);
  t.storage_bytes_ = t.nbytes();
  t.storage_ = allocator->allocate(t.storage_bytes_);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device, std::string name) {
  Tensor t = empty(shape, dtype, device, std::move(name));
  find_allocator(device)->zero(t.data(), t.nbytes());
  return t;
}

Tensor Tensor::pinned_host(const Shape& shape, DType dtype, Device copies_with, std::string name) {
  DeviceAllocator* allocator = find_allocator(copies_with);
  FT_CHECK(allocator != nullptr) << "pinned host tensor '" << name << "' " << dtype_name(dtype) << shape_string(shape)
                                 << " for " << device_name(copies_with) << ": no backend for "
                                 << device_name(copies_with) << " is loaded";
  Tensor t;
  t.shape_ = shape;
  t.numel_ = shape_numel(shape);
  t.dtype_ = dtype;
  t.device_ = Device::host;
  t.name_ = std::move(name);
  t.storage_bytes_ = t.nbytes();
  t.storage_ = allocator->allocate_pinned_host(t.storage_bytes_);
  if (t.storage_bytes_ > 0) std::memset(t.storage_.get(), 0, t.storage_bytes_);
  return t;
}

Tensor Tensor::external(void* data, const Shape& shape, DType dtype, Device device, std::string name) {
  FT_CHECK(data != nullptr || shape_numel(shape) == 0) << "external tensor '" << name << "' over a null pointer";
  Tensor t;
  t.shape_ = shape;
  t.numel_ = shape_numel(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  t.name_ = std::move(name);
  t.storage_bytes_ = t.nbytes();
  // The aliasing constructor with an empty owner: never freed here (borrow()).
  t.storage_ = std::shared_ptr<void>(std::shared_ptr<void>(), data);
  return t;
}

std::int64_t Tensor::dim(int i) const {
  const int n = ndim();
  const int k = i < 0 ? n + i : i;
  FT_CHECK(k >= 0 && k < n) << "dimension " << i << " out of range for " << describe();
  return shape_[static_cast<std::size_t>(k)];
}

Tensor Tensor::view(const Shape& shape, std::int64_t element_offset, std::string name) const {
  FT_CHECK(defined()) << "view of an undefined tensor";
  const std::int64_t n = shape_numel(shape);
  const std::size_t esz = dtype_size(dtype_);
  FT_CHECK(element_offset >= 0 &&
           static_cast<std::size_t>(element_offset + n) * esz <= storage_bytes_)
      << "view " << shape_string(shape) << " at offset " << element_offset << " does not fit in "
      << describe();
  Tensor t = *this;
  t.byte_offset_ = byte_offset_ + static_cast<std::size_t>(element_offset) * esz;
  t.storage_bytes_ = storage_bytes_ - static_cast<std::size_t>(element_offset) * esz;
  t.shape_ = shape;
  t.numel_ = n;
  t.name_ = name.empty() ? name_ : std::move(name);
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_, device_, name_);
  find_allocator(device_)->copy(t.data(), data(), nbytes());
  return t;
}

Tensor Tensor::borrow() const {
  Tensor t = *this;
  // The aliasing constructor with an empty owner: same pointer, no ownership.
  t.storage_ = std::shared_ptr<void>(std::shared_ptr<void>(), storage_.get());
  return t;
}

std::string Tensor::describe() const {
  std::ostringstream s;
  s << (name_.empty() ? "<unnamed>" : name_) << " " << dtype_name(dtype_) << shape_string(shape_) << " "
    << device_name(device_);
  return s.str();
}

Tensor to_device(const Tensor& t, Device device) {
  if (t.device() == device) return t.clone();
  Tensor out = Tensor::empty(t.shape(), t.dtype(), device, t.name());
  if (device == Device::host) {
    find_allocator(t.device())->copy_to_host(out.data(), t.data(), t.nbytes());
  } else {
    FT_CHECK(t.device() == Device::host) << "copy of " << t.describe() << " to " << device_name(device)
                                         << ": only host <-> device copies exist";
    find_allocator(device)->copy_from_host(out.data(), t.data(), t.nbytes());
  }
  return out;
}

void copy_tensor(const Tensor& src, Tensor& dst) {
  FT_CHECK(src.defined() && dst.defined() && src.dtype() == dst.dtype() && src.numel() == dst.numel())
      << "copy_tensor from " << src.describe() << " to " << dst.describe() << ": dtype and numel must match";
  if (src.device() == dst.device() && src.data() == dst.data()) return;
  if (src.device() == dst.device()) {
    find_allocator(dst.device())->copy(dst.data(), src.data(), src.nbytes());
  } else if (dst.device() == Device::host) {
    find_allocator(src.device())->copy_to_host(dst.data(), src.data(), src.nbytes());
  } else {
    FT_CHECK(src.device() == Device::host) << "copy_tensor from " << src.describe() << " to " << dst.describe()
                                           << ": only host <-> device copies exist";
    find_allocator(dst.device())->copy_from_host(dst.data(), src.data(), src.nbytes());
  }
}

Tensor host_readable(const Tensor& t) { return t.device() == Device::host ? t : to_device(t, Device::host); }

void throw_dtype_mismatch(const Tensor& t, DType wanted) {
  FT_THROW() << "tensor " << t.describe() << " accessed as " << dtype_name(wanted);
}

void copy_convert(const Tensor& src, Tensor& dst) {
  FT_CHECK(src.numel() == dst.numel()) << "copy from " << src.describe() << " to " << dst.describe();
  FT_CHECK(src.device() == Device::host && dst.device() == Device::host) << "copy_convert is host only";
  if (src.dtype() == dst.dtype()) {
    std::memcpy(dst.data(), src.data(), src.nbytes());
    return;
  }
  FT_CHECK(dtype_is_float(src.dtype()) && dtype_is_float(dst.dtype()))
      << "copy from " << src.describe() << " to " << dst.describe() << " mixes integer and float types";
  const std::int64_t n = src.numel();
  for (std::int64_t i = 0; i < n; ++i) store_from_float(dst.data(), dst.dtype(), i, load_as_float(src.data(), src.dtype(), i));
}

std::vector<float> to_float_vector(const Tensor& t) {
  FT_CHECK(t.device() == Device::host) << "to_float_vector of " << t.describe()
                                       << ": the tensor is not on the host (copy it with host_readable first)";
  std::vector<float> v(static_cast<std::size_t>(t.numel()));
  for (std::int64_t i = 0; i < t.numel(); ++i) v[static_cast<std::size_t>(i)] = load_as_float(t.data(), t.dtype(), i);
  return v;
}

Tensor from_floats(const Shape& shape, const std::vector<float>& values, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  FT_CHECK(static_cast<std::int64_t>(values.size()) == t.numel())
      << values.size() << " values for shape " << shape_string(shape);
  for (std::int64_t i = 0; i < t.numel(); ++i) store_from_float(t.data(), dtype, i, values[static_cast<std::size_t>(i)]);
  return t;
}

}  // namespace ftrain
