#include "layers/context_parallel_attention.hpp"

#include <cstring>
#include <limits>
#include <string>
#include <memory>
#include <utility>

#include "base/error.hpp"
#include "kernels/ops.hpp"

namespace ftrain::layers {

std::vector<std::int64_t> context_parallel_tokens(std::int64_t seq, int ranks, int rank) {
  FT_CHECK(ranks >= 1 && rank >= 0 && rank < ranks) << "context rank " << rank << " of " << ranks << " ranks";
  FT_CHECK(seq > 0 && seq % (2 * ranks) == 0)
      << "parallel context " << ranks << ": the sequence length " << seq << " must be a multiple of 2 x " << ranks
      << " = " << 2 * ranks << " (each rank holds two chunks of equal length, causal load balancing)";
  const std::int64_t chunk = seq / (2 * ranks);
  std::vector<std::int64_t> tokens;
  tokens.reserve(static_cast<std::size_t>(2 * chunk));
  for (const std::int64_t c : {static_cast<std::int64_t>(rank), static_cast<std::int64_t>(2 * ranks - 1 - rank)})
    for (std::int64_t t = c * chunk; t < (c + 1) * chunk; ++t) tokens.push_back(t);
  return tokens;
}

Tensor context_parallel_positions(std::int64_t batch, std::int64_t seq, int ranks, int rank) {
  const std::vector<std::int64_t> tokens = context_parallel_tokens(seq, ranks, rank);
  const auto local = static_cast<std::int64_t>(tokens.size());
  Tensor t = Tensor::empty({batch, local}, DType::i32, Device::host, "context_parallel.positions");
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t i = 0; i < local; ++i)
      t.data_as<std::int32_t>()[b * local + i] = static_cast<std::int32_t>(tokens[static_cast<std::size_t>(i)]);
  return t;
}

Tensor context_parallel_slice(const Tensor& batch, int ranks, int rank) {
  FT_CHECK(batch.device() == Device::host && batch.ndim() >= 2)
      << "context-parallel slice of " << batch.describe() << ": a host tensor [B, T, ...] is needed";
  const std::vector<std::int64_t> tokens = context_parallel_tokens(batch.dim(1), ranks, rank);
  Shape shape = batch.shape();
  shape[1] = static_cast<std::int64_t>(tokens.size());
  Tensor out = Tensor::empty(shape, batch.dtype(), Device::host, batch.name() + ".context_rank" + std::to_string(rank));
  const std::size_t row = static_cast<std::size_t>(batch.nbytes() / (batch.dim(0) * batch.dim(1)));
  const auto* src = static_cast<const char*>(batch.data());
  auto* dst = static_cast<char*>(out.data());
  for (std::int64_t b = 0; b < batch.dim(0); ++b)
    for (std::size_t i = 0; i < tokens.size(); ++i)
      std::memcpy(dst + (static_cast<std::size_t>(b) * tokens.size() + i) * row,
                  src + (static_cast<std::size_t>(b * batch.dim(1) + tokens[i])) * row, row);
  return out;
}

Batch context_parallel_batch(const Batch& whole, int ranks, int rank) {
  FT_CHECK(whole.inputs.defined() && whole.inputs.ndim() == 2 && whole.inputs.dtype() == DType::i32)
      << "parallel context " << ranks << " splits token windows [B, T]; the batch's inputs are "
      << whole.inputs.describe();
  Batch mine = whole;
  mine.inputs = context_parallel_slice(whole.inputs, ranks, rank);
  if (whole.targets.defined()) mine.targets = context_parallel_slice(whole.targets, ranks, rank);
  if (whole.documents.defined()) mine.documents = context_parallel_slice(whole.documents, ranks, rank);
  mine.sequence_index = context_parallel_positions(whole.inputs.dim(0), whole.inputs.dim(1), ranks, rank);
  mine.positions = whole.positions.defined() ? context_parallel_slice(whole.positions, ranks, rank)
                                             : mine.sequence_index;
  return mine;
}

