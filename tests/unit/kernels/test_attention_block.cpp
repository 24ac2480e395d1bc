// Ring attention's block ops (op_list.hpp: attention_block_forward, _merge,
// _backward) against the single-sequence attention op: the sequence is cut
// into blocks (the causal load-balancing layout of context parallelism, and
// uneven blocks wider than a 64-row tile), every query block is attended
// against every key block with the tokens' global positions and document
// ids, and the merged result must equal the full attention op on the whole
// sequence (f32 rounding); the blocks' backward, summed, must equal the full
// op's backward and a finite difference of the merged forward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "kernels/ops.hpp"
#include "runtime/execution_context.hpp"
#include "support/op_test_util.hpp"

using namespace ftrain;
using ftrain::testing::random_vector;
using ftrain::testing::tensor_from;

namespace {

using Block = std::vector<std::int64_t>;  // token indices of one block, increasing

struct Case {
  std::int64_t batch = 2, seq = 40, q_heads = 4, kv_heads = 2, head_dim = 8;
  bool causal = true;
  bool documents = false;
  std::vector<Block> blocks;
  std::string name;
  float scale() const { return 1.0f / std::sqrt(static_cast<float>(head_dim)); }
};

// Context parallelism's layout: 2C chunks, rank r holds chunks r and 2C-1-r.
std::vector<Block> load_balanced(std::int64_t seq, int ranks) {
  const std::int64_t chunk = seq / (2 * ranks);
  std::vector<Block> blocks;
  for (int r = 0; r < ranks; ++r) {
    Block b;
    for (std::int64_t c : {static_cast<std::int64_t>(r), static_cast<std::int64_t>(2 * ranks - 1 - r)})
      for (std::int64_t t = c * chunk; t < (c + 1) * chunk; ++t) b.push_back(t);
    blocks.push_back(b);
  }
  return blocks;
}

std::vector<Block> cut(std::int64_t seq, std::vector<std::int64_t> ends) {
  std::vector<Block> blocks;
  std::int64_t begin = 0;
  for (std::int64_t end : ends) {
    Block b(static_cast<std::size_t>(end - begin));
    std::iota(b.begin(), b.end(), begin);
    blocks.push_back(b);
    begin = end;
  }
  EXPECT_EQ(begin, seq);
  return blocks;
}

// Document ids of a packed window: documents of lengths 7, 12, 3, ... repeating.
std::vector<std::int32_t> document_ids(std::int64_t batch, std::int64_t seq) {
  const std::int64_t lengths[] = {7, 12, 3, 17, 5};
  std::vector<std::int32_t> ids;
  for (std::int64_t b = 0; b < batch; ++b) {
    std::int32_t doc = static_cast<std::int32_t>(b);
    std::int64_t left = lengths[b % 5];
    for (std::int64_t t = 0; t < seq; ++t) {
      if (left == 0) left = lengths[++doc % 5];
      ids.push_back(doc);
      --left;
    }
  }
  return ids;
}

Tensor i32_tensor(const Shape& shape, const std::vector<std::int32_t>& values) {
  Tensor t = Tensor::empty(shape, DType::i32, Device::host, "ids");
  std::copy(values.begin(), values.end(), t.data_as<std::int32_t>());
  return t;
}

// Rows `block` of x[B, T, H, D] as [B, n, H, D] (f32).
Tensor take_rows(const Tensor& x, const Block& block) {
  const std::int64_t B = x.dim(0), T = x.dim(1), row = x.dim(2) * x.dim(3), n = static_cast<std::int64_t>(block.size());
  Tensor out = Tensor::empty({B, n, x.dim(2), x.dim(3)}, DType::f32, Device::host, x.name() + ".block");
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t i = 0; i < n; ++i)
      std::copy_n(x.data_as<float>() + (b * T + block[static_cast<std::size_t>(i)]) * row, row,
                  out.data_as<float>() + (b * n + i) * row);
  return out;
}

// x[B, T, H, D] rows `block` += part[B, n, H, D].
void add_rows(Tensor& x, const Block& block, const Tensor& part) {
  const std::int64_t B = x.dim(0), T = x.dim(1), row = x.dim(2) * x.dim(3), n = static_cast<std::int64_t>(block.size());
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t e = 0; e < row; ++e)
        x.data_as<float>()[(b * T + block[static_cast<std::size_t>(i)]) * row + e] +=
            part.data_as<float>()[(b * n + i) * row + e];
}

