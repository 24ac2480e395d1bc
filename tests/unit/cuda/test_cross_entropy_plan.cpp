// The CUDA fused cross entropy replayed on the host, no GPU: the chunk plans
// of kernels/cuda/cross_entropy_plan.hpp (the cuBLASLt GEMMs, operands and
// offsets the CUDA head executes) run through OpenBLAS's column-major
// cblas_sgemm with exactly their parameters, and the per-chunk steps between
// them use the kernels/math/cross_entropy.hpp functions the CUDA kernels
// call, in the CUDA kernels' order of operations (bias added to the f32
// logit, running max, softmax terms, rescaled sum; dlogit with the target
// correction). Losses, lse, dh, dw and dbias must match the host op
// (ops::cross_entropy_forward/backward) for the tiny Llama and ViT heads at
// their real widths and for Llama 3's 128256-token vocabulary at the default
// chunk (a partial last chunk; hidden size cut to 16 so w fits a unit test:
// the real 1B head's plans are checked for consistency only). A plan with a
// flipped transpose, swapped operands, a wrong leading dimension or a dh
// that does not accumulate across chunks fails the replay: the test can fail.
// Tensor parallelism's vocabulary-parallel slices run the same plans over a
// slice's rows with the targets moved by its first row
// (math::cross_entropy_local_target): each slice's replay must match the
// host's slice ops, a wrong first row must not, and the slices combined
// with the shared math (math::cross_entropy_slice_sum_exp, log_sum_exp)
// must give the whole head's losses, lse, dh and dw.
#include <cblas.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <utility>
#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "kernels/cuda/cross_entropy_plan.hpp"
#include "kernels/math/cross_entropy.hpp"
#include "kernels/math/pointwise.hpp"
#include "kernels/ops.hpp"
#include "runtime/execution_context.hpp"
#include "unit/cuda/preset_shapes.hpp"

using namespace ftrain;
using namespace ftrain::cuda;

namespace {

// vocab: w's rows. A vocabulary-parallel slice (tensor parallelism) holds
// rows [first_row, first_row + vocab) of a larger head: no bias (b empty),
// targets still ids of the whole vocabulary, and its backward takes the
// whole head's lse (whole_lse).
struct Head {
  std::int64_t rows, channels, vocab, chunk;
  std::vector<float> h, w, b, dw_initial, db_initial;
  std::vector<std::int32_t> targets;
  float loss_scale = 0.25f;
  std::int64_t first_row = 0;
  std::vector<float> whole_lse;
};

Head make_head(std::int64_t rows, std::int64_t channels, std::int64_t vocab, std::int64_t chunk) {
  std::mt19937 gen(77);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  auto vec = [&](std::int64_t n, float scale) {
    std::vector<float> v(static_cast<std::size_t>(n));
    for (auto& e : v) e = scale * dist(gen);
    return v;
  };
  Head hd{rows, channels, vocab, chunk, vec(rows * channels, 1.0f), vec(vocab * channels, 0.5f), vec(vocab, 0.3f),
          vec(vocab * channels, 0.01f), vec(vocab, 0.01f), {}};
  for (std::int64_t i = 0; i < rows; ++i)
    hd.targets.push_back(i % 4 == 3 ? kIgnoreIndex : static_cast<std::int32_t>((i * 7919 + vocab / 2) % vocab));
  hd.targets[0] = static_cast<std::int32_t>(vocab - 1);  // the last chunk's last column
  return hd;
}

Tensor tensor_of(const std::vector<float>& v, const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::f32);
  std::copy(v.begin(), v.end(), t.data_as<float>());
  return t;
}
std::vector<float> values(const Tensor& t) { return {t.data_as<float>(), t.data_as<float>() + t.numel()}; }

struct Result {
  std::vector<float> losses, lse, dh, dw, db;
  std::vector<float> target_logit;  // the forward's picked logit (a slice's output)
};

Tensor targets_of(const Head& hd) {
  Tensor t = Tensor::empty({hd.rows}, DType::i32);
  std::copy(hd.targets.begin(), hd.targets.end(), t.data_as<std::int32_t>());
  return t;
}

