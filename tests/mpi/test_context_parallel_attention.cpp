// Context-parallel attention (layers/context_parallel_attention.hpp) over
// the ranks of MPI_COMM_WORLD as one context group: every rank makes the
// same whole-sequence q, k, v, dout, runs the single-sequence attention op
// on them as the reference, and runs the ring on its own tokens (the causal
// load-balancing chunks); its out, lse, dq, dk, dv must equal the
// reference's rows of those tokens within f32 rounding, with and without
// the document mask, causal and full, on synchronous and asynchronous host
// streams; on the simulated device (device memory the host cannot read,
// the staged communicator) bit for bit like the host. Run at np 1, 2 and 4.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "base/error.hpp"
#include "comm/mpi_communicator.hpp"
#include "comm/staged_communicator.hpp"
#include "kernels/backend_registry.hpp"
#include "runtime/backend_library.hpp"
#include "fsdp/parallel_groups.hpp"
#include "kernels/ops.hpp"
#include "layers/context_parallel_attention.hpp"
#include "support/op_test_util.hpp"

using namespace ftrain;
using ftrain::testing::random_vector;
using ftrain::testing::tensor_from;

namespace {

// The layout, written out: 2C chunks, rank r holds chunks r and 2C-1-r.
TEST(ContextParallelLayout, RankRHoldsChunksRAndTwoCMinusOneMinusR) {
  using V = std::vector<std::int64_t>;
  EXPECT_EQ(layers::context_parallel_tokens(8, 2, 0), (V{0, 1, 6, 7}));
  EXPECT_EQ(layers::context_parallel_tokens(8, 2, 1), (V{2, 3, 4, 5}));
  EXPECT_EQ(layers::context_parallel_tokens(8, 4, 0), (V{0, 7}));
  EXPECT_EQ(layers::context_parallel_tokens(8, 4, 1), (V{1, 6}));
  EXPECT_EQ(layers::context_parallel_tokens(8, 4, 3), (V{3, 4}));
  EXPECT_EQ(layers::context_parallel_tokens(6, 1, 0), (V{0, 1, 2, 3, 4, 5}));
  try {
    layers::context_parallel_tokens(10, 4, 0);
    FAIL() << "a sequence of 10 was split into 8 chunks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 2 x 4"), std::string::npos) << e.what();
  }
}

// A batch tensor cut for a context rank: rows of its chunks, any dtype and
// trailing shape, every sample.
TEST(ContextParallelLayout, SliceTakesThisRanksTokensOfEverySample) {
  Tensor tokens = Tensor::empty({2, 8}, DType::i32, Device::host, "tokens");
  for (std::int32_t i = 0; i < 16; ++i) tokens.data_as<std::int32_t>()[i] = 100 * (i / 8) + i % 8;
  Tensor mine = layers::context_parallel_slice(tokens, 2, 1);
  ASSERT_EQ(mine.shape(), Shape({2, 4}));
  const std::vector<std::int32_t> want = {2, 3, 4, 5, 102, 103, 104, 105};
  EXPECT_EQ(std::vector<std::int32_t>(mine.data_as<std::int32_t>(), mine.data_as<std::int32_t>() + 8), want);
  Tensor rows = Tensor::empty({1, 8, 3}, DType::f32, Device::host, "rows");
  for (int i = 0; i < 24; ++i) rows.data_as<float>()[i] = static_cast<float>(i);
  Tensor r0 = layers::context_parallel_slice(rows, 4, 0);  // tokens 0 and 7
  ASSERT_EQ(r0.shape(), Shape({1, 2, 3}));
  EXPECT_EQ(r0.data_as<float>()[0], 0.0f);
  EXPECT_EQ(r0.data_as<float>()[3], 21.0f);
  EXPECT_EQ(r0.data_as<float>()[5], 23.0f);
  EXPECT_THROW(layers::context_parallel_slice(tokens, 3, 0), Error) << "8 tokens do not split into 6 chunks";
}