// Columns `block` of an lse [B, H, T].
Tensor take_lse(const Tensor& lse, const Block& block) {
  const std::int64_t B = lse.dim(0), H = lse.dim(1), T = lse.dim(2), n = static_cast<std::int64_t>(block.size());
  Tensor out = Tensor::empty({B, H, n}, DType::f32, Device::host, "lse.block");
  for (std::int64_t bh = 0; bh < B * H; ++bh)
    for (std::int64_t i = 0; i < n; ++i)
      out.data_as<float>()[bh * n + i] = lse.data_as<float>()[bh * T + block[static_cast<std::size_t>(i)]];
  return out;
}

// Token-indexed i32 [B, T] values (positions or documents) of `block`.
Tensor take_tokens(const std::vector<std::int32_t>& all, std::int64_t batch, std::int64_t seq, const Block& block) {
  const std::int64_t n = static_cast<std::int64_t>(block.size());
  std::vector<std::int32_t> v;
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t i = 0; i < n; ++i) v.push_back(all[static_cast<std::size_t>(b * seq + block[static_cast<std::size_t>(i)])]);
  return i32_tensor({batch, n}, v);
}

struct Inputs {
  Tensor q, k, v, dout, documents;
  std::vector<std::int32_t> positions, ids;
};

Inputs make_inputs(const Case& c, std::uint64_t seed) {
  Inputs in;
  in.q = tensor_from({c.batch, c.seq, c.q_heads, c.head_dim},
                     random_vector(static_cast<std::size_t>(c.batch * c.seq * c.q_heads * c.head_dim), seed));
  const Shape kv{c.batch, c.seq, c.kv_heads, c.head_dim};
  in.k = tensor_from(kv, random_vector(static_cast<std::size_t>(shape_numel(kv)), seed + 1));
  in.v = tensor_from(kv, random_vector(static_cast<std::size_t>(shape_numel(kv)), seed + 2));
  in.dout = tensor_from(in.q.shape(), random_vector(static_cast<std::size_t>(in.q.numel()), seed + 3));
  for (std::int64_t b = 0; b < c.batch; ++b)
    for (std::int64_t t = 0; t < c.seq; ++t) in.positions.push_back(static_cast<std::int32_t>(t));
  in.ids = document_ids(c.batch, c.seq);
  in.documents = i32_tensor({c.batch, c.seq}, in.ids);
  return in;
}

struct Result {
  Tensor out, lse;
};

// The merged attention of query block `qb` over every key block.
Result blocked_forward(const Case& c, const Inputs& in, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Block& qb) {
  ExecutionContext& ctx = host_context();
  const std::int64_t n = static_cast<std::int64_t>(qb.size());
  Result r{Tensor::zeros({c.batch, n, c.q_heads, c.head_dim}, DType::f32, Device::host, "out"),
           Tensor::empty({c.batch, c.q_heads, n}, DType::f32, Device::host, "lse")};
  std::fill_n(r.lse.data_as<float>(), r.lse.numel(), -std::numeric_limits<float>::infinity());
  Tensor qp = take_tokens(in.positions, c.batch, c.seq, qb), qd = take_tokens(in.ids, c.batch, c.seq, qb);
  Tensor qrows = take_rows(q, qb);
  for (const Block& kb : c.blocks) {
    Tensor kp = take_tokens(in.positions, c.batch, c.seq, kb), kd = take_tokens(in.ids, c.batch, c.seq, kb);
    Tensor bo = Tensor::zeros(r.out.shape(), DType::f32, Device::host, "block_out");
    Tensor bl = Tensor::zeros(r.lse.shape(), DType::f32, Device::host, "block_lse");
    ops::attention_block_forward(ctx, qrows, take_rows(k, kb), take_rows(v, kb), qp, kp, c.documents ? &qd : nullptr,
                                 c.documents ? &kd : nullptr, c.causal, c.scale(), bo, bl);
    ops::attention_block_merge(ctx, r.out, r.lse, bo, bl);
  }
  return r;
}

double max_abs_diff(const float* a, const float* b, std::int64_t n) {
  double worst = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    if (std::isinf(a[i]) || std::isinf(b[i])) {
      if (a[i] != b[i]) return std::numeric_limits<double>::infinity();
      continue;
    }
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
  }
  return worst;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (bool causal : {true, false})
    for (bool documents : {false, true}) {
      auto add = [&](Case c, std::string what) {
        c.causal = causal, c.documents = documents;
        c.name = what + (causal ? " causal" : " full") + (documents ? " documents" : "");
        out.push_back(c);
      };
      Case c;
      c.blocks = load_balanced(c.seq, 2);
      add(c, "C 2");
      c.blocks = load_balanced(c.seq, 4);
      add(c, "C 4");
      Case wide;
      wide.seq = 150, wide.kv_heads = 4, wide.batch = 1;
      wide.blocks = cut(wide.seq, {13, 113, 150});  // a block wider than a 64-row tile
      add(wide, "uneven T 150 MHA");
      Case single;
      single.blocks = cut(single.seq, {single.seq});
      add(single, "one block");
    }
  return out;
}

