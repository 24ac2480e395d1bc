// Attention's index math, shared by the host flash attention
// (kernels/host/attention.cpp) and the CUDA reference attention
// (kernels/cuda/attention.cu): which KV head a query head reads
// (GQA), which keys a query sees (causal bound, document mask), where a
// row lives in a BSHD tensor and in the f32 [B, H, T] log-sum-exp. A wrong
// index here breaks the host golden curves and the host attention tests,
// so the on-device oracle is checked through the host suite too.
#pragma once

#include <cstdint>

#include "base/hd.hpp"

namespace ftrain::math {

// Query head `q_head` of `q_heads` reads KV head q_head / (q_heads / kv_heads)
// (consecutive query heads share a KV head; MHA when the counts are equal).
FTRAIN_HD std::int64_t attention_kv_head(std::int64_t q_head, std::int64_t q_heads, std::int64_t kv_heads) {
  return q_head / (q_heads / kv_heads);
}

// Element offset of row (b, t, head) in a [B, T, heads, D] (BSHD) tensor.
FTRAIN_HD std::int64_t attention_bshd_row(std::int64_t b, std::int64_t t, std::int64_t head, std::int64_t seq,
                                          std::int64_t heads, std::int64_t head_dim) {
  return ((b * seq + t) * heads + head) * head_dim;
}

// Offset of (b, head, t) in the f32 [B, heads, T] log-sum-exp.
FTRAIN_HD std::int64_t attention_lse_index(std::int64_t b, std::int64_t head, std::int64_t t, std::int64_t seq,
                                           std::int64_t heads) {
  return (b * heads + head) * seq + t;
}

// One past the last key query `query` sees: keys [0, end). Causal: the
// query itself and the keys before it; full: all `seq` keys.
FTRAIN_HD std::int64_t attention_key_end(bool causal, std::int64_t query, std::int64_t seq) {
  return causal ? (query + 1 < seq ? query + 1 : seq) : seq;
}

// First query that sees key `key`: causal queries from `key` on, full all.
FTRAIN_HD std::int64_t attention_first_query(bool causal, std::int64_t key) { return causal ? key : 0; }

// The visibility rule, the one both backends apply entry by entry: key `key`
// is visible to query `query` iff the causal bound allows it and, in a
// packed window (`documents`, the window's row of i32 document ids; null
// when there is no document mask), both belong to the same document.
FTRAIN_HD bool attention_key_visible(bool causal, std::int64_t query, std::int64_t key,
                                     const std::int32_t* documents) {
  if (causal && key > query) return false;
  return documents == nullptr || documents[key] == documents[query];
}

// The same rule between two blocks of a sequence split over ranks (ring
// attention): tokens carry their index in the whole sequence, and the
// document ids (when `documents`) travel with them.
FTRAIN_HD bool attention_block_key_visible(bool causal, std::int32_t query_position, std::int32_t key_position,
                                           bool documents, std::int32_t query_document, std::int32_t key_document) {
  if (causal && key_position > query_position) return false;
  return !documents || key_document == query_document;
}

// The tile-skip rule: false only when no key of [j0, j0 + nk) is visible to
// any query of [i0, i0 + nq), so the tile can be skipped (a true may still
// cover a tile with nothing visible; entries are then masked one by one).
// Document ids never decrease along a row, so the tiles' end ids decide:
// the key tile lies wholly in documents before the query tile's first
// query, or wholly after its last one. Tiles are non-empty.
FTRAIN_HD bool attention_key_tile_visible(bool causal, std::int64_t i0, std::int64_t nq, std::int64_t j0,
                                          std::int64_t nk, const std::int32_t* documents) {
  if (causal && j0 > i0 + nq - 1) return false;
  return documents == nullptr || (documents[j0 + nk - 1] >= documents[i0] && documents[j0] <= documents[i0 + nq - 1]);
}

// True when every key of [j0, j0 + nk) is visible to every query of
// [i0, i0 + nq): the tile needs no entry-wise mask.
FTRAIN_HD bool attention_key_tile_all_visible(bool causal, std::int64_t i0, std::int64_t nq, std::int64_t j0,
                                              std::int64_t nk, const std::int32_t* documents) {
  if (causal && j0 + nk - 1 > i0) return false;
  return documents == nullptr || (documents[i0] == documents[i0 + nq - 1] && documents[j0] == documents[j0 + nk - 1] &&
                                  documents[i0] == documents[j0]);
}

}  // namespace ftrain::math
