// The cuDNN SDPA path's plain data (kernels/cuda/cudnn_sdpa_plan.hpp),
// checked on the host: the variant pack binds every tensor of the graph
// exactly once to the right buffer; the dims/strides cuDNN is given address
// the op's BSHD memory exactly where the host and reference kernels do
// (math::attention_bshd_row), GQA included; the saved statistics sit where
// the host's lse does (math::attention_lse_index), so no conversion is
// needed; and the plan-cache key tells every field apart.
#include <gtest/gtest.h>

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
      }
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