Result host_op(const Head& hd) {
  Tensor h = tensor_of(hd.h, {hd.rows, hd.channels}), w = tensor_of(hd.w, {hd.vocab, hd.channels});
  // An empty b: a head without bias (and no db).
  const bool bias = !hd.b.empty();
  Tensor b = bias ? tensor_of(hd.b, {hd.vocab}) : Tensor();
  Tensor t = targets_of(hd);
  Tensor losses = Tensor::empty({hd.rows}, DType::f32), lse = Tensor::empty({hd.rows}, DType::f32);
  ExecutionContext& ctx = host_context();
  ops::cross_entropy_forward(ctx, h, w, bias ? &b : nullptr, t, hd.chunk, losses, lse);
  Tensor scale = tensor_of({hd.loss_scale}, {1});
  Tensor dh = Tensor::empty({hd.rows, hd.channels}, DType::f32), dw = tensor_of(hd.dw_initial, {hd.vocab, hd.channels});
  Tensor db = bias ? tensor_of(hd.db_initial, {hd.vocab}) : Tensor();
  ops::cross_entropy_backward(ctx, h, w, bias ? &b : nullptr, t, lse, scale, hd.chunk, dh, dw, bias ? &db : nullptr);
  return {values(losses), values(lse), values(dh), values(dw), bias ? values(db) : std::vector<float>{}};
}

// The host's vocabulary-parallel ops on a slice (ops::cross_entropy_slice_forward
// and _backward, the latter with the whole head's lse) of a head of `vocab` rows.
Result host_slice_op(const Head& sl, std::int64_t vocab) {
  Tensor h = tensor_of(sl.h, {sl.rows, sl.channels}), w = tensor_of(sl.w, {sl.vocab, sl.channels});
  Tensor t = targets_of(sl);
  Tensor local_lse = Tensor::empty({sl.rows}, DType::f32), picked = Tensor::empty({sl.rows}, DType::f32);
  ExecutionContext& ctx = host_context();
  ops::cross_entropy_slice_forward(ctx, h, w, t, sl.first_row, vocab, sl.chunk, local_lse, picked);
  Tensor whole_lse = tensor_of(sl.whole_lse, {sl.rows}), scale = tensor_of({sl.loss_scale}, {1});
  Tensor dh = Tensor::empty({sl.rows, sl.channels}, DType::f32), dw = tensor_of(sl.dw_initial, {sl.vocab, sl.channels});
  ops::cross_entropy_slice_backward(ctx, h, w, t, sl.first_row, vocab, whole_lse, scale, sl.chunk, dh, dw);
  return {{}, values(local_lse), values(dh), values(dw), {}, values(picked)};
}

// The operands a chunk's GEMMs read and write, by the plan's own naming of
// the linear layer they are: x = h, w = the chunk's rows of w, dy = dlogit,
// y = logits, dx = dh, dw = the chunk's rows of dw.
// Each with the elements available from that pointer on (the replay never
// reads or writes past them: a plan that would is refused, as cuBLASLt would
// compute garbage).
struct Span {
  const float* data;
  std::int64_t size;
};
struct ChunkBuffers {
  Span x, w, dy;
  float* y;
  std::int64_t y_size;
  float* dx;
  std::int64_t dx_size;
  float* dw;
  std::int64_t dw_size;
};

Span input(const ChunkBuffers& c, LinearOperand o) {
  switch (o) {
    case LinearOperand::x: return c.x;
    case LinearOperand::w: return c.w;
    case LinearOperand::dy: return c.dy;
    default: return {nullptr, 0};
  }
}
std::pair<float*, std::int64_t> output(const ChunkBuffers& c, LinearOperand o) {
  switch (o) {
    case LinearOperand::y: return {c.y, c.y_size};
    case LinearOperand::dx: return {c.dx, c.dx_size};
    case LinearOperand::dw: return {c.dw, c.dw_size};
    default: return {nullptr, 0};
  }
}

// The executor places each plan's operand alignments from its pointers
// (cublaslt_plan.hpp); here every operand as if in a fresh 256-byte block.
constexpr GemmOperandAlignment kAllocated{256, 256, 256, 256, 256};

std::int64_t extent(std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  return rows == 0 || cols == 0 ? 0 : (cols - 1) * ld + rows;
}

