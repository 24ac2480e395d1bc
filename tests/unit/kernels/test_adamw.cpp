// adamw_update against a float64 reference of the documented update
// (ops.hpp) over three steps, with weight decay, bias correction and
// gradient scaling; argument errors. The multi-tensor form
// (adamw_update_chunks and its guarded twin): its chunk table, and bit
// equality with one adamw_update per segment over segments with gaps and
// mixed weight-decay flags.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "host_op_checks.hpp"
#include "kernels/adamw_chunks.hpp"
#include "kernels/ops.hpp"

using namespace ftrain;
using namespace ftrain::testing;

FTRAIN_BACKEND_TEST_SUITE(AdamW);

TEST_P(AdamW, ThreeStepsMatchDoubleReference) {
  const std::int64_t n = 4103;  // crosses element-wise chunks, odd tail
  const float lr = 1e-2f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f, grad_scale = 0.5f;
  Tensor param = random_tensor({n}, 1, DType::f32, "param");
  Tensor m = named_zeros({n}, DType::f32, "exp_avg"), v = named_zeros({n}, DType::f32, "exp_avg_sq");
  std::vector<double> p = to_doubles(param), mr(n, 0.0), vr(n, 0.0);
  for (std::int64_t step = 1; step <= 3; ++step) {
    Tensor grad = random_tensor({n}, 10 + static_cast<std::uint64_t>(step), DType::f32, "grad");
    const auto g = to_doubles(grad);
    ops::adamw_update(backend_ctx(), param, grad, m, v, lr, beta1, beta2, eps, weight_decay, step, grad_scale);
    const double b1 = beta1, b2 = beta2;
    for (std::int64_t i = 0; i < n; ++i) {
      const double gi = g[i] * grad_scale;
      mr[i] = b1 * mr[i] + (1 - b1) * gi;
      vr[i] = b2 * vr[i] + (1 - b2) * gi * gi;
      const double mhat = mr[i] / (1 - std::pow(b1, step));
      const double vhat = vr[i] / (1 - std::pow(b2, step));
      p[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + weight_decay * p[i]);
    }
    SCOPED_TRACE("step " + std::to_string(step));
    EXPECT_LT(relative_error(to_doubles(m), mr), 1e-6);
    EXPECT_LT(relative_error(to_doubles(v), vr), 1e-6);
    const auto pk = to_doubles(param);
    for (std::int64_t i = 0; i < n; ++i) ASSERT_NEAR(pk[i], p[i], 1e-6 + 1e-6 * std::abs(p[i])) << "element " << i;
  }
}

TEST_P(AdamW, FirstStepIsSignTimesLearningRate) {
  // With bias correction mhat / sqrt(vhat) = g / |g| on step 1.
  Tensor param = tensor_from({3}, {1.0, -2.0, 0.5});
  Tensor grad = tensor_from({3}, {0.3, -7.0, 1e-3});
  Tensor m = named_zeros({3}, DType::f32, "m"), v = named_zeros({3}, DType::f32, "v");
  ops::adamw_update(backend_ctx(), param, grad, m, v, 0.1f, 0.9f, 0.999f, 1e-12f, 0.0f, 1, 1.0f);
  const auto p = to_doubles(param);
  EXPECT_NEAR(p[0], 0.9, 1e-6);
  EXPECT_NEAR(p[1], -1.9, 1e-6);
  EXPECT_NEAR(p[2], 0.4, 1e-5);
}

TEST_P(AdamW, ArgumentErrors) {
  Tensor param = named_zeros({8}, DType::f32, "layers.0.w");
  Tensor grad_bf16 = named_zeros({8}, DType::bf16, "grad16");
  Tensor m = named_zeros({8}, DType::f32, "m"), v = named_zeros({8}, DType::f32, "v");
  expect_error_mentioning([&] { ops::adamw_update(backend_ctx(), param, grad_bf16, m, v, 1e-3f, 0.9f, 0.99f, 1e-8f, 0, 1, 1); },
                          {"adamw_update", "grad16", "f32"});
  Tensor v_short = named_zeros({7}, DType::f32, "v7");
  expect_error_mentioning([&] { ops::adamw_update(backend_ctx(), param, m, m, v_short, 1e-3f, 0.9f, 0.99f, 1e-8f, 0, 1, 1); },
                          {"adamw_update", "v7"});
  expect_error_mentioning([&] { ops::adamw_update(backend_ctx(), param, m, m, v, 1e-3f, 0.9f, 0.99f, 1e-8f, 0, 0, 1); },
                          {"adamw_update", "step 0", "layers.0.w"});
}