struct Shape4 {
  std::int64_t batch, seq, q_heads, kv_heads, head_dim;
};

// Rows `tokens` of x[B, T, H, D] as [B, n, H, D].
Tensor take_rows(const Tensor& x, const std::vector<std::int64_t>& tokens) {
  const std::int64_t B = x.dim(0), T = x.dim(1), row = x.dim(2) * x.dim(3), n = static_cast<std::int64_t>(tokens.size());
  Tensor out = Tensor::empty({B, n, x.dim(2), x.dim(3)}, DType::f32, Device::host, x.name());
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t i = 0; i < n; ++i)
      std::copy_n(x.data_as<float>() + (b * T + tokens[static_cast<std::size_t>(i)]) * row, row,
                  out.data_as<float>() + (b * n + i) * row);
  return out;
}

Tensor take_lse(const Tensor& lse, const std::vector<std::int64_t>& tokens) {
  const std::int64_t BH = lse.dim(0) * lse.dim(1), T = lse.dim(2), n = static_cast<std::int64_t>(tokens.size());
  Tensor out = Tensor::empty({lse.dim(0), lse.dim(1), n}, DType::f32);
  for (std::int64_t bh = 0; bh < BH; ++bh)
    for (std::int64_t i = 0; i < n; ++i)
      out.data_as<float>()[bh * n + i] = lse.data_as<float>()[bh * T + tokens[static_cast<std::size_t>(i)]];
  return out;
}

Tensor take_ids(const Tensor& ids, const std::vector<std::int64_t>& tokens) {
  const std::int64_t B = ids.dim(0), T = ids.dim(1), n = static_cast<std::int64_t>(tokens.size());
  Tensor out = Tensor::empty({B, n}, DType::i32);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t i = 0; i < n; ++i)
      out.data_as<std::int32_t>()[b * n + i] = ids.data_as<std::int32_t>()[b * T + tokens[static_cast<std::size_t>(i)]];
  return out;
}

// The largest |a - b| (infinite where exactly one side is infinite).
double max_diff(const Tensor& a, const Tensor& b) {
  double worst = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const float x = a.data_as<float>()[i], y = b.data_as<float>()[i];
    if (std::isinf(x) || std::isinf(y)) {
      if (x != y) return std::numeric_limits<double>::infinity();
      continue;
    }
    worst = std::max(worst, std::abs(static_cast<double>(x) - y));
  }
  return worst;
}

// (asynchronous host streams, document mask, causal)
class ContextParallelAttention : public ::testing::TestWithParam<std::tuple<bool, bool, bool>> {};

