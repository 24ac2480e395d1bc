// The vocabulary-parallel head and embedding ops (tensor parallelism) on the
// host, against a float64 full-vocabulary reference.
//
// The vocabulary is cut into slices as T tensor ranks hold it; the group's
// reductions (max, sums) are done here in the test over the slices' outputs,
// exactly as the tensor group would. Forward: losses and lse of the whole
// row. Backward: the sum of the slices' dh and their dw placed side by side,
// against the central difference of the f64 loss along a random direction.
// Slices of 19 and 18 rows with chunk 8 leave partial chunks in each; a
// slice's target lying in another slice, and ignored rows, are covered.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/error.hpp"
#include "kernels/ops.hpp"
#include "support/op_test_util.hpp"

using namespace ftrain;
using ftrain::testing::directional_derivative;
using ftrain::testing::dot;
using ftrain::testing::random_vector;
using ftrain::testing::relative_error;

namespace {

constexpr std::int64_t kRows = 11, kChannels = 12, kVocab = 37, kChunk = 8;

std::vector<double> f32_values(const std::vector<double>& x) {
  std::vector<double> r(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) r[i] = static_cast<float>(x[i]);
  return r;
}

Tensor host_tensor(const Shape& shape, const std::vector<double>& values) {
  std::vector<float> f(values.begin(), values.end());
  return from_floats(shape, f);
}

std::vector<double> doubles(const Tensor& t) {
  auto f = to_float_vector(t);
  return {f.begin(), f.end()};
}

Tensor targets_tensor(const std::vector<std::int32_t>& t) {
  Tensor out = Tensor::empty({static_cast<std::int64_t>(t.size())}, DType::i32);
  std::copy(t.begin(), t.end(), out.data_as<std::int32_t>());
  return out;
}

std::vector<std::int32_t> make_targets() {
  std::vector<std::int32_t> t(kRows);
  for (std::int64_t i = 0; i < kRows; ++i)
    t[static_cast<std::size_t>(i)] = i % 4 == 3 ? kIgnoreIndex : static_cast<std::int32_t>((i * 7 + 2) % kVocab);
  t.back() = kVocab - 1;
  return t;
}

// Per row: lse over the whole vocabulary and the loss (0 when ignored).
void reference(const std::vector<double>& h, const std::vector<double>& w, const std::vector<std::int32_t>& targets,
               std::vector<double>& lse, std::vector<double>& losses) {
  lse.assign(kRows, 0);
  losses.assign(kRows, 0);
  for (std::int64_t i = 0; i < kRows; ++i) {
    std::vector<double> z(kVocab);
    double m = -1e300;
    for (std::int64_t v = 0; v < kVocab; ++v) {
      for (std::int64_t k = 0; k < kChannels; ++k) z[v] += h[i * kChannels + k] * w[v * kChannels + k];
      m = std::max(m, z[v]);
    }
    double s = 0;
    for (double x : z) s += std::exp(x - m);
    lse[i] = m + std::log(s);
    losses[i] = targets[i] == kIgnoreIndex ? 0.0 : lse[i] - z[targets[i]];
  }
}

struct Slice {
  std::int64_t first, rows;
};
// Uneven on purpose: the ops take any slice; the Llama plugin's are even.
const std::vector<Slice> kSlices{{0, 19}, {19, 18}};

Tensor slice_of(const std::vector<double>& w, const Slice& s) {
  return host_tensor({s.rows, kChannels}, std::vector<double>(w.begin() + s.first * kChannels,
                                                              w.begin() + (s.first + s.rows) * kChannels));
}

// The vocabulary-parallel forward with the group's reductions done here.
void sliced_forward(const Tensor& h, const std::vector<double>& w, const Tensor& targets, Tensor& losses, Tensor& lse,
                    bool reduce) {
  ExecutionContext& ctx = host_context();
  std::vector<Tensor> local_lse, target_logit;
  for (const Slice& s : kSlices) {
    local_lse.push_back(Tensor::empty({kRows}, DType::f32));
    target_logit.push_back(Tensor::empty({kRows}, DType::f32));
    ops::cross_entropy_slice_forward(ctx, h, slice_of(w, s), targets, s.first, kVocab, kChunk, local_lse.back(),
                                     target_logit.back());
  }
  // all_reduce_max of the slices' lse, all_reduce_sum of their exp and of the target logits.
  Tensor row_max = Tensor::empty({kRows}, DType::f32), sum_exp = Tensor::zeros({kRows}, DType::f32);
  Tensor picked = Tensor::zeros({kRows}, DType::f32);
  for (std::int64_t i = 0; i < kRows; ++i) {
    float m = local_lse[0].data_as<float>()[i];
    if (reduce)
      for (const Tensor& l : local_lse) m = std::max(m, l.data_as<float>()[i]);
    row_max.data_as<float>()[i] = m;
  }
  for (std::size_t r = 0; r < kSlices.size(); ++r) {
    if (!reduce && r > 0) break;
    Tensor part = Tensor::empty({kRows}, DType::f32);
    ops::cross_entropy_slice_sum_exp(ctx, local_lse[r], row_max, part);
    for (std::int64_t i = 0; i < kRows; ++i) {
      sum_exp.data_as<float>()[i] += part.data_as<float>()[i];
      picked.data_as<float>()[i] += target_logit[r].data_as<float>()[i];
    }
  }
  ops::cross_entropy_slice_loss(ctx, row_max, sum_exp, picked, targets, losses, lse);
}

}  // namespace

