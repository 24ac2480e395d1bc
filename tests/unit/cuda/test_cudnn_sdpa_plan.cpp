// The cuDNN SDPA path's plain data (kernels/cuda/cudnn_sdpa_plan.hpp),
// checked on the host: the variant pack binds every tensor of the graph
// exactly once to the right buffer; the dims/strides cuDNN is given address
// the op's BSHD memory exactly where the host and reference kernels do
// (math::attention_bshd_row), GQA included; the saved statistics sit where
// the host's lse does (math::attention_lse_index), so no conversion is
// needed; and the plan-cache key tells every field apart.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "kernels/cuda/cudnn_sdpa_plan.hpp"
#include "kernels/math/attention.hpp"

using namespace ftrain;
using namespace ftrain::cuda;

namespace {

std::int64_t offset(const SdpaTensor& t, std::int64_t i0, std::int64_t i1, std::int64_t i2, std::int64_t i3) {
  return i0 * t.strides[0] + i1 * t.strides[1] + i2 * t.strides[2] + i3 * t.strides[3];
}

std::set<std::int64_t> uids_of(const SdpaShape& s, SdpaDirection d) {
  std::set<std::int64_t> uids;
  for (const SdpaTensor& t : sdpa_io_tensors(s, d)) uids.insert(t.uid);
  return uids;
}

// Distinct, 16-byte aligned fake device addresses, one per operand.
SdpaBuffers fake_buffers() {
  SdpaBuffers b;
  auto at = [](std::uintptr_t n) { return reinterpret_cast<void*>(n * 0x1000); };
  b.q = at(1), b.k = at(2), b.v = at(3), b.out = at(4), b.stats = at(5), b.dout = at(9), b.dq = at(10);
  b.dk = at(11), b.dv = at(12), b.row_dot = at(13), b.dq_accum = at(14);
  return b;
}

const SdpaShape kGqa{2, 6, 2, 5, 8, true, 0};  // B 2, Hq 6, Hkv 2, T 5, D 8

}  // namespace

TEST(CudnnSdpaPlan, EveryGraphTensorIsBoundExactlyOnceToItsBuffer) {
  for (bool causal : {true, false})
    for (SdpaDirection d : {SdpaDirection::forward, SdpaDirection::backward}) {
      SdpaShape shape = kGqa;
      shape.causal = causal;
      SCOPED_TRACE(std::string(sdpa_op_name(d)) + (causal ? " causal" : " full"));
      SdpaScalars scalars;
      scalars.scale = 0.125f;
      const SdpaVariantPack pack = sdpa_variant_pack(shape, d, fake_buffers(), scalars);
      ASSERT_EQ(pack.uids.size(), pack.pointers.size());
      const std::set<std::int64_t> unique(pack.uids.begin(), pack.uids.end());
      EXPECT_EQ(unique.size(), pack.uids.size()) << "a uid bound twice";
      EXPECT_EQ(unique, uids_of(shape, d)) << "the pack binds exactly the graph's tensors";
      // Which uids a graph has: the -inf of the causal mask only when causal;
      // the backward's dO, dQ, dK, dV, one and its two scratch tensors.
      std::set<std::int64_t> want = {1, 2, 3, 4, 5, 6};
      if (causal) want.insert(7);
      if (d == SdpaDirection::backward) want.insert({8, 9, 10, 11, 12, 13, 14});
      EXPECT_EQ(unique, want);
      // Device tensors get the buffer of their own uid (the fake addresses are uid * 0x1000).
      std::map<std::int64_t, void*> bound;
      for (std::size_t i = 0; i < pack.uids.size(); ++i) bound[pack.uids[i]] = pack.pointers[i];
      for (std::int64_t uid : {1, 2, 3, 4, 5})
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(bound[uid]), static_cast<std::uintptr_t>(uid) * 0x1000) << uid;
      EXPECT_EQ(bound[6], &scalars.scale);
      if (causal) EXPECT_EQ(bound[7], &scalars.neg_inf);
      if (d == SdpaDirection::backward) {
        EXPECT_EQ(bound[8], &scalars.one);
        for (std::int64_t uid : {9, 10, 11, 12, 13, 14})
          EXPECT_EQ(reinterpret_cast<std::uintptr_t>(bound[uid]), static_cast<std::uintptr_t>(uid) * 0x1000) << uid;
      }
    }
}