namespace {

constexpr float kMinusInfinity = -std::numeric_limits<float>::infinity();

Tensor like(const Tensor& t, DType dtype, const char* name) { return Tensor::empty(t.shape(), dtype, t.device(), name); }

// The tokens of one block: what travels around the ring with it.
struct KvBlock {
  Tensor k, v, positions, documents;  // documents undefined without a document mask
  const Tensor* document_ids() const { return documents.defined() ? &documents : nullptr; }
};

KvBlock empty_like(const KvBlock& b, const char* which) {
  KvBlock n;
  n.k = like(b.k, b.k.dtype(), which);
  n.v = like(b.v, b.v.dtype(), which);
  n.positions = like(b.positions, DType::i32, which);
  if (b.documents.defined()) n.documents = like(b.documents, DType::i32, which);
  return n;
}

// The ring steps passing one block on to the successor (received from the predecessor).
struct BlockTransfer {
  std::vector<std::unique_ptr<ParallelGroup::RingStep>> steps;
};

BlockTransfer start(ExecutionContext& ctx, ParallelGroup& group, const KvBlock& send, KvBlock& recv) {
  BlockTransfer t;
  t.steps.push_back(group.start_ring_step(ctx, send.k, recv.k));
  t.steps.push_back(group.start_ring_step(ctx, send.v, recv.v));
  t.steps.push_back(group.start_ring_step(ctx, send.positions, recv.positions));
  if (send.documents.defined()) t.steps.push_back(group.start_ring_step(ctx, send.documents, recv.documents));
  return t;
}

void finish(ExecutionContext& ctx, ParallelGroup& group, BlockTransfer& t) {
  for (auto& step : t.steps) group.finish_ring_step(ctx, std::move(step));
  t.steps.clear();
}

void check_local(const char* what, ParallelGroup& group, const Tensor& q, const Tensor& k, const Tensor& positions,
                 const Tensor* documents) {
  FT_CHECK(q.ndim() == 4 && k.ndim() == 4 && q.dim(0) == k.dim(0) && q.dim(1) == k.dim(1))
      << what << ": q " << q.describe() << " and k " << k.describe()
      << " must be this rank's tokens, [B, T/C, heads, D] with the same B and T/C";
  FT_CHECK(positions.dtype() == DType::i32 && positions.shape() == Shape({q.dim(0), q.dim(1)}))
      << what << ": positions " << positions.describe() << " must be i32[" << q.dim(0) << ", " << q.dim(1)
      << "], the tokens' indices in the whole sequence";
  FT_CHECK(documents == nullptr || documents->shape() == positions.shape())
      << what << ": documents " << documents->describe() << " must be shaped like positions " << positions.describe();
  FT_CHECK(group.size() >= 1) << what << ": a context group of " << group.size() << " ranks";
}

}  // namespace

void context_parallel_attention_forward(ExecutionContext& ctx, ParallelGroup& group, const Tensor& q,
                                        const Tensor& k, const Tensor& v, const Tensor& positions,
                                        const Tensor* documents, bool causal, float softmax_scale, Tensor& out,
                                        Tensor& lse) {
  constexpr const char* what = "context-parallel attention forward";
  check_local(what, group, q, k, positions, documents);
  FT_CHECK(lse.dtype() == DType::f32) << what << ": lse " << lse.describe() << " must be f32";
  const int ranks = group.size();
  // The merge accumulates in f32: out itself when it is f32.
  Tensor acc = out.dtype() == DType::f32 ? out : like(out, DType::f32, "context_parallel.out");
  ops::fill(ctx, acc, 0.0f);
  ops::fill(ctx, lse, kMinusInfinity);
  Tensor block_out = like(out, DType::f32, "context_parallel.block_out");
  Tensor block_lse = like(lse, DType::f32, "context_parallel.block_lse");

  KvBlock own{k, v, positions, documents ? *documents : Tensor()};
  KvBlock buffers[2] = {empty_like(own, "context_parallel.kv_a"), empty_like(own, "context_parallel.kv_b")};
  const KvBlock* current = &own;
  for (int step = 0; step < ranks; ++step) {
    // The next block travels while this one's attention runs.
    KvBlock& next = buffers[step % 2];
    BlockTransfer transfer;
    if (step + 1 < ranks) transfer = start(ctx, group, *current, next);
    ops::attention_block_forward(ctx, q, current->k, current->v, positions, current->positions, documents,
                                 current->document_ids(), causal, softmax_scale, block_out, block_lse);
    ops::attention_block_merge(ctx, acc, lse, block_out, block_lse);
    if (step + 1 < ranks) {
      finish(ctx, group, transfer);
      current = &next;
    }
  }
  if (acc.data() != out.data()) ops::cast(ctx, acc, out);
}