TEST_P(ContextParallelAttention, EqualsTheWholeSequencesAttentionForwardAndBackward) {
  const auto [asynchronous, with_documents, causal] = GetParam();
  CommunicatorGroup group(std::make_unique<MpiCommunicator>(MPI_COMM_WORLD), "context group");
  const int C = group.size(), r = group.rank();
  for (const Shape4 s : {Shape4{2, 48, 4, 2, 8}, Shape4{1, 256, 2, 2, 16}}) {
    SCOPED_TRACE("B " + std::to_string(s.batch) + ", T " + std::to_string(s.seq) + ", context rank " +
                 std::to_string(r) + " of " + std::to_string(C));
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
    // The same whole-sequence inputs on every rank (same seeds).
    const Shape qs{s.batch, s.seq, s.q_heads, s.head_dim}, ks{s.batch, s.seq, s.kv_heads, s.head_dim};
    Tensor q = tensor_from(qs, random_vector(static_cast<std::size_t>(shape_numel(qs)), 1));
    Tensor k = tensor_from(ks, random_vector(static_cast<std::size_t>(shape_numel(ks)), 2));
    Tensor v = tensor_from(ks, random_vector(static_cast<std::size_t>(shape_numel(ks)), 3));
    Tensor dout = tensor_from(qs, random_vector(static_cast<std::size_t>(shape_numel(qs)), 4));
    // Documents of 5, 17, 9, ... tokens: boundaries fall inside chunks and ranks.
    Tensor documents = Tensor::empty({s.batch, s.seq}, DType::i32);
    for (std::int64_t b = 0; b < s.batch; ++b) {
      std::int32_t id = 0;
      std::int64_t left = 5;
      for (std::int64_t t = 0; t < s.seq; ++t) {
        if (left-- == 0) left = (++id % 3 == 1 ? 17 : 9) - 1;
        documents.data_as<std::int32_t>()[b * s.seq + t] = id;
      }
    }
    const Tensor* docs = with_documents ? &documents : nullptr;

    ExecutionContext& host = host_context();
    Tensor out = Tensor::zeros(qs, DType::f32), lse = Tensor::zeros({s.batch, s.q_heads, s.seq}, DType::f32);
    ops::attention_forward(host, q, k, v, causal, docs, scale, out, lse);
    Tensor dq = Tensor::zeros(qs, DType::f32), dk = Tensor::zeros(ks, DType::f32), dv = Tensor::zeros(ks, DType::f32);
    ops::attention_backward(host, q, k, v, out, lse, dout, causal, docs, scale, dq, dk, dv);

    const std::vector<std::int64_t> mine = layers::context_parallel_tokens(s.seq, C, r);
    const std::int64_t n = static_cast<std::int64_t>(mine.size());
    ExecutionContext ctx(ExecutionOptions{Device::host, asynchronous});
    Tensor lq = take_rows(q, mine), lk = take_rows(k, mine), lv = take_rows(v, mine), ldout = take_rows(dout, mine);
    Tensor positions = layers::context_parallel_positions(s.batch, s.seq, C, r);
    Tensor local_docs = take_ids(documents, mine);
    Tensor lout = Tensor::zeros(lq.shape(), DType::f32), llse = Tensor::zeros({s.batch, s.q_heads, n}, DType::f32);
    layers::context_parallel_attention_forward(ctx, group, lq, lk, lv, positions, with_documents ? &local_docs : nullptr,
                                               causal, scale, lout, llse);
    Tensor ldq = Tensor::zeros(lq.shape(), DType::f32), ldk = Tensor::zeros(lk.shape(), DType::f32),
           ldv = Tensor::zeros(lv.shape(), DType::f32);
    layers::context_parallel_attention_backward(ctx, group, lq, lk, lv, lout, llse, ldout, positions,
                                                with_documents ? &local_docs : nullptr, causal, scale, ldq, ldk, ldv);
    ctx.synchronize();
    group.drain();

    EXPECT_LE(max_diff(lout, take_rows(out, mine)), 2e-6) << "out";
    EXPECT_LE(max_diff(llse, take_lse(lse, mine)), 2e-6) << "lse";
    EXPECT_LE(max_diff(ldq, take_rows(dq, mine)), 2e-5) << "dq";
    EXPECT_LE(max_diff(ldk, take_rows(dk, mine)), 2e-5) << "dk";
    EXPECT_LE(max_diff(ldv, take_rows(dv, mine)), 2e-5) << "dv";
  }
}