TEST(CudnnSdpaPlan, AMissingOrMisalignedBufferIsRefusedNamingIt) {
  SdpaScalars scalars;
  SdpaBuffers b = fake_buffers();
  b.dk = nullptr;
  EXPECT_NO_THROW(sdpa_variant_pack(kGqa, SdpaDirection::forward, b, scalars)) << "the forward has no dK";
  try {
    sdpa_variant_pack(kGqa, SdpaDirection::backward, b, scalars);
    ADD_FAILURE() << "a backward without dk was bound";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("uid 11 (dk)"), std::string::npos) << e.what();
  }
  b = fake_buffers();
  b.v = reinterpret_cast<void*>(0x3008);
  try {
    sdpa_variant_pack(kGqa, SdpaDirection::forward, b, scalars);
    ADD_FAILURE() << "a misaligned v was bound";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("v at 0x3008 is not 16-byte aligned"), std::string::npos) << e.what();
  }
}

TEST(CudnnSdpaPlan, DocumentMaskGraphsBindTheirRaggedArraysAndScratch) {
  for (bool gqa : {true, false})
    for (SdpaDirection d : {SdpaDirection::forward, SdpaDirection::backward}) {
      SdpaShape shape = kGqa;
      shape.causal = false;  // the padding mask needs -inf even without the causal one
      if (!gqa) shape.kv_heads = shape.q_heads;
      shape.ragged_sequences = 4, shape.ragged_length = 4;
      SCOPED_TRACE(std::string(sdpa_op_name(d)) + (gqa ? " GQA" : " MHA"));
      SdpaBuffers b = fake_buffers();
      auto at = [](std::uintptr_t n) { return reinterpret_cast<void*>(n * 0x1000); };
      b.seq_len = at(15), b.q_offsets = at(17), b.kv_offsets = at(18), b.stats_offsets = at(19);
      b.dk_full = at(20), b.dv_full = at(21);
      SdpaScalars scalars;
      const SdpaVariantPack pack = sdpa_variant_pack(shape, d, b, scalars);
      std::map<std::int64_t, void*> bound;
      for (std::size_t i = 0; i < pack.uids.size(); ++i) bound[pack.uids[i]] = pack.pointers[i];
      EXPECT_EQ(bound.size(), pack.uids.size()) << "a uid bound twice";
      std::set<std::int64_t> want = {1, 2, 3, 4, 5, 6, 7, 15, 16, 17, 18, 19};
      if (d == SdpaDirection::backward) want.insert({8, 9, 10, 11, 12, 13, 14});
      if (d == SdpaDirection::backward && gqa) want.insert({20, 21});
      std::set<std::int64_t> got;
      for (const auto& [uid, p] : bound) got.insert(uid);
      EXPECT_EQ(got, want);
      EXPECT_EQ(bound[15], at(15));
      EXPECT_EQ(bound[16], at(15)) << "one length array serves queries and keys";
      // Every row-holding tensor names offsets the table has; Q-side, K-side
      // and statistics-side tensors the matching ones.
      const auto io = sdpa_io_tensors(shape, d);
      for (const SdpaTensor& t : io) {
        SCOPED_TRACE(sdpa_operand_name(t.operand));
        using O = SdpaOperand;
        std::int64_t want_offsets = 0;
        switch (t.operand) {
          case O::q: case O::out: case O::dout: case O::dq: case O::dq_accum: want_offsets = 17; break;
          case O::k: case O::v: case O::dk: case O::dv: case O::dk_full: case O::dv_full: want_offsets = 18; break;
          case O::stats: case O::row_dot: want_offsets = 19; break;
          default: break;
        }
        EXPECT_EQ(t.ragged_offset_uid, want_offsets);
        if (t.element == SdpaElement::i32) {
          EXPECT_EQ(t.dims[0], t.operand == O::seq_len_q || t.operand == O::seq_len_kv ? 4 : 5);
        } else if (!t.by_value) {
          EXPECT_EQ(t.dims[0], 4) << "the graph's batch is the ragged batch";
        }
      }
    }
}