// ---- the multi-tensor AdamW (adamw_update_chunks, kernels/adamw_chunks.hpp) ----

namespace {

// A flat shard of 1000 elements: padding at the front, between segments and
// at the end; decay flags mixed, two adjacent segments with the same flag
// (merged into one range) and one longer than the chunk size used here.
const std::vector<AdamwSegment> kSegments = {
    {3, 200, true}, {203, 17, false}, {240, 301, true}, {541, 60, true}, {610, 5, false}, {700, 290, false}};
constexpr std::int64_t kShard = 1000;
constexpr std::int64_t kSmallChunk = 64;  // several chunks per segment, odd tails

struct AdamwState {
  Tensor p, g, m, v;
};

AdamwState random_state(std::uint64_t seed) {
  return {random_tensor({kShard}, seed, DType::f32, "param"), random_tensor({kShard}, seed + 1, DType::f32, "grad"),
          random_tensor({kShard}, seed + 2, DType::f32, "exp_avg", 0.1),
          tensor_from({kShard}, [&] {
            auto v = random_vector(kShard, seed + 3, 0.01);
            for (double& x : v) x = x * x;
            return v;
          }())};
}

Tensor table_on_backend(const std::vector<AdamwSegment>& segments, std::int64_t chunk = kSmallChunk) {
  return adamw_chunk_table(segments, backend_ctx().device(), "adamw_chunks", chunk);
}

std::vector<std::uint32_t> bits(const Tensor& t) {
  const auto f = read_floats(t);
  std::vector<std::uint32_t> out(f.size());
  std::memcpy(out.data(), f.data(), f.size() * sizeof(float));
  return out;
}

// What the engine did before: one adamw_update per segment, on views.
void per_segment(AdamwState& s, const std::vector<AdamwSegment>& segments, float weight_decay, std::int64_t step,
                 float grad_scale) {
  for (const AdamwSegment& seg : segments) {
    Tensor p = s.p.view({seg.count}, seg.offset), g = s.g.view({seg.count}, seg.offset);
    Tensor m = s.m.view({seg.count}, seg.offset), v = s.v.view({seg.count}, seg.offset);
    ops::adamw_update(backend_ctx(), p, g, m, v, 1e-2f, 0.9f, 0.95f, 1e-8f, seg.weight_decay ? weight_decay : 0.0f,
                      step, grad_scale);
  }
}

void expect_same_bits(const AdamwState& a, const AdamwState& b, const std::string& what) {
  for (auto [x, y, name] : {std::tuple{a.p, b.p, "param"}, {a.m, b.m, "exp_avg"}, {a.v, b.v, "exp_avg_sq"}}) {
    const auto bx = bits(x), by = bits(y);
    for (std::size_t i = 0; i < bx.size(); ++i) ASSERT_EQ(bx[i], by[i]) << what << ": " << name << " element " << i;
  }
}

bool inside_a_segment(std::int64_t i) {
  for (const AdamwSegment& s : kSegments)
    if (i >= s.offset && i < s.offset + s.count) return true;
  return false;
}

}  // namespace

