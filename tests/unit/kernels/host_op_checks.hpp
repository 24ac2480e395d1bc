// Checks shared by the op tests (test_<op>.cpp beside this file).
//
// The spec (tests/support/op_test_util.hpp): each test writes a float64
// reference forward; an op's analytic vector-Jacobian product <grad_k, u> for
// input k is compared with the float64 central difference of
// <g, reference(inputs + h u e_k)> along several random directions u.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "support/op_test_util.hpp"

namespace ftrain::testing {

using Inputs = std::vector<std::vector<double>>;
using ReferenceFn = std::function<std::vector<double>(const Inputs&)>;

// Expects <grad, u> == d/dh <g, f(inputs with input k + h u)> for `directions`
// random u, within tol * ||grad|| ||u|| (the Cauchy-Schwarz scale of the
// product, so the tolerance is relative to the gradient's size).
inline void expect_vjp_matches(const ReferenceFn& f, const Inputs& inputs, std::size_t k,
                               const std::vector<double>& grad, const std::vector<double>& g, double tol,
                               std::uint64_t seed, const std::string& what, int directions = 3) {
  ASSERT_EQ(grad.size(), inputs[k].size()) << what;
  const auto scalar = [&](const std::vector<double>& x) {
    Inputs moved = inputs;
    moved[k] = x;
    return dot(g, f(moved));
  };
  const double grad_norm = std::sqrt(dot(grad, grad));
  for (int d = 0; d < directions; ++d) {
    const std::vector<double> u = random_vector(grad.size(), seed * 1000 + static_cast<std::uint64_t>(d));
    const double analytic = dot(grad, u);
    const double numeric = directional_derivative(scalar, inputs[k], u, 1e-5);
    const double scale = std::max(grad_norm * std::sqrt(dot(u, u)), 1e-12);
    EXPECT_LE(std::abs(analytic - numeric), tol * scale)
        << what << ": direction " << d << " analytic " << analytic << " numeric " << numeric;
  }
}

// Each element of a equals factor * b (relative tolerance), e.g. a gradient
// accumulated twice.
inline void expect_scaled(const std::vector<double>& a, const std::vector<double>& b, double factor, double tol,
                          const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (std::size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(a[i], factor * b[i], tol * (std::abs(factor * b[i]) + 1e-6)) << what << " element " << i;
}

// A named host tensor of random normal values (rounded to `dtype`).
inline Tensor random_tensor(const Shape& shape, std::uint64_t seed, DType dtype = DType::f32,
                            const std::string& name = {}, double scale = 1.0) {
  Tensor t = tensor_from(shape, random_vector(static_cast<std::size_t>(shape_numel(shape)), seed, scale), dtype);
  t.set_name(name);
  return t;
}

inline Tensor named_zeros(const Shape& shape, DType dtype, const std::string& name) {
  Tensor t = Tensor::zeros(shape, dtype, Device::host, name);
  const Device d = backend_ctx().device();
  return d == Device::host ? t : to_device(t, d);
}

// Runs `call`, expects ftrain::Error whose message contains every fragment.
template <class Call>
void expect_error_mentioning(Call call, const std::vector<std::string>& fragments) {
  try {
    call();
    backend_synchronize();  // an asynchronous stream reports the error of enqueued work here
    ADD_FAILURE() << "expected ftrain::Error mentioning " << (fragments.empty() ? "" : fragments[0]);
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const auto& f : fragments) EXPECT_NE(message.find(f), std::string::npos) << "message: " << message;
  }
}

}  // namespace ftrain::testing