// cblas_sgemm with exactly the plan's parameters; false when the plan cannot
// run as given (inconsistent, an output as an input, or past a buffer).
bool run(const GemmPlan& p, const ChunkBuffers& c) {
  if (!gemm_plan_problem(placed(p, kAllocated)).empty()) return false;
  const Span a = input(c, p.a), b = input(c, p.b);
  const auto [out, out_size] = output(c, p.c);
  if (a.data == nullptr || b.data == nullptr || out == nullptr) return false;
  const std::int64_t a_rows = stored_rows(p.transa, p.m, p.k), a_cols = p.transa == Transpose::none ? p.k : p.m;
  const std::int64_t b_rows = stored_rows(p.transb, p.k, p.n), b_cols = p.transb == Transpose::none ? p.n : p.k;
  if (extent(a_rows, a_cols, p.lda) > a.size || extent(b_rows, b_cols, p.ldb) > b.size ||
      extent(p.m, p.n, p.ldc) > out_size)
    return false;
  cblas_sgemm(CblasColMajor, p.transa == Transpose::none ? CblasNoTrans : CblasTrans,
              p.transb == Transpose::none ? CblasNoTrans : CblasTrans, static_cast<int>(p.m), static_cast<int>(p.n),
              static_cast<int>(p.k), p.alpha, a.data, static_cast<int>(p.lda), b.data, static_cast<int>(p.ldb), p.beta, out,
              static_cast<int>(p.ldc));
  return true;
}

using PlanEdit = std::function<void(std::vector<CrossEntropyChunkPlan>&)>;

// The CUDA head's algorithm (cross_entropy_head.cpp) on the host: its plans
// (after `edit`, the mutation under test), the shared math between them.
// Every GEMM operand is sized exactly; a plan that reaches past one is
// caught by gemm_plan_problem or gives wrong numbers.
bool replay(const Head& hd, const PlanEdit& edit, Result& r) {
  const std::int64_t N = hd.rows, C = hd.channels;
  std::vector<CrossEntropyChunkPlan> plans =
      plan_cross_entropy_head({N, C, hd.vocab, hd.chunk, GemmElement::f32, GemmElement::f32, true});
  if (edit) edit(plans);
  const std::int64_t chunk = cross_entropy_chunk_width(hd.vocab, hd.chunk);
  std::vector<float> logits(static_cast<std::size_t>(N * chunk));
  std::vector<float> row_max(static_cast<std::size_t>(N), -INFINITY), row_sum(static_cast<std::size_t>(N), 0.0f),
      picked(static_cast<std::size_t>(N), 0.0f);
  const bool bias = !hd.b.empty();
  const std::int64_t w_size = hd.vocab * C;
  auto buffers = [&](const CrossEntropyChunkPlan& p) {
    if (p.w_offset < 0 || p.w_offset > w_size) return ChunkBuffers{};
    return ChunkBuffers{{hd.h.data(), N * C},
                        {hd.w.data() + p.w_offset, w_size - p.w_offset},
                        {logits.data(), N * chunk},
                        logits.data(),
                        N * chunk,
                        r.dh.data(),
                        N * C,
                        r.dw.data() + p.w_offset,
                        w_size - p.w_offset};
  };
  r.dh.assign(static_cast<std::size_t>(N * C), 7.0f);  // garbage: the first chunk must overwrite
  r.dw = hd.dw_initial;
  r.db = hd.db_initial;
  for (const auto& p : plans) {
    if (!run(p.logits, buffers(p))) return false;
    for (std::int64_t i = 0; i < N; ++i) {  // cross_entropy.cu's forward step, one row
      float* row = logits.data() + i * p.width;
      float m = -INFINITY;
      for (std::int64_t c = 0; c < p.width; ++c) {
        if (bias) row[c] = math::add_value(row[c], hd.b[static_cast<std::size_t>(p.v0 + c)]);
        m = math::running_max(m, row[c]);
      }
      const float new_max = math::running_max(row_max[i], m);
      float sum = 0.0f;
      for (std::int64_t c = 0; c < p.width; ++c) sum += math::softmax_term(row[c], new_max);
      row_sum[i] = math::rescaled_running_sum(row_sum[i], row_max[i], new_max, sum);
      row_max[i] = new_max;
      const std::int64_t t = math::cross_entropy_local_target(hd.targets[i], hd.first_row);
      if (t >= p.v0 && t < p.v0 + p.width) picked[i] = row[t - p.v0];
    }
  }
  r.losses.assign(static_cast<std::size_t>(N), 0.0f);
  r.lse.assign(static_cast<std::size_t>(N), 0.0f);
  for (std::int64_t i = 0; i < N; ++i) {
    r.lse[i] = math::log_sum_exp(row_max[i], row_sum[i]);
    r.losses[i] = math::cross_entropy_loss(r.lse[i], picked[i], hd.targets[i] == math::kCrossEntropyIgnoreIndex);
  }
  r.target_logit = picked;
  // A slice's gradient is against the whole row's softmax.
  const std::vector<float>& backward_lse = hd.whole_lse.empty() ? r.lse : hd.whole_lse;
  for (const auto& p : plans) {
    if (!run(p.logits, buffers(p))) return false;
    for (std::int64_t e = 0; e < N * p.width; ++e) {  // cross_entropy.cu's backward step, one logit
      const std::int64_t i = e / p.width, c = e - i * p.width;
      const std::int64_t t = math::cross_entropy_local_target(hd.targets[i], hd.first_row);
      float d = 0.0f;
      if (hd.targets[i] != math::kCrossEntropyIgnoreIndex) {
        const float logit = bias ? math::add_value(logits[e], hd.b[static_cast<std::size_t>(p.v0 + c)]) : logits[e];
        d = math::cross_entropy_dlogit(logit, backward_lse[i], hd.loss_scale);
        if (t == p.v0 + c) d = math::cross_entropy_target_correction(d, hd.loss_scale);
      }
      logits[e] = d;
    }
    // The logits buffer now holds dlogit: as dy it is an input, and no plan may write it.
    ChunkBuffers grads = buffers(p);
    grads.y = nullptr;
    if (!run(p.dh, grads) || !run(p.dw, grads)) return false;
    for (std::int64_t c = 0; bias && c < p.width; ++c) {  // the column sum, rows in order
      float sum = 0.0f;
      for (std::int64_t i = 0; i < N; ++i) sum += logits[static_cast<std::size_t>(i * p.width + c)];
      r.db[static_cast<std::size_t>(p.v0 + c)] += sum;
    }
  }
  return true;
}