TEST(AdamwChunkTable, RowsCoverTheSegmentsInChunksAndSkipTheGaps) {
  const auto rows = adamw_chunk_rows(kSegments, kSmallChunk);
  ASSERT_EQ(rows.size() % 3, 0u);
  std::vector<int> covered(kShard, 0);  // 1 = decay, 2 = no decay
  std::int64_t end_of_previous = 0;
  for (std::size_t r = 0; r < rows.size(); r += 3) {
    const std::int64_t offset = rows[r], count = rows[r + 1], decay = rows[r + 2];
    EXPECT_GE(offset, end_of_previous) << "row " << r / 3 << ": increasing, no overlap";
    EXPECT_GE(count, 1);
    EXPECT_LE(count, kSmallChunk);
    EXPECT_TRUE(decay == 0 || decay == 1);
    for (std::int64_t i = offset; i < offset + count; ++i) covered[static_cast<std::size_t>(i)] = decay ? 1 : 2;
    end_of_previous = offset + count;
  }
  for (std::int64_t i = 0; i < kShard; ++i) {
    int expected = 0;
    for (const AdamwSegment& s : kSegments)
      if (i >= s.offset && i < s.offset + s.count) expected = s.weight_decay ? 1 : 2;
    ASSERT_EQ(covered[static_cast<std::size_t>(i)], expected) << "element " << i;
  }
  // {240, 301} and {541, 60} share a flag and touch: one range of 361, six
  // chunks (5 x 64 + 41), not 5 + 1 + 1 partial ones.
  std::int64_t chunks_in_merged = 0;
  for (std::size_t r = 0; r < rows.size(); r += 3)
    if (rows[r] >= 240 && rows[r] < 601) ++chunks_in_merged;
  EXPECT_EQ(chunks_in_merged, 6);
  // The default chunk: one row per merged range.
  EXPECT_EQ(adamw_chunk_rows(kSegments).size(), 5u * 3u);
}

TEST(AdamwChunkTable, RefusesOverlapsAndDisorderAndSkipsEmptySegments) {
  EXPECT_TRUE(adamw_chunk_rows({}).empty());
  EXPECT_TRUE(adamw_chunk_rows({{5, 0, true}}).empty());
  EXPECT_FALSE(adamw_chunk_table({{5, 0, true}}, Device::host, "t").defined()) << "nothing to launch";
  EXPECT_THROW(adamw_chunk_rows({{0, 10, true}, {5, 10, true}}), Error);
  EXPECT_THROW(adamw_chunk_rows({{20, 10, true}, {0, 10, true}}), Error);
  EXPECT_THROW(adamw_chunk_rows({{-1, 10, true}}), Error);
  EXPECT_THROW(adamw_chunk_rows({{0, 10, true}}, 0), Error);
}

TEST_P(AdamW, ChunksGiveThePerSegmentBitsAndLeaveGapsAlone) {
  const Tensor chunks = table_on_backend(kSegments);
  AdamwState reference = random_state(40), multi = random_state(40), before = random_state(40);
  for (std::int64_t step = 1; step <= 3; ++step) {
    Tensor g = random_tensor({kShard}, 50 + static_cast<std::uint64_t>(step), DType::f32, "grad");
    reference.g = g;
    multi.g = g;
    per_segment(reference, kSegments, 0.1f, step, 0.5f);
    ops::adamw_update_chunks(backend_ctx(), multi.p, multi.g, multi.m, multi.v, chunks, 1e-2f, 0.9f, 0.95f, 1e-8f,
                             0.1f, step, 0.5f);
    expect_same_bits(reference, multi, "step " + std::to_string(step));
  }
  // Padding (no segment) is untouched: param, m and v keep their first bits.
  const auto p0 = bits(before.p), p1 = bits(multi.p), m0 = bits(before.m), m1 = bits(multi.m);
  const auto v0 = bits(before.v), v1 = bits(multi.v);
  std::int64_t gaps = 0;
  for (std::int64_t i = 0; i < kShard; ++i) {
    const auto k = static_cast<std::size_t>(i);
    if (inside_a_segment(i)) {
      EXPECT_NE(p0[k], p1[k]) << "element " << i << " was not updated";
      continue;
    }
    ++gaps;
    EXPECT_EQ(p0[k], p1[k]) << "padding element " << i;
    EXPECT_EQ(m0[k], m1[k]) << "padding element " << i;
    EXPECT_EQ(v0[k], v1[k]) << "padding element " << i;
  }
  EXPECT_EQ(gaps, 3 + 20 + 9 + 85 + 10);
}

