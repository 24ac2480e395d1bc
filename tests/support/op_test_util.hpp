// Helpers for op tests: seeded random tensors and a float64 directional
// finite-difference check.
//
// How op backward tests work (the spec for every op): write a plain float64
// reference forward of the op in the test; draw a random output cotangent g
// and random input direction u; compare the op's analytic backward
// <dx, u> against the central difference of <g, f64_forward(x + h u)> in
// double precision. Also compare the op's forward with the reference.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/rng.hpp"
#include "core/tensor.hpp"
#include "support/backend_test.hpp"

namespace ftrain::testing {

inline std::vector<double> random_vector(std::size_t n, std::uint64_t seed, double scale = 1.0) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = scale * rng::normal(seed, 17, i);
  return v;
}

// On the device of the backend under test (backend_test.hpp; host outside one).
inline Tensor tensor_from(const Shape& shape, const std::vector<double>& values, DType dtype = DType::f32) {
  std::vector<float> f(values.begin(), values.end());
  Tensor t = from_floats(shape, f, dtype);
  const Device d = backend_ctx().device();
  return d == Device::host ? t : to_device(t, d);
}

// Reads a result: waits for the backend's streams first, then copies to the host.
inline std::vector<float> read_floats(const Tensor& t) {
  backend_synchronize();
  return to_float_vector(t.device() == Device::host ? t : to_device(t, Device::host));
}

inline std::vector<double> to_doubles(const Tensor& t) {
  auto f = read_floats(t);
  return std::vector<double>(f.begin(), f.end());
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Relative error ||a - b|| / max(||b||, tiny).
inline double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

// Central difference of scalar(x + h u) - scalar(x - h u) / 2h in double.
inline double directional_derivative(const std::function<double(const std::vector<double>&)>& scalar,
                                     const std::vector<double>& x, const std::vector<double>& u, double h = 1e-6) {
  std::vector<double> xp(x), xm(x);
  for (std::size_t i = 0; i < x.size(); ++i) {
    xp[i] += h * u[i];
    xm[i] -= h * u[i];
  }
  return (scalar(xp) - scalar(xm)) / (2 * h);
}

}  // namespace ftrain::testing