// bf16 storage, as a bf16 run holds q, k, v and their gradients: the ring
// accumulates in f32 and rounds once, so its results are the f32
// reference's rounded to bf16 (within a bf16 ulp or two).
TEST(ContextParallelAttentionBf16, EqualsTheWholeSequencesAttentionWithinBf16Rounding) {
  CommunicatorGroup group(std::make_unique<MpiCommunicator>(MPI_COMM_WORLD), "context group");
  const int C = group.size(), r = group.rank();
  const Shape4 s{2, 64, 4, 2, 16};
  const float scale = 0.25f;
  const Shape qs{s.batch, s.seq, s.q_heads, s.head_dim}, ks{s.batch, s.seq, s.kv_heads, s.head_dim};
  auto bf16_values = [](const Shape& shape, std::uint64_t seed) {
    return tensor_from(shape, random_vector(static_cast<std::size_t>(shape_numel(shape)), seed), DType::bf16);
  };
  Tensor q = bf16_values(qs, 1), k = bf16_values(ks, 2), v = bf16_values(ks, 3), dout = bf16_values(qs, 4);
  auto widened = [](const Tensor& t) {
    Tensor w = Tensor::empty(t.shape(), DType::f32);
    ops::cast(host_context(), t, w);
    return w;
  };
  ExecutionContext& host = host_context();
  Tensor out = Tensor::zeros(qs, DType::f32), lse = Tensor::zeros({s.batch, s.q_heads, s.seq}, DType::f32);
  ops::attention_forward(host, q, k, v, true, nullptr, scale, out, lse);
  Tensor dq = Tensor::zeros(qs, DType::f32), dk = Tensor::zeros(ks, DType::f32), dv = Tensor::zeros(ks, DType::f32);
  ops::attention_backward(host, q, k, v, out, lse, dout, true, nullptr, scale, dq, dk, dv);

  const std::vector<std::int64_t> mine = layers::context_parallel_tokens(s.seq, C, r);
  const std::int64_t n = static_cast<std::int64_t>(mine.size());
  Tensor lq = layers::context_parallel_slice(q, C, r), lk = layers::context_parallel_slice(k, C, r),
         lv = layers::context_parallel_slice(v, C, r), ldout = layers::context_parallel_slice(dout, C, r);
  Tensor positions = layers::context_parallel_positions(s.batch, s.seq, C, r);
  Tensor lout = Tensor::zeros(lq.shape(), DType::bf16), llse = Tensor::zeros({s.batch, s.q_heads, n}, DType::f32);
  ExecutionContext ctx(ExecutionOptions{Device::host, true});
  layers::context_parallel_attention_forward(ctx, group, lq, lk, lv, positions, nullptr, true, scale, lout, llse);
  Tensor ldq = Tensor::zeros(lq.shape(), DType::bf16), ldk = Tensor::zeros(lk.shape(), DType::bf16),
         ldv = Tensor::zeros(lv.shape(), DType::bf16);
  layers::context_parallel_attention_backward(ctx, group, lq, lk, lv, lout, llse, ldout, positions, nullptr, true,
                                              scale, ldq, ldk, ldv);
  ctx.synchronize();
  group.drain();
  auto expect_close = [&](const Tensor& got, const Tensor& want, const char* name) {
    const Tensor g = widened(got);
    double worst = 0;
    for (std::int64_t i = 0; i < g.numel(); ++i) {
      const double w = want.data_as<float>()[i];
      worst = std::max(worst, std::abs(g.data_as<float>()[i] - w) / (1.0 + std::abs(w)));
    }
    EXPECT_LE(worst, 2e-2) << name << " (bf16 ulp 2^-8 relative; a few ulps for the gradients' sums)";
  };
  expect_close(lout, take_rows(out, mine), "out");
  EXPECT_LE(max_diff(llse, take_lse(lse, mine)), 1e-2) << "lse";
  expect_close(ldq, take_rows(dq, mine), "dq");
  expect_close(ldk, take_rows(dk, mine), "dk");
  expect_close(ldv, take_rows(dv, mine), "dv");
}