// The strides address BSHD memory exactly as the kernels' shared index math
// does, for Q-side tensors (Hq heads) and K/V-side ones (Hkv heads), K and
// the backward's V read transposed, and every offset stays inside its tensor.
TEST(CudnnSdpaPlan, StridesAddressBshdMemoryLikeTheKernelsIncludingGqa) {
  const std::int64_t B = kGqa.batch, T = kGqa.seq, Hq = kGqa.q_heads, Hkv = kGqa.kv_heads, D = kGqa.head_dim;
  for (SdpaDirection d : {SdpaDirection::forward, SdpaDirection::backward}) {
    SCOPED_TRACE(sdpa_op_name(d));
    for (const SdpaTensor& t : sdpa_io_tensors(kGqa, d)) {
      SCOPED_TRACE(sdpa_operand_name(t.operand));
      const bool kv_side = t.operand == SdpaOperand::k || t.operand == SdpaOperand::v ||
                           t.operand == SdpaOperand::dk || t.operand == SdpaOperand::dv;
      const bool transposed =
          t.operand == SdpaOperand::k || (t.operand == SdpaOperand::v && d == SdpaDirection::backward);
      const std::int64_t heads = kv_side ? Hkv : Hq;
      switch (t.operand) {
        case SdpaOperand::q: case SdpaOperand::k: case SdpaOperand::v: case SdpaOperand::out:
        case SdpaOperand::dout: case SdpaOperand::dq: case SdpaOperand::dk: case SdpaOperand::dv: {
          EXPECT_EQ(t.element, SdpaElement::bf16);
          const std::array<std::int64_t, 4> dims =
              transposed ? std::array<std::int64_t, 4>{B, heads, D, T} : std::array<std::int64_t, 4>{B, heads, T, D};
          ASSERT_EQ(t.dims, dims);
          for (std::int64_t b = 0; b < B; ++b)
            for (std::int64_t h = 0; h < heads; ++h)
              for (std::int64_t s = 0; s < T; ++s)
                for (std::int64_t e = 0; e < D; ++e) {
                  const std::int64_t got = transposed ? offset(t, b, h, e, s) : offset(t, b, h, s, e);
                  ASSERT_EQ(got, math::attention_bshd_row(b, s, h, T, heads, D) + e)
                      << "b " << b << " h " << h << " t " << s << " d " << e;
                }
          break;
        }
        case SdpaOperand::stats: case SdpaOperand::row_dot: {
          EXPECT_EQ(t.element, SdpaElement::f32);
          ASSERT_EQ(t.dims, (std::array<std::int64_t, 4>{B, Hq, T, 1}));
          for (std::int64_t b = 0; b < B; ++b)
            for (std::int64_t h = 0; h < Hq; ++h)
              for (std::int64_t s = 0; s < T; ++s)
                ASSERT_EQ(offset(t, b, h, s, 0), math::attention_lse_index(b, h, s, T, Hq))
                    << "the statistics are the host's lse f32[B, Hq, T]: b " << b << " h " << h << " t " << s;
          if (t.operand == SdpaOperand::row_dot)
            EXPECT_GE(sdpa_row_dot_bytes(kGqa), B * Hq * T * std::int64_t(sizeof(float)));
          break;
        }
        case SdpaOperand::dq_accum: {
          EXPECT_EQ(t.element, SdpaElement::f32);
          ASSERT_EQ(t.dims, (std::array<std::int64_t, 4>{B, Hq, T, D}));
          EXPECT_EQ(offset(t, B - 1, Hq - 1, T - 1, D - 1) + 1, B * Hq * T * D) << "contiguous";
          EXPECT_GE(sdpa_dq_accum_bytes(kGqa), B * Hq * T * D * std::int64_t(sizeof(float)));
          EXPECT_EQ(sdpa_dq_accum_bytes(kGqa) % 256, 0);
          break;
        }
        case SdpaOperand::scale: case SdpaOperand::neg_inf: case SdpaOperand::one:
          EXPECT_TRUE(t.by_value);
          EXPECT_EQ(t.element, SdpaElement::f32);
          break;
        case SdpaOperand::seq_len_q: case SdpaOperand::seq_len_kv: case SdpaOperand::q_offsets:
        case SdpaOperand::kv_offsets: case SdpaOperand::stats_offsets: case SdpaOperand::dk_full:
        case SdpaOperand::dv_full:
          ADD_FAILURE() << "a graph without the document mask has a ragged-batch tensor";
          break;
      }
      EXPECT_EQ(t.ragged_offset_uid, 0) << "no ragged offsets without the document mask";
      if (!t.by_value) EXPECT_FALSE(t.operand == SdpaOperand::scale) << "scale must be by value";
    }
  }
}