double difference(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double scale = 1e-3, worst = 0.0;
  for (float v : want) scale = std::max(scale, static_cast<double>(std::fabs(v)));
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(d <= worst)) worst = std::isnan(d) ? INFINITY : d;
  }
  return worst / scale;
}

constexpr double kTolerance = 2e-5;

double worst(const Result& got, const Result& want) {
  return std::max({difference(got.losses, want.losses), difference(got.lse, want.lse), difference(got.dh, want.dh),
                   difference(got.dw, want.dw), difference(got.db, want.db)});
}

void check_head(const Head& hd) {
  const Result want = host_op(hd);
  Result got;
  ASSERT_TRUE(replay(hd, nullptr, got)) << "the plans as made are not executable";
  EXPECT_LT(worst(got, want), kTolerance) << "the CUDA head's plans disagree with the host op";

  auto flip = [](Transpose t) { return t == Transpose::none ? Transpose::transpose : Transpose::none; };
  const std::vector<std::pair<std::string, PlanEdit>> mutations = {
      {"logits transa flipped", [&](auto& ps) { ps.back().logits.transa = flip(ps.back().logits.transa); }},
      {"logits A <-> B", [](auto& ps) { std::swap(ps.front().logits.a, ps.front().logits.b); }},
      {"dh transb flipped", [&](auto& ps) { ps.front().dh.transb = flip(ps.front().dh.transb); }},
      {"dh does not accumulate", [](auto& ps) { ps.back().dh.beta = 0.0f; }},
      {"dh first chunk accumulates garbage", [](auto& ps) { ps.front().dh.beta = 1.0f; }},
      {"dw ldb + 1", [](auto& ps) { ps.front().dw.ldb += 1; }},
      {"dw overwrites", [](auto& ps) { ps.back().dw.beta = 0.0f; }},
      {"w offset of the wrong chunk", [](auto& ps) { ps.back().w_offset = 0; }},
  };
  const bool several_chunks = cross_entropy_chunk_width(hd.vocab, hd.chunk) < hd.vocab;
  for (const auto& [name, edit] : mutations) {
    // With one chunk, the last chunk is the first: beta 0 and offset 0 are right there.
    if (!several_chunks && (name == "dh does not accumulate" || name == "w offset of the wrong chunk")) continue;
    Result bad;
    const bool ran = replay(hd, edit, bad);
    EXPECT_TRUE(!ran || worst(bad, want) > kTolerance) << name << " still matched: the replay cannot catch it";
  }
}

