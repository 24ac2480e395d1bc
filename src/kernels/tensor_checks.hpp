// The argument checks every op makes, whatever backend runs it: a tensor
// is defined, has the dtype and shape the op's contract (op_list.hpp) asks
// for. Each throws ftrain::Error naming the op and the tensor (its role in
// the op and Tensor::describe()).
//
// They hold no device rule: whether a tensor lives in a backend's memory is
// the backend's own check (its message names the backend), made when it
// takes the tensor's data.
#pragma once

#include <cstdint>

#include "base/dtype.hpp"
#include "base/error.hpp"
#include "core/tensor.hpp"

namespace ftrain::checks {

inline void require_defined(const char* op, const Tensor& t, const char* role) {
  FT_CHECK(t.defined()) << op << ": " << role << " is an undefined tensor";
}

// f32 or bf16 storage (bf16 is a storage format; the math is f32).
inline void require_float(const char* op, const Tensor& t, const char* role) {
  require_defined(op, t, role);
  FT_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::bf16)
      << op << ": " << role << " " << t.describe() << " must be f32 or bf16";
}

inline void require_dtype(const char* op, const Tensor& t, const char* role, DType dtype) {
  require_defined(op, t, role);
  FT_CHECK(t.dtype() == dtype) << op << ": " << role << " " << t.describe() << " must be " << dtype_name(dtype);
}

inline void require_same_shape(const char* op, const Tensor& a, const char* role_a, const Tensor& b,
                               const char* role_b) {
  FT_CHECK(a.shape() == b.shape()) << op << ": " << role_b << " " << b.describe() << " must have the shape of "
                                   << role_a << " " << a.describe();
}

inline void require_numel(const char* op, const Tensor& t, const char* role, std::int64_t numel, const char* why) {
  FT_CHECK(t.numel() == numel) << op << ": " << role << " " << t.describe() << " must have " << numel
                               << " elements (" << why << ")";
}

// Last dimension of a row-major [..., C] activation; checks it is >= 1-d.
inline std::int64_t row_width(const char* op, const Tensor& t, const char* role) {
  FT_CHECK(t.ndim() >= 1 && t.dim(-1) > 0) << op << ": " << role << " " << t.describe()
                                           << " must be [..., C] with C > 0";
  return t.dim(-1);
}

}  // namespace ftrain::checks