// The same ring with every tensor in (simulated) device memory and the
// staged communicator, as `device cuda` with `device_comm mpi` runs it: the
// layer never reads device data on the host, and its results are the host
// ring's bit for bit.
TEST(ContextParallelAttentionOnADevice, EqualsTheHostRingBitForBit) {
  // The simulated device, never a real GPU's backend (whose block ops are refused).
  setenv("FTRAIN_CUDA_BACKEND", FTRAIN_TEST_SIM_DEVICE, 1);
  if (find_backend(Device::cuda) == nullptr) load_backend_library(FTRAIN_TEST_SIM_DEVICE);
  if (std::string(find_backend(Device::cuda)->name).find("simulated") == std::string::npos)
    GTEST_SKIP() << "a CUDA backend other than the simulated device is loaded";
  const Shape4 s{2, 64, 4, 2, 8};
  const float scale = 0.3f;
  CommunicatorGroup host_group(std::make_unique<MpiCommunicator>(MPI_COMM_WORLD), "context group");
  CommunicatorGroup device_group(std::make_unique<StagedCommunicator>(MPI_COMM_WORLD), "context group");
  const int C = host_group.size(), r = host_group.rank();
  const std::int64_t n = s.seq / C;
  const Shape qs{s.batch, n, s.q_heads, s.head_dim}, ks{s.batch, n, s.kv_heads, s.head_dim};
  // This rank's own inputs (any values do: both runs get the same).
  const std::uint64_t seed = 100 + static_cast<std::uint64_t>(r);
  Tensor q = tensor_from(qs, random_vector(static_cast<std::size_t>(shape_numel(qs)), seed));
  Tensor k = tensor_from(ks, random_vector(static_cast<std::size_t>(shape_numel(ks)), seed + 10));
  Tensor v = tensor_from(ks, random_vector(static_cast<std::size_t>(shape_numel(ks)), seed + 20));
  Tensor dout = tensor_from(qs, random_vector(static_cast<std::size_t>(shape_numel(qs)), seed + 30));
  Tensor positions = layers::context_parallel_positions(s.batch, s.seq, C, r);
  Tensor documents = Tensor::empty({s.batch, n}, DType::i32);
  for (std::int64_t i = 0; i < documents.numel(); ++i)
    documents.data_as<std::int32_t>()[i] = positions.data_as<std::int32_t>()[i] / 11;

  auto run = [&](ExecutionContext& ctx, CommunicatorGroup& group, Device device) {
    auto put = [&](const Tensor& t) { return device == Device::host ? t : to_device(t, device); };
    Tensor dq_ = put(q), dk_ = put(k), dv_ = put(v), ddout = put(dout), dpos = put(positions), ddocs = put(documents);
    Tensor out = Tensor::zeros(qs, DType::f32, device), lse = Tensor::zeros({s.batch, s.q_heads, n}, DType::f32, device);
    Tensor gq = Tensor::zeros(qs, DType::f32, device), gk = Tensor::zeros(ks, DType::f32, device),
           gv = Tensor::zeros(ks, DType::f32, device);
    layers::context_parallel_attention_forward(ctx, group, dq_, dk_, dv_, dpos, &ddocs, true, scale, out, lse);
    layers::context_parallel_attention_backward(ctx, group, dq_, dk_, dv_, out, lse, ddout, dpos, &ddocs, true, scale,
                                                gq, gk, gv);
    ctx.synchronize();
    group.drain();
    std::vector<Tensor> results;
    for (const Tensor& t : {out, lse, gq, gk, gv}) results.push_back(device == Device::host ? t : to_device(t, Device::host));
    return results;
  };
  ExecutionContext host_ctx(ExecutionOptions{Device::host, false});
  const std::vector<Tensor> want = run(host_ctx, host_group, Device::host);
  for (const bool asynchronous : {false, true}) {
    ExecutionContext device_ctx(ExecutionOptions{Device::cuda, asynchronous});
    const std::vector<Tensor> got = run(device_ctx, device_group, Device::cuda);
    const char* names[] = {"out", "lse", "dq", "dk", "dv"};
    for (std::size_t i = 0; i < want.size(); ++i)
      for (std::int64_t e = 0; e < want[i].numel(); ++e)
        ASSERT_EQ(got[i].data_as<float>()[e], want[i].data_as<float>()[e])
            << names[i] << " element " << e << (asynchronous ? " (asynchronous device streams)" : "");
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, ContextParallelAttention,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "async" : "sync") +
                                  (std::get<1>(info.param) ? "_documents" : "") +
                                  (std::get<2>(info.param) ? "_causal" : "_full");
                         });

}  // namespace