std::int64_t hidden_of(const ftrain::testing::PresetShapes& s) { return *s.norm_widths.rbegin(); }

// Rows [first_row, first_row + rows) of `whole` (a head without bias) as a
// vocabulary-parallel slice; whole_lse: the whole head's lse.
Head slice_of(const Head& whole, std::int64_t first_row, std::int64_t rows, const std::vector<float>& whole_lse) {
  Head sl = whole;
  const auto from = static_cast<std::ptrdiff_t>(first_row * whole.channels),
             to = static_cast<std::ptrdiff_t>((first_row + rows) * whole.channels);
  sl.vocab = rows;
  sl.first_row = first_row;
  sl.whole_lse = whole_lse;
  sl.w.assign(whole.w.begin() + from, whole.w.begin() + to);
  sl.dw_initial.assign(whole.dw_initial.begin() + from, whole.dw_initial.begin() + to);
  return sl;
}

// Every output of a slice, each present on both sides (an output missing on
// both is a failure, not a match).
double worst_slice(const Result& got, const Result& want) {
  double w = 0.0;
  for (const auto field : {&Result::lse, &Result::target_logit, &Result::dh, &Result::dw}) {
    if ((got.*field).empty() || (want.*field).empty()) return INFINITY;
    w = std::max(w, difference(got.*field, want.*field));
  }
  return w;
}

// The vocabulary-parallel head over `slices` slices of a head without bias:
// each slice's replay (its plans for its own rows, targets moved by its
// first row) against the host's slice ops, a replay with the wrong first
// row failing; then the slices combined with the shared math the CUDA
// combine kernels run (cross_entropy_slice_sum_exp, log_sum_exp,
// cross_entropy_loss) against the whole head's losses and lse, their dh
// summed and dw stacked against its dh and dw.
void check_slices(Head whole, int slices) {
  whole.b.clear();
  whole.db_initial.clear();
  const Result want_whole = host_op(whole);
  const std::int64_t N = whole.rows, base = whole.vocab / slices;
  std::vector<Result> got(static_cast<std::size_t>(slices));
  std::vector<float> dw_stacked;
  for (int k = 0; k < slices; ++k) {
    SCOPED_TRACE("slice " + std::to_string(k) + " of " + std::to_string(slices));
    const std::int64_t first = k * base, rows = k + 1 == slices ? whole.vocab - first : base;
    const Head sl = slice_of(whole, first, rows, want_whole.lse);
    const Result want = host_slice_op(sl, whole.vocab);
    Result& r = got[static_cast<std::size_t>(k)];
    ASSERT_TRUE(replay(sl, nullptr, r)) << "the slice's plans as made are not executable";
    EXPECT_LT(worst_slice(r, want), kTolerance) << "the CUDA slice head disagrees with the host slice ops";
    dw_stacked.insert(dw_stacked.end(), r.dw.begin(), r.dw.end());
    // A slice that holds no row's target has no picked logit nor correction to misplace.
    const bool holds_a_target = std::any_of(sl.targets.begin(), sl.targets.end(), [&](std::int32_t t) {
      const std::int64_t local = math::cross_entropy_local_target(t, first);
      return local >= 0 && local < rows;
    });
    if (!holds_a_target) continue;
    Head shifted = sl;
    shifted.first_row = first == 0 ? 1 : 0;
    Result bad;
    EXPECT_TRUE(!replay(shifted, nullptr, bad) || worst_slice(bad, want) > kTolerance)
        << "a slice replayed with the wrong first row still matched: the replay cannot catch it";
  }
  Result combined{std::vector<float>(static_cast<std::size_t>(N)), std::vector<float>(static_cast<std::size_t>(N)),
                  std::vector<float>(static_cast<std::size_t>(N * whole.channels), 0.0f), dw_stacked, {}, {}};
  for (std::int64_t i = 0; i < N; ++i) {
    const auto at = static_cast<std::size_t>(i);
    float row_max = -INFINITY, sum = 0.0f, picked = 0.0f;
    for (const Result& r : got) row_max = math::running_max(row_max, r.lse[at]);
    for (const Result& r : got) {
      sum += math::cross_entropy_slice_sum_exp(r.lse[at], row_max);
      picked += r.target_logit[at];
    }
    combined.lse[at] = math::log_sum_exp(row_max, sum);
    combined.losses[at] =
        math::cross_entropy_loss(combined.lse[at], picked, whole.targets[at] == math::kCrossEntropyIgnoreIndex);
  }
  for (const Result& r : got)
    for (std::size_t e = 0; e < combined.dh.size(); ++e) combined.dh[e] += r.dh[e];
  for (const auto field : {&Result::losses, &Result::lse, &Result::dh, &Result::dw}) {
    ASSERT_FALSE((want_whole.*field).empty());
    EXPECT_LT(difference(combined.*field, want_whole.*field), kTolerance)
        << "the slices combined disagree with the whole head";
  }
}

}  // namespace