TEST(CudnnSdpaPlan, ThePlanKeyTellsEveryFieldApart) {
  const SdpaPlanKey base{2, 4096, 32, 8, 64, DType::bf16, true, SdpaDirection::forward};
  std::vector<SdpaPlanKey> keys(9, base);
  keys[1].batch = 1;
  keys[2].seq = 2048;
  keys[3].q_heads = 16;
  keys[4].kv_heads = 32;
  keys[5].head_dim = 128;
  keys[6].dtype = DType::f32;
  keys[7].causal = false;
  keys[8].direction = SdpaDirection::backward;
  const std::set<SdpaPlanKey> distinct(keys.begin(), keys.end());
  EXPECT_EQ(distinct.size(), keys.size());
  EXPECT_TRUE(keys[0] == base);
  EXPECT_EQ(describe(base), "attention_forward (B 2, T 4096, Hq 32, Hkv 8, D 64, bf16, causal)");
  EXPECT_EQ(describe(keys[8]).rfind("attention_backward (", 0), 0u);
  const SdpaShape shape = base.shape();
  EXPECT_EQ(shape.batch, 2);
  EXPECT_EQ(shape.seq, 4096);
  EXPECT_EQ(shape.q_heads, 32);
  EXPECT_EQ(shape.kv_heads, 8);
  EXPECT_EQ(shape.head_dim, 64);
  EXPECT_TRUE(shape.causal);
}

TEST(CudnnSdpaPlan, OnlyBf16StorageIsOfferedToCudnn) {
  SdpaPlanKey key{1, 128, 4, 2, 64, DType::bf16, true, SdpaDirection::forward};
  EXPECT_EQ(sdpa_dtype_refusal(key), "");
  key.dtype = DType::f32;
  EXPECT_NE(sdpa_dtype_refusal(key).find("take bf16 tensors; this call's are f32"), std::string::npos)
      << sdpa_dtype_refusal(key);
}

namespace {

std::vector<std::int32_t> ids_of(const std::vector<std::vector<std::int64_t>>& rows) {
  std::vector<std::int32_t> ids;
  for (const auto& lengths : rows)
    for (std::size_t d = 0; d < lengths.size(); ++d) ids.insert(ids.end(), lengths[d], static_cast<std::int32_t>(d));
  return ids;
}

}  // namespace

TEST(CudnnSdpaDocuments, SegmentsSplitEachRowWhereTheIdChanges) {
  {  // one document per row
    const auto ids = ids_of({{6}, {6}});
    const SdpaDocumentSegments s = sdpa_document_segments(ids.data(), 2, 6, "ids");
    EXPECT_EQ(s.row, (std::vector<std::int64_t>{0, 1}));
    EXPECT_EQ(s.first, (std::vector<std::int64_t>{0, 0}));
    EXPECT_EQ(s.length, (std::vector<std::int64_t>{6, 6}));
    EXPECT_EQ(s.longest(), 6);
  }
  {  // T documents of one token
    const auto ids = ids_of({{1, 1, 1, 1, 1}});
    const SdpaDocumentSegments s = sdpa_document_segments(ids.data(), 1, 5, "ids");
    EXPECT_EQ(s.first, (std::vector<std::int64_t>{0, 1, 2, 3, 4}));
    EXPECT_EQ(s.length, (std::vector<std::int64_t>(5, 1)));
    EXPECT_EQ(s.longest(), 1);
  }
  {  // unequal documents, ids that skip a number still change document
    std::vector<std::int32_t> ids = {0, 0, 0, 2, 2, 5, 0, 1, 1, 1, 1, 1};
    const SdpaDocumentSegments s = sdpa_document_segments(ids.data(), 2, 6, "ids");
    EXPECT_EQ(s.row, (std::vector<std::int64_t>{0, 0, 0, 1, 1}));
    EXPECT_EQ(s.first, (std::vector<std::int64_t>{0, 3, 5, 0, 1}));
    EXPECT_EQ(s.length, (std::vector<std::int64_t>{3, 2, 1, 1, 5}));
  }
}