TEST(VocabParallelCrossEntropy, ForwardEqualsTheWholeVocabulary) {
  const std::vector<double> h = f32_values(random_vector(kRows * kChannels, 1));
  const std::vector<double> w = f32_values(random_vector(kVocab * kChannels, 2, 0.5));
  const std::vector<std::int32_t> targets = make_targets();
  Tensor losses = Tensor::empty({kRows}, DType::f32), lse = Tensor::empty({kRows}, DType::f32);
  sliced_forward(host_tensor({kRows, kChannels}, h), w, targets_tensor(targets), losses, lse, /*reduce=*/true);
  std::vector<double> ref_lse, ref_losses;
  reference(h, w, targets, ref_lse, ref_losses);
  EXPECT_LT(relative_error(doubles(lse), ref_lse), 1e-6);
  EXPECT_LT(relative_error(doubles(losses), ref_losses), 1e-5);
  for (std::int64_t i = 0; i < kRows; ++i)
    if (targets[i] == kIgnoreIndex) EXPECT_EQ(doubles(losses)[i], 0.0) << "ignored row " << i;
}

TEST(VocabParallelCrossEntropy, OneSliceAloneIsNotTheLoss) {
  // Without the group's reductions a rank's loss is its slice's: the check
  // above would fail (what the MPI equivalence test sees when they are removed).
  const std::vector<double> h = f32_values(random_vector(kRows * kChannels, 1));
  const std::vector<double> w = f32_values(random_vector(kVocab * kChannels, 2, 0.5));
  const std::vector<std::int32_t> targets = make_targets();
  Tensor losses = Tensor::empty({kRows}, DType::f32), lse = Tensor::empty({kRows}, DType::f32);
  sliced_forward(host_tensor({kRows, kChannels}, h), w, targets_tensor(targets), losses, lse, /*reduce=*/false);
  std::vector<double> ref_lse, ref_losses;
  reference(h, w, targets, ref_lse, ref_losses);
  EXPECT_GT(relative_error(doubles(lse), ref_lse), 1e-3);
}