TEST(CrossEntropyPlan, TinyLlamaHeadReplaysLikeTheHostOp) {
  const auto s = ftrain::testing::preset_shapes(FTRAIN_TEST_LLAMA_PLUGIN_DIR, "llama", "tiny");
  ASSERT_GT(s.vocab, 0);
  // Rows past a warp, and a chunk that leaves a partial last chunk.
  check_head(make_head(37, hidden_of(s), s.vocab, std::max<std::int64_t>(1, s.vocab / 3 + 1)));
}

TEST(CrossEntropyPlan, TinyVitHeadReplaysLikeTheHostOp) {
  const auto s = ftrain::testing::preset_shapes(FTRAIN_TEST_VIT_PLUGIN_DIR, "vit", "tiny");
  ASSERT_GT(s.vocab, 0);
  check_head(make_head(5, hidden_of(s), s.vocab, 4096));  // one chunk: the whole class count
  check_head(make_head(5, hidden_of(s), s.vocab, std::max<std::int64_t>(1, s.vocab / 2)));
}

TEST(CrossEntropyPlan, Llama3VocabularyAtTheDefaultChunk) {
  const auto s = ftrain::testing::preset_shapes(FTRAIN_TEST_LLAMA_PLUGIN_DIR, "llama", "llama3.2-1b");
  ASSERT_EQ(s.vocab, 128256);
  // 31 full chunks of 4096 and one of 1280; hidden cut to 16 (w of 2048
  // columns would be 1 GiB in f32).
  check_head(make_head(3, 16, s.vocab, 4096));
  // The real 1B head's plans: consistent, chunks tiling the vocabulary.
  const auto plans = plan_cross_entropy_head({8192, hidden_of(s), s.vocab, 4096, GemmElement::bf16,
                                              GemmElement::f32, true});
  ASSERT_EQ(plans.size(), 32u);
  std::int64_t next = 0;
  for (const auto& p : plans) {
    EXPECT_EQ(p.v0, next);
    next += p.width;
    for (const GemmPlan* g : {&p.logits, &p.dh, &p.dw}) EXPECT_EQ(gemm_plan_problem(placed(*g, kAllocated)), "");
    EXPECT_EQ(p.logits.a_type, GemmElement::bf16);
  }
  EXPECT_EQ(next, s.vocab);
  EXPECT_EQ(plans.back().width, 1280);
}

// Tensor parallelism's vocabulary-parallel head (cross_entropy_slice_*):
// the tiny Llama's head cut in 2 and in 3 uneven slices, with a chunk that
// leaves each slice a partial last chunk and ignored rows; and Llama 3's
// vocabulary in 8 slices (tensor parallel 8) at the default chunk.
TEST(CrossEntropyPlan, VocabularySlicesReplayLikeTheHostSliceOps) {
  const auto s = ftrain::testing::preset_shapes(FTRAIN_TEST_LLAMA_PLUGIN_DIR, "llama", "tiny");
  ASSERT_GT(s.vocab, 6);
  const Head whole = make_head(37, hidden_of(s), s.vocab, std::max<std::int64_t>(1, s.vocab / 5 + 1));
  check_slices(whole, 2);
  check_slices(whole, 3);
  const auto big = ftrain::testing::preset_shapes(FTRAIN_TEST_LLAMA_PLUGIN_DIR, "llama", "llama3.2-1b");
  check_slices(make_head(3, 16, big.vocab, 4096), 8);
}