TEST(CudnnSdpaDocuments, IdsNotStartingAtZeroOrDecreasingAreRefusedNamingTensorAndRow) {
  std::vector<std::int32_t> ids = ids_of({{3, 3}, {6}});
  std::fill(ids.begin() + 6, ids.end(), 1);  // row 1: one document, id 1
  try {
    sdpa_document_segments(ids.data(), 2, 6, "attention_forward: documents i32[2, 6]");
    ADD_FAILURE() << "a row starting at id 1 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attention_forward: documents i32[2, 6]: row 1 starts at document id 1"),
              std::string::npos)
        << e.what();
  }
  ids = ids_of({{3, 3}, {6}});
  ids[4] = 0;  // row 0: 0 0 0 1 0 1
  try {
    sdpa_document_segments(ids.data(), 2, 6, "documents docs");
    ADD_FAILURE() << "decreasing ids were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("documents docs: row 0 decreases at token 4 (1 then 0)"), std::string::npos)
        << e.what();
  }
}

TEST(CudnnSdpaDocuments, PlansAreBucketedByPowersOfTwoCappedByTheWindow) {
  const auto ids = ids_of({{100, 1, 155}, {256}});
  const SdpaDocumentSegments s = sdpa_document_segments(ids.data(), 2, 256, "ids");
  std::int64_t sequences = 0, length = 0;
  sdpa_set_ragged_bucket(s, sequences, length);
  EXPECT_EQ(sequences, 4);
  EXPECT_EQ(length, 256);
  const auto singles = ids_of({{1, 1, 1}});
  sdpa_set_ragged_bucket(sdpa_document_segments(singles.data(), 1, 3, "ids"), sequences, length);
  EXPECT_EQ(sequences, 3) << "never more sequences than tokens";
  EXPECT_EQ(length, 1);
  const auto vit_like = ids_of({{150, 47}});
  sdpa_set_ragged_bucket(sdpa_document_segments(vit_like.data(), 1, 197, "ids"), sequences, length);
  EXPECT_EQ(length, 197) << "never longer than the window";
}

