// The host kernels are compiled for FTRAIN_HOST_ISA (native by default:
// AVX-512 or AVX2 vectors), this test file for the x86-64 baseline. The
// kernels must still compute exactly the bits of the shared math evaluated
// here element by element: what makes results independent of the CPU the
// build targets (cmake/FtrainHostIsa.cmake: no FMA contraction, no
// reassociation). Also: RoPE's per-thread table cache must never hand out
// tables of other frequencies, offsets or lengths.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "host_op_checks.hpp"
#include "kernels/math/activations.hpp"
#include "kernels/math/adamw.hpp"
#include "kernels/math/rope.hpp"
#include "kernels/ops.hpp"
#include "kernels/rope_frequencies.hpp"

using namespace ftrain;
using namespace ftrain::testing;

FTRAIN_BACKEND_TEST_SUITE(HostIsa);

namespace {

// Waits for the backend's streams first: the ops may run asynchronously.
std::vector<float> floats_of(const Tensor& t) {
  backend_synchronize();
  std::vector<float> out(static_cast<std::size_t>(t.numel()));
  std::memcpy(out.data(), t.data(), out.size() * sizeof(float));
  return out;
}

// First element whose bits differ, or -1.
std::int64_t first_bit_difference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      ADD_FAILURE() << "element " << i << ": " << a[i] << " vs " << b[i];
      return static_cast<std::int64_t>(i);
    }
  return -1;
}

void skip_unless_host() {
  if (backend_ctx().device() != Device::host) GTEST_SKIP() << "compares the host kernels' build with this file's";
}

}  // namespace

TEST_P(HostIsa, AdamwEqualsTheSharedMathBitForBit) {
  skip_unless_host();
  const std::int64_t n = 4103;  // vector bodies and an odd tail
  Tensor param = random_tensor({n}, 1, DType::f32, "param");
  Tensor m = named_zeros({n}, DType::f32, "m"), v = named_zeros({n}, DType::f32, "v");
  std::vector<float> p = floats_of(param), mr(n, 0.0f), vr(n, 0.0f);
  for (std::int64_t step = 1; step <= 3; ++step) {
    Tensor grad = random_tensor({n}, 10 + static_cast<std::uint64_t>(step), DType::f32, "grad");
    const std::vector<float> g = floats_of(grad);
    ops::adamw_update(backend_ctx(), param, grad, m, v, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step, 0.5f);
    const math::AdamwConstants k = math::adamw_constants(1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step, 0.5f);
    for (std::int64_t i = 0; i < n; ++i) math::adamw_step(k, g[i], p[i], mr[i], vr[i]);
    SCOPED_TRACE("step " + std::to_string(step));
    EXPECT_EQ(first_bit_difference(floats_of(param), p), -1);
    EXPECT_EQ(first_bit_difference(floats_of(m), mr), -1);
    EXPECT_EQ(first_bit_difference(floats_of(v), vr), -1);
  }
}

TEST_P(HostIsa, SwigluEqualsTheSharedMathBitForBit) {
  skip_unless_host();
  const Shape shape{37, 41};
  Tensor gate = random_tensor(shape, 3, DType::f32, "gate", 4.0), up = random_tensor(shape, 4, DType::f32, "up");
  Tensor dout = random_tensor(shape, 5, DType::f32, "dout");
  Tensor out = named_zeros(shape, DType::f32, "out"), dgate = named_zeros(shape, DType::f32, "dgate"),
         dup = named_zeros(shape, DType::f32, "dup");
  ops::swiglu_forward(backend_ctx(), gate, up, out);
  ops::swiglu_backward(backend_ctx(), gate, up, dout, dgate, dup);
  const std::vector<float> g = floats_of(gate), u = floats_of(up), d = floats_of(dout);
  std::vector<float> want_out(g.size()), want_dgate(g.size()), want_dup(g.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    want_out[i] = math::swiglu_value(g[i], u[i]);
    const math::SwigluGrads grads = math::swiglu_grads(g[i], u[i], d[i]);
    want_dgate[i] = grads.dgate;
    want_dup[i] = grads.dup;
  }
  EXPECT_EQ(first_bit_difference(floats_of(out), want_out), -1);
  EXPECT_EQ(first_bit_difference(floats_of(dgate), want_dgate), -1);
  EXPECT_EQ(first_bit_difference(floats_of(dup), want_dup), -1);
}

TEST_P(HostIsa, RopeTableCacheFollowsFrequenciesOffsetsAndLengths) {
  skip_unless_host();
  // More (offset, length) pairs than the cache holds, twice over, then the
  // same frequency buffer with new values: every call must equal a fresh
  // evaluation of its own angles (f32 angle, double cos/sin, as the kernel).
  Tensor inv_freq = rope_inv_freq(8, 10000.0);
  auto check = [&](std::int64_t offset, std::int64_t time) {
    const Shape shape{1, time, 2, 8};
    Tensor x = random_tensor(shape, static_cast<std::uint64_t>(offset + 7 * time), DType::f32, "q");
    Tensor y = named_zeros(shape, DType::f32, "q_rot");
    ops::rope_forward(backend_ctx(), x, inv_freq, offset, nullptr, y);
    const std::vector<float> xs = floats_of(x), freq = floats_of(inv_freq), ys = floats_of(y);
    for (std::int64_t t = 0; t < time; ++t)
      for (std::int64_t h = 0; h < 2; ++h)
        for (std::int64_t i = 0; i < 4; ++i) {
          const double angle = static_cast<float>(static_cast<float>(offset + t) * freq[i]);
          const auto c = static_cast<float>(std::cos(angle)), s = static_cast<float>(std::sin(angle));
          const std::int64_t base = (t * 2 + h) * 8;
          const math::RotatedPair want = math::rope_rotate(xs[base + i], xs[base + i + 4], c, s, 1.0f);
          ASSERT_EQ(ys[base + i], want.first) << "offset " << offset << " t " << t << " i " << i;
          ASSERT_EQ(ys[base + i + 4], want.second) << "offset " << offset << " t " << t << " i " << i;
        }
  };
  for (int round = 0; round < 2; ++round)
    for (const auto& [offset, time] : std::vector<std::pair<std::int64_t, std::int64_t>>{
             {0, 5}, {3, 5}, {0, 6}, {11, 2}, {0, 5}, {40, 9}, {3, 5}})
      check(offset, time);
  backend_synchronize();
  float* freq = static_cast<float*>(inv_freq.data());
  for (int i = 0; i < 4; ++i) freq[i] *= 1.5f;  // same buffer, other values (llama3-style rescaling)
  check(0, 5);
  check(3, 5);
}