TEST(AttentionBlock, ForwardMergedOverAnySplitEqualsTheFullAttention) {
  ExecutionContext& ctx = host_context();
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const Inputs in = make_inputs(c, 7);
    Tensor out = Tensor::zeros(in.q.shape(), DType::f32), lse = Tensor::zeros({c.batch, c.q_heads, c.seq}, DType::f32);
    ops::attention_forward(ctx, in.q, in.k, in.v, c.causal, c.documents ? &in.documents : nullptr, c.scale(), out, lse);
    for (const Block& qb : c.blocks) {
      const Result r = blocked_forward(c, in, in.q, in.k, in.v, qb);
      const Tensor want_out = take_rows(out, qb), want_lse = take_lse(lse, qb);
      EXPECT_LE(max_abs_diff(r.out.data_as<float>(), want_out.data_as<float>(), want_out.numel()), 2e-6)
          << "out of the block starting at token " << qb.front();
      EXPECT_LE(max_abs_diff(r.lse.data_as<float>(), want_lse.data_as<float>(), want_lse.numel()), 2e-6)
          << "lse of the block starting at token " << qb.front();
    }
  }
}

TEST(AttentionBlock, BackwardSummedOverBlocksEqualsTheFullBackward) {
  ExecutionContext& ctx = host_context();
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const Inputs in = make_inputs(c, 11);
    const Tensor* docs = c.documents ? &in.documents : nullptr;
    Tensor out = Tensor::zeros(in.q.shape(), DType::f32), lse = Tensor::zeros({c.batch, c.q_heads, c.seq}, DType::f32);
    ops::attention_forward(ctx, in.q, in.k, in.v, c.causal, docs, c.scale(), out, lse);
    Tensor dq = Tensor::zeros(in.q.shape(), DType::f32), dk = Tensor::zeros(in.k.shape(), DType::f32),
           dv = Tensor::zeros(in.v.shape(), DType::f32);
    ops::attention_backward(ctx, in.q, in.k, in.v, out, lse, in.dout, c.causal, docs, c.scale(), dq, dk, dv);

    Tensor bq = Tensor::zeros(in.q.shape(), DType::f32), bk = Tensor::zeros(in.k.shape(), DType::f32),
           bv = Tensor::zeros(in.v.shape(), DType::f32);
    for (const Block& qb : c.blocks) {
      // The merged forward of this query block: the final out and lse.
      const Result r = blocked_forward(c, in, in.q, in.k, in.v, qb);
      Tensor qp = take_tokens(in.positions, c.batch, c.seq, qb), qd = take_tokens(in.ids, c.batch, c.seq, qb);
      Tensor dq_block = Tensor::zeros(r.out.shape(), DType::f32);
      for (const Block& kb : c.blocks) {
        Tensor kp = take_tokens(in.positions, c.batch, c.seq, kb), kd = take_tokens(in.ids, c.batch, c.seq, kb);
        Tensor dk_block = Tensor::zeros({c.batch, static_cast<std::int64_t>(kb.size()), c.kv_heads, c.head_dim}, DType::f32);
        Tensor dv_block = Tensor::zeros(dk_block.shape(), DType::f32);
        ops::attention_block_backward(ctx, take_rows(in.q, qb), take_rows(in.k, kb), take_rows(in.v, kb), r.out, r.lse,
                                      take_rows(in.dout, qb), qp, kp, c.documents ? &qd : nullptr,
                                      c.documents ? &kd : nullptr, c.causal, c.scale(), dq_block, dk_block, dv_block);
        add_rows(bk, kb, dk_block);
        add_rows(bv, kb, dv_block);
      }
      add_rows(bq, qb, dq_block);
    }
    EXPECT_LE(max_abs_diff(bq.data_as<float>(), dq.data_as<float>(), dq.numel()), 1e-5) << "dq";
    EXPECT_LE(max_abs_diff(bk.data_as<float>(), dk.data_as<float>(), dk.numel()), 1e-5) << "dk";
    EXPECT_LE(max_abs_diff(bv.data_as<float>(), dv.data_as<float>(), dv.numel()), 1e-5) << "dv";
  }
}