TEST_P(AdamW, ChunksApplyEachSegmentsOwnDecayFlag) {
  // The same update with every flag flipped, and with decay everywhere and
  // nowhere: each must differ from the real one in every segment (so a
  // kernel that ignored or swapped the flags fails ChunksGiveThePerSegmentBits).
  std::vector<AdamwSegment> flipped = kSegments, all = kSegments, none = kSegments;
  for (auto& s : flipped) s.weight_decay = !s.weight_decay;
  for (auto& s : all) s.weight_decay = true;
  for (auto& s : none) s.weight_decay = false;
  AdamwState real = random_state(60);
  ops::adamw_update_chunks(backend_ctx(), real.p, real.g, real.m, real.v, table_on_backend(kSegments), 1e-2f, 0.9f,
                           0.95f, 1e-8f, 0.1f, 2, 1.0f);
  const auto real_p = bits(real.p);
  for (const auto& [variant, name] : {std::pair{flipped, "flipped"}, {all, "all decayed"}, {none, "none decayed"}}) {
    AdamwState other = random_state(60);
    ops::adamw_update_chunks(backend_ctx(), other.p, other.g, other.m, other.v, table_on_backend(variant), 1e-2f,
                             0.9f, 0.95f, 1e-8f, 0.1f, 2, 1.0f);
    const auto other_p = bits(other.p);
    for (std::size_t s = 0; s < kSegments.size(); ++s) {
      if (variant[s].weight_decay == kSegments[s].weight_decay) continue;
      std::int64_t differing = 0;
      for (std::int64_t i = kSegments[s].offset; i < kSegments[s].offset + kSegments[s].count; ++i)
        differing += real_p[static_cast<std::size_t>(i)] != other_p[static_cast<std::size_t>(i)] ? 1 : 0;
      EXPECT_GT(differing, kSegments[s].count / 2) << name << ": segment " << s;
    }
  }
}

TEST_P(AdamW, GuardedChunksScaleFromTheDeviceAndSkipADivergedStep) {
  const Tensor chunks = table_on_backend(kSegments);
  AdamwState reference = random_state(70), multi = random_state(70);
  Tensor scale = named_zeros({1}, DType::f32, "clip.scale"), clear = named_zeros({1}, DType::i64, "diverged_step");
  ops::fill(backend_ctx(), scale, 0.25f);
  per_segment(reference, kSegments, 0.1f, 2, 0.25f);
  ops::adamw_update_chunks_guarded(backend_ctx(), multi.p, multi.g, multi.m, multi.v, chunks, 1e-2f, 0.9f, 0.95f,
                                   1e-8f, 0.1f, 2, scale, clear);
  expect_same_bits(reference, multi, "guarded, clear");
  Tensor flagged = Tensor::zeros({1}, DType::i64, Device::host, "diverged_step");
  flagged.data_as<std::int64_t>()[0] = 2;
  if (backend_ctx().device() != Device::host) flagged = to_device(flagged, backend_ctx().device());
  ops::adamw_update_chunks_guarded(backend_ctx(), multi.p, multi.g, multi.m, multi.v, chunks, 1e-2f, 0.9f, 0.95f,
                                   1e-8f, 0.1f, 3, scale, flagged);
  expect_same_bits(reference, multi, "guarded, diverged: nothing changes");
}

TEST_P(AdamW, ChunkArgumentErrors) {
  AdamwState s = random_state(80);
  s.p.set_name("layers.0.flat");
  const auto call = [&](const Tensor& chunks) {
    ops::adamw_update_chunks(backend_ctx(), s.p, s.g, s.m, s.v, chunks, 1e-3f, 0.9f, 0.99f, 1e-8f, 0.1f, 1, 1.0f);
  };
  Tensor wrong_dtype = named_zeros({2, 3}, DType::i32, "chunks_i32");
  expect_error_mentioning([&] { call(wrong_dtype); }, {"adamw_update_chunks", "chunks_i32", "i64"});
  Tensor wrong_shape = named_zeros({2, 4}, DType::i64, "chunks_wide");
  expect_error_mentioning([&] { call(wrong_shape); }, {"adamw_update_chunks", "chunks_wide", "offset, count, decay"});
  if (backend_ctx().device() == Device::host) {
    // The host checks every row (a device kernel clamps instead: it cannot throw).
    Tensor past_end = adamw_chunk_table({{990, 20, true}}, Device::host, "chunks_past_end");
    expect_error_mentioning([&] { call(past_end); },
                            {"adamw_update_chunks", "chunks_past_end", "row 0", "layers.0.flat"});
  }
}