void context_parallel_attention_backward(ExecutionContext& ctx, ParallelGroup& group, const Tensor& q,
                                         const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                                         const Tensor& dout, const Tensor& positions, const Tensor* documents,
                                         bool causal, float softmax_scale, Tensor& dq, Tensor& dk, Tensor& dv) {
  constexpr const char* what = "context-parallel attention backward";
  check_local(what, group, q, k, positions, documents);
  const int ranks = group.size();
  Tensor dq_acc = dq.dtype() == DType::f32 ? dq : like(dq, DType::f32, "context_parallel.dq");
  ops::fill(ctx, dq_acc, 0.0f);

  KvBlock own{k, v, positions, documents ? *documents : Tensor()};
  KvBlock buffers[2] = {empty_like(own, "context_parallel.kv_a"), empty_like(own, "context_parallel.kv_b")};
  // dK and dV travel as one f32 buffer [dK | dV]. `mine` takes this rank's
  // share of the held block's gradients while the running sums of that
  // block arrive into sums[s % 2]; the share is then added to them and they
  // go on to the successor. Step 0 has no sums to add to: its share is sent
  // as it is, from sums[1]. A sent buffer stays untouched until its
  // exchange finished (the next step), hence two.
  const std::int64_t kv = k.numel();
  auto pair = [&](const char* name) { return Tensor::empty({2 * kv}, DType::f32, k.device(), name); };
  auto half = [&](const Tensor& both, int which, const char* name) { return both.view(k.shape(), which * kv, name); };
  Tensor mine = pair("context_parallel.dkv");
  Tensor sums[2] = {pair("context_parallel.dkv_sums_a"), pair("context_parallel.dkv_sums_b")};
  std::unique_ptr<ParallelGroup::RingStep> in_flight;  // the running sums on their way

  const KvBlock* current = &own;
  for (int step = 0; step < ranks; ++step) {
    KvBlock& next = buffers[step % 2];
    BlockTransfer transfer;
    if (step + 1 < ranks) transfer = start(ctx, group, *current, next);
    Tensor& share = step == 0 ? sums[1] : mine;
    ops::fill(ctx, share, 0.0f);
    Tensor share_k = half(share, 0, "context_parallel.dk"), share_v = half(share, 1, "context_parallel.dv");
    ops::attention_block_backward(ctx, q, current->k, current->v, out, lse, dout, positions, current->positions,
                                  documents, current->document_ids(), causal, softmax_scale, dq_acc, share_k,
                                  share_v);
    Tensor& send = sums[(step + 1) % 2];  // step 0: the share itself; later: the sums that arrived
    if (step > 0) {
      // The sums of the block held now, from the ranks it visited before.
      group.finish_ring_step(ctx, std::move(in_flight));
      ops::add_inplace(ctx, send, mine);
    }
    // On to the successor, which holds this block next (after the last
    // step: its owner).
    in_flight = group.start_ring_step(ctx, send, sums[step % 2]);
    if (step + 1 < ranks) {
      finish(ctx, group, transfer);
      current = &next;
    }
  }
  group.finish_ring_step(ctx, std::move(in_flight));
  const Tensor& home = sums[(ranks - 1) % 2];
  ops::cast(ctx, half(home, 0, "context_parallel.dk"), dk);
  ops::cast(ctx, half(home, 1, "context_parallel.dv"), dv);
  if (dq_acc.data() != dq.data()) ops::cast(ctx, dq_acc, dq);
}

}  // namespace ftrain::layers