// <dout, out> of the merged blocks as a function of q, k, v: the blocks'
// analytic gradients against its central difference along random directions.
TEST(AttentionBlock, BackwardMatchesFiniteDifferencesOfTheMergedForward) {
  ExecutionContext& ctx = host_context();
  Case c;
  c.batch = 1, c.seq = 12, c.q_heads = 2, c.kv_heads = 1, c.head_dim = 4, c.documents = true;
  c.blocks = load_balanced(c.seq, 3);
  const Inputs in = make_inputs(c, 5);
  auto loss = [&](const Tensor& q, const Tensor& k, const Tensor& v) {
    double total = 0;
    for (const Block& qb : c.blocks) {
      const Result r = blocked_forward(c, in, q, k, v, qb);
      const Tensor g = take_rows(in.dout, qb);
      for (std::int64_t i = 0; i < g.numel(); ++i) total += static_cast<double>(g.data_as<float>()[i]) * r.out.data_as<float>()[i];
    }
    return total;
  };
  Tensor grads[3] = {Tensor::zeros(in.q.shape(), DType::f32), Tensor::zeros(in.k.shape(), DType::f32),
                     Tensor::zeros(in.v.shape(), DType::f32)};
  for (const Block& qb : c.blocks) {
    const Result r = blocked_forward(c, in, in.q, in.k, in.v, qb);
    Tensor qp = take_tokens(in.positions, c.batch, c.seq, qb), qd = take_tokens(in.ids, c.batch, c.seq, qb);
    Tensor dq_block = Tensor::zeros(r.out.shape(), DType::f32);
    for (const Block& kb : c.blocks) {
      Tensor kp = take_tokens(in.positions, c.batch, c.seq, kb), kd = take_tokens(in.ids, c.batch, c.seq, kb);
      Tensor dk_block = Tensor::zeros({c.batch, static_cast<std::int64_t>(kb.size()), c.kv_heads, c.head_dim}, DType::f32);
      Tensor dv_block = Tensor::zeros(dk_block.shape(), DType::f32);
      ops::attention_block_backward(ctx, take_rows(in.q, qb), take_rows(in.k, kb), take_rows(in.v, kb), r.out, r.lse,
                                    take_rows(in.dout, qb), qp, kp, &qd, &kd, c.causal, c.scale(), dq_block, dk_block,
                                    dv_block);
      add_rows(grads[1], kb, dk_block);
      add_rows(grads[2], kb, dv_block);
    }
    add_rows(grads[0], qb, dq_block);
  }
  const char* names[3] = {"q", "k", "v"};
  for (int which = 0; which < 3; ++which) {
    for (std::uint64_t d = 0; d < 3; ++d) {
      const Tensor& x = which == 0 ? in.q : which == 1 ? in.k : in.v;
      const std::vector<double> u = random_vector(static_cast<std::size_t>(x.numel()), 100 + d);
      auto moved = [&](double h) {
        Tensor y = Tensor::empty(x.shape(), DType::f32);
        for (std::int64_t i = 0; i < x.numel(); ++i)
          y.data_as<float>()[i] = static_cast<float>(x.data_as<float>()[i] + h * u[static_cast<std::size_t>(i)]);
        return y;
      };
      const double h = 1e-2;
      const double plus = which == 0 ? loss(moved(h), in.k, in.v) : which == 1 ? loss(in.q, moved(h), in.v) : loss(in.q, in.k, moved(h));
      const double minus = which == 0 ? loss(moved(-h), in.k, in.v) : which == 1 ? loss(in.q, moved(-h), in.v) : loss(in.q, in.k, moved(-h));
      const double numeric = (plus - minus) / (2 * h);
      double analytic = 0, norm = 0;
      for (std::int64_t i = 0; i < x.numel(); ++i) {
        analytic += grads[which].data_as<float>()[i] * u[static_cast<std::size_t>(i)];
        norm += static_cast<double>(grads[which].data_as<float>()[i]) * grads[which].data_as<float>()[i];
      }
      EXPECT_NEAR(analytic, numeric, 2e-3 * std::max(1.0, std::sqrt(norm) * std::sqrt(static_cast<double>(x.numel()))))
          << "d" << names[which] << ", direction " << d;
    }
  }
}

TEST(AttentionBlock, DocumentIdsOnOneSideOnlyAreRefused) {
  ExecutionContext& ctx = host_context();
  Tensor q = Tensor::zeros({1, 4, 2, 4}, DType::f32), k = Tensor::zeros({1, 3, 1, 4}, DType::f32);
  Tensor qp = Tensor::zeros({1, 4}, DType::i32), kp = Tensor::zeros({1, 3}, DType::i32);
  Tensor out = Tensor::zeros(q.shape(), DType::f32), lse = Tensor::zeros({1, 2, 4}, DType::f32);
  try {
    ops::attention_block_forward(ctx, q, k, k, qp, kp, &qp, nullptr, true, 0.5f, out, lse);
    FAIL() << "query document ids without key ids were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attention_block_forward"), std::string::npos) << e.what();
  }
  Tensor short_positions = Tensor::zeros({1, 2}, DType::i32);
  EXPECT_THROW(ops::attention_block_forward(ctx, q, k, k, qp, short_positions, nullptr, nullptr, true, 0.5f, out, lse),
               Error);
}

}  // namespace
