// Context parallelism's attention (deck `parallel context C`): each sample's
// sequence is split over the C ranks of the context group and the attention
// runs as a ring (ring attention), so no rank ever holds the whole
// sequence's keys and values. Public SDK header: a model plugin calls it
// with ctx.parallel->context where it would call ops::attention_*.
//
// Layout (Megatron's and torchtitan's causal load balancing): the sequence
// of length T is cut into 2C chunks of T / (2C) tokens and context rank r
// holds chunks r and 2C-1-r, in that order. Under the causal mask a chunk
// late in the sequence sees many keys and an early one few: pairing them
// gives every rank the same work. context_parallel_tokens() lists a rank's
// tokens; the plugin embeds and runs those tokens only, applies RoPE with
// their global positions (so nothing else changes), and passes the same
// indices as `positions` here (causal by global position). Document ids
// (the packing document mask) are the tokens' own and travel with K and V.
//
// Forward: C steps. In step s a rank attends its queries to the K/V block
// of context rank r - s (its own first), while the block of step s + 1
// travels around the ring (ParallelGroup::start_ring_step before the step's
// attention, finish_ring_step after it: the transfer overlaps the compute);
// the blocks' results merge by log-sum-exp (ops::attention_block_merge).
// Backward: the same ring again; each rank adds its queries' share of dK and
// dV of the block it holds to the running sums that arrive from its
// predecessor and passes them on with the block, so after C steps and one
// last pass every rank holds the whole dK, dV of its own tokens. dQ, dK, dV
// sum in f32 across the ring.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.hpp"
#include "data/batch.hpp"
#include "plugin/parallel_group.hpp"
#include "runtime/execution_context.hpp"

namespace ftrain::layers {

// The indices (in the whole sequence of `seq` tokens) of the tokens context
// rank `rank` of `ranks` holds: chunks rank and 2*ranks-1-rank of seq /
// (2*ranks) tokens each, in increasing order. Throws when seq is not a
// multiple of 2 * ranks, naming both.
std::vector<std::int64_t> context_parallel_tokens(std::int64_t seq, int ranks, int rank);

// i32 [batch, seq / ranks]: context_parallel_tokens for every sample (host).
Tensor context_parallel_positions(std::int64_t batch, std::int64_t seq, int ranks, int rank);

// This rank's tokens of a host batch tensor whose second dimension is the
// sequence ([B, T, ...]: tokens, targets, loss masks, document ids, RoPE
// positions, any dtype): [B, T / ranks, ...], rows in the order of
// context_parallel_tokens. How a trainer cuts its batch for the context
// group. Throws naming the tensor when it is not host memory or T does not
// split.
Tensor context_parallel_slice(const Tensor& batch, int ranks, int rank);

// The batch context rank `rank` of `ranks` computes, from its data index's
// whole host batch [B, T]: inputs, targets, documents and positions cut
// with context_parallel_slice; sequence_index set to the tokens' indices
// in the window; positions (RoPE's, position_offset added by the ops) set
// to the same indices where the whole batch had none, so every token keeps
// the rotation it has in the whole window. A token batch only.
Batch context_parallel_batch(const Batch& whole, int ranks, int rank);

// The attention of this rank's queries over the whole sequence.
// q[B, Tl, Hq, D], k, v[B, Tl, Hkv, D]: this rank's tokens (Tl = T / C, the
// same on every rank of `group`); positions i32[B, Tl]: their indices in the
// whole sequence; documents (nullptr = none) i32[B, Tl]. out[B, Tl, Hq, D]
// (any float dtype), lse f32[B, Hq, Tl] over every visible key of the
// sequence: what ops::attention_forward gives for these rows of the whole
// sequence.
void context_parallel_attention_forward(ExecutionContext& ctx, ParallelGroup& group, const Tensor& q,
                                        const Tensor& k, const Tensor& v, const Tensor& positions,
                                        const Tensor* documents, bool causal, float softmax_scale, Tensor& out,
                                        Tensor& lse);

// dq, dk, dv (written, =) of this rank's tokens given the forward's out and
// lse and dout: what ops::attention_backward gives for these rows.
void context_parallel_attention_backward(ExecutionContext& ctx, ParallelGroup& group, const Tensor& q,
                                         const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                                         const Tensor& dout, const Tensor& positions, const Tensor* documents,
                                         bool causal, float softmax_scale, Tensor& dq, Tensor& dk, Tensor& dv);

}  // namespace ftrain::layers