// Sequence k's offsets address its first row exactly where the kernels'
// index math puts token (row, first): Q-side and K-side BSHD memory and the
// [B, Hq, T] statistics; with the table's head and token strides, every
// row of every document lands on its own token.
TEST(CudnnSdpaDocuments, RaggedArraysAddressEachDocumentsRowsLikeTheKernels) {
  const std::int64_t B = 2, T = 9, Hq = 6, Hkv = 2, D = 8;
  const auto ids = ids_of({{4, 1, 4}, {8, 1}});
  const SdpaDocumentSegments segs = sdpa_document_segments(ids.data(), B, T, "ids");
  SdpaShape shape{B, Hq, Hkv, T, D, true, 0, 0, 0};
  sdpa_set_ragged_bucket(segs, shape.ragged_sequences, shape.ragged_length);
  ASSERT_EQ(shape.ragged_sequences, 8);
  ASSERT_EQ(shape.ragged_length, 8);
  const SdpaRaggedArrays a = sdpa_ragged_arrays(segs, shape);
  for (std::int64_t part : {a.seq_len, a.q_offsets, a.kv_offsets, a.stats_offsets})
    EXPECT_EQ(part % 4, 0) << "each part starts 16-byte aligned";
  const auto at = [&](std::int64_t part, std::int64_t k) { return std::int64_t{a.packed[std::size_t(part + k)]}; };
  // Every row-holding tensor of the backward graph (the forward's are a
  // subset): its offsets part by uid, its heads, K and V^T read transposed;
  // dK/dV per query head take K's offsets times Hq / Hkv (the multiplier
  // cuDNN applies itself, as cudnn-frontend's ragged GQA backward relies on).
  const auto io = sdpa_io_tensors(shape, SdpaDirection::backward);
  std::size_t checked = 0;
  for (const SdpaTensor& t : io) {
    if (t.ragged_offset_uid == 0) continue;
    SCOPED_TRACE(sdpa_operand_name(t.operand));
    using O = SdpaOperand;
    const std::int64_t part = t.ragged_offset_uid == 17 ? a.q_offsets : t.ragged_offset_uid == 18 ? a.kv_offsets
                                                                                                   : a.stats_offsets;
    const bool full_head = t.operand == O::dk_full || t.operand == O::dv_full;
    const std::int64_t multiplier = full_head ? Hq / Hkv : 1;
    const bool kv_side = t.ragged_offset_uid == 18 && !full_head;
    const bool transposed = t.operand == O::k || t.operand == O::v;  // backward: V read as V^T
    const bool rows = t.operand == O::stats || t.operand == O::row_dot;
    const std::int64_t heads = kv_side ? Hkv : Hq;
    ASSERT_EQ(t.dims[0], shape.ragged_sequences);
    ASSERT_EQ(t.dims[1], heads);
    ++checked;
    for (std::int64_t k = 0; k < segs.count(); ++k) {
      const std::int64_t b = segs.row[std::size_t(k)], first = segs.first[std::size_t(k)];
      for (std::int64_t i = 0; i < segs.length[std::size_t(k)]; ++i)
        for (std::int64_t h = 0; h < heads; ++h) {
          const std::int64_t e = rows ? 0 : 5;
          const std::int64_t got = at(part, k) * multiplier + (transposed ? offset(t, 0, h, e, i) : offset(t, 0, h, i, e));
          const std::int64_t want = rows ? math::attention_lse_index(b, h, first + i, T, Hq)
                                         : math::attention_bshd_row(b, first + i, h, T, heads, D) + e;
          ASSERT_EQ(got, want) << "document " << k << ", row " << i << ", head " << h;
        }
    }
  }
  EXPECT_EQ(checked, 13u) << "q k v out stats dout dq dk dv row sums, dQ accumulator, dK/dV per query head";
  for (std::int64_t k = 0; k < segs.count(); ++k) EXPECT_EQ(at(a.seq_len, k), segs.length[std::size_t(k)]);
  // The unused sequences have no tokens and start at the end.
  for (std::int64_t k = segs.count(); k <= shape.ragged_sequences; ++k) {
    if (k < shape.ragged_sequences) EXPECT_EQ(at(a.seq_len, k), 0);
    EXPECT_EQ(at(a.q_offsets, k), B * T * Hq * D);
    EXPECT_EQ(at(a.kv_offsets, k), B * T * Hkv * D);
    EXPECT_EQ(at(a.stats_offsets, k), B * Hq * T);
  }
  // Documents that outgrow the plan's ragged batch are refused.
  SdpaShape small = shape;
  small.ragged_length = 4;
  EXPECT_THROW(sdpa_ragged_arrays(segs, small), Error);
  small = shape;
  small.ragged_sequences = 4;
  EXPECT_THROW(sdpa_ragged_arrays(segs, small), Error);
}

TEST(CudnnSdpaDocuments, TheRaggedBatchIsPartOfThePlanKeyAndItsName) {
  SdpaPlanKey a{2, 4096, 32, 8, 64, DType::bf16, true, SdpaDirection::forward};
  SdpaPlanKey b = a, c = a;
  b.ragged_sequences = 8, b.ragged_length = 1024;
  c.ragged_sequences = 8, c.ragged_length = 2048;
  EXPECT_EQ((std::set<SdpaPlanKey>{a, b, c}).size(), 3u);
  EXPECT_EQ(describe(b),
            "attention_forward (B 2, T 4096, Hq 32, Hkv 8, D 64, bf16, causal, document mask: 8 sequences of <= 1024 "
            "tokens)");
  EXPECT_TRUE(b.shape().ragged());
  EXPECT_EQ(b.shape().ragged_length, 1024);
  EXPECT_EQ(sdpa_ragged_refusal(b.shape()), "");
  SdpaShape huge = b.shape();
  huge.batch = 64;
  huge.seq = 131072;
  EXPECT_NE(sdpa_ragged_refusal(huge).find("ragged offsets are i32"), std::string::npos);
}