TEST(VocabParallelCrossEntropy, BackwardMatchesFiniteDifferences) {
  const std::vector<double> h = f32_values(random_vector(kRows * kChannels, 3));
  const std::vector<double> w = f32_values(random_vector(kVocab * kChannels, 4, 0.5));
  const std::vector<std::int32_t> targets = make_targets();
  const Tensor th = host_tensor({kRows, kChannels}, h), tt = targets_tensor(targets);
  Tensor losses = Tensor::empty({kRows}, DType::f32), lse = Tensor::empty({kRows}, DType::f32);
  sliced_forward(th, w, tt, losses, lse, /*reduce=*/true);

  const float loss_scale = 0.5f / kRows;
  const Tensor scale = from_floats({1}, {loss_scale});
  std::vector<double> dh(kRows * kChannels, 0.0), dw(kVocab * kChannels, 0.0);
  const std::vector<double> dw0 = f32_values(random_vector(kVocab * kChannels, 5, 0.1));  // += is checked
  for (const Slice& s : kSlices) {
    Tensor part = Tensor::empty({kRows, kChannels}, DType::f32);
    Tensor dws = slice_of(dw0, s);
    ops::cross_entropy_slice_backward(host_context(), th, slice_of(w, s), tt, s.first, kVocab, lse, scale, kChunk, part,
                                      dws);
    const std::vector<double> p = doubles(part), g = doubles(dws);
    for (std::size_t e = 0; e < p.size(); ++e) dh[e] += p[e];  // the group's all_reduce_sum of dh
    for (std::int64_t e = 0; e < s.rows * kChannels; ++e)
      dw[s.first * kChannels + e] = g[e] - dw0[s.first * kChannels + e];
  }
  auto objective = [&](const std::vector<double>& hx, const std::vector<double>& wx) {
    std::vector<double> l, losses_x;
    reference(hx, wx, targets, l, losses_x);
    double total = 0;
    for (double x : losses_x) total += loss_scale * x;
    return total;
  };
  const std::vector<double> uh = random_vector(h.size(), 6), uw = random_vector(w.size(), 7);
  const double fd_h = directional_derivative([&](const std::vector<double>& x) { return objective(x, w); }, h, uh);
  const double fd_w = directional_derivative([&](const std::vector<double>& x) { return objective(h, x); }, w, uw);
  EXPECT_NEAR(dot(dh, uh), fd_h, 2e-5 * std::max(1.0, std::abs(fd_h)));
  EXPECT_NEAR(dot(dw, uw), fd_w, 2e-5 * std::max(1.0, std::abs(fd_w)));
}

TEST(VocabParallelEmbedding, SlicesSumToTheLookupAndTheirGradients) {
  const std::vector<double> table = f32_values(random_vector(kVocab * kChannels, 8));
  std::vector<std::int32_t> ids{0, 18, 19, 36, 5, 19, 0, 30};
  const Tensor tokens = targets_tensor(ids);
  const auto n = static_cast<std::int64_t>(ids.size());
  Tensor whole = Tensor::empty({n, kChannels}, DType::f32);
  ops::embedding_forward(host_context(), tokens, host_tensor({kVocab, kChannels}, table), whole);
  std::vector<double> sum(static_cast<std::size_t>(n * kChannels), 0.0);
  const std::vector<double> dout = f32_values(random_vector(n * kChannels, 9));
  Tensor dwhole = Tensor::zeros({kVocab, kChannels}, DType::f32);
  ops::embedding_backward(host_context(), tokens, host_tensor({n, kChannels}, dout), dwhole);
  std::vector<double> dsliced;
  for (const Slice& s : kSlices) {
    Tensor part = Tensor::empty({n, kChannels}, DType::f32);
    ops::embedding_forward_rows(host_context(), tokens, slice_of(table, s), s.first, kVocab, part);
    const std::vector<double> p = doubles(part);
    for (std::size_t e = 0; e < p.size(); ++e) sum[e] += p[e];
    Tensor ds = Tensor::zeros({s.rows, kChannels}, DType::f32);
    ops::embedding_backward_rows(host_context(), tokens, host_tensor({n, kChannels}, dout), s.first, ds);
    for (double x : doubles(ds)) dsliced.push_back(x);
  }
  EXPECT_EQ(sum, doubles(whole)) << "x + 0: the slices' sum is the lookup bit for bit";
  EXPECT_EQ(dsliced, doubles(dwhole));
  Tensor bad = targets_tensor({kVocab});
  Tensor out = Tensor::empty({1, kChannels}, DType::f32);
  EXPECT_THROW(ops::embedding_forward_rows(host_context(), bad, slice_of(table, kSlices[1]), kSlices[1].first, kVocab,
                                           out),
               Error);
}
