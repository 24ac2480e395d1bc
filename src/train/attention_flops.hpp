// The attention FLOPs a document mask leaves, for MFU.
//
// The plan counts each training window's attention as T * T (query, key)
// pairs (Model::training_flops_per_sample, the PaLM convention: a causal
// window counts in full). With `document_mask on` a query sees only its own
// document, so a window of documents of lengths l_1..l_n needs sum l_d^2
// pairs by the same convention; the trainer counts those, step by step, from
// the batches it read.
#pragma once

#include <cstdint>

#include "core/tensor.hpp"
#include "plugin/model.hpp"

namespace ftrain {

// Sum over rows of sum over the row's documents of length^2: documents is a
// host i32 [B, T] of per-token document ids (a document is a run of equal
// ids, Batch::documents).
double document_attention_pairs(const Tensor& documents);

// A step's training FLOPs when its `windows` windows of `seq_len` tokens
// attend only `attended_pairs` (query, key) pairs in all: the planned count
// less the attention of full windows, plus that of the pairs attended.
double masked_step_flops(const Model& model, double planned_step_flops, std::int64_t windows, std::int64_t seq_len,
                         double attended_pairs);

}  // namespace ftrain
