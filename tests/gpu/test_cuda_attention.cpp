// What a GPU must confirm about the CUDA reference attention [gpu]
// (kernels/cuda/attention.cu, the on-device oracle): forward and
// backward against the host flash attention, causal and full, MHA, GQA and
// MQA, f32 and bf16 storage, at sizes that are no multiple of a warp, a
// block or the host's 64-wide tiles, head dims from 1 to 256 (the kernel's
// limit; 257 is refused naming the limit). The two sides share their index
// math (kernels/math/attention.hpp) but not their arithmetic order (host:
// tiled online softmax with a polynomial exp; CUDA: two passes, expf), so
// they agree within a tolerance, and the CUDA side gives the same bits on
// every run. Without a usable GPU every test skips, printing why.
//
// The cuDNN fused SDPA path (kernels/cuda/cudnn_sdpa_execute.cpp) against
// both: bf16, causal and full, MHA and GQA, head dims 64 and 128, forward
// (out and the saved lse: the convention the backward reads) and backward,
// under `attention_backend cudnn` so a refused shape fails with cuDNN's
// reason; and a shape cuDNN cannot take (f32 storage) stops naming itself.
//
// The document mask of packed windows (documents i32 [B, T]): the reference
// kernel and cuDNN's ragged SDPA against the host, forward and backward,
// with documents of one token, documents crossing tile edges and a row of
// one document; the masked result differs from the unmasked one (the mask
// is applied), and ids that are no packed window's are refused naming the
// row on both paths.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "kernels/backend_registry.hpp"
#include "runtime/backend_library.hpp"
#include "support/backend_parity.hpp"

using namespace ftrain;
using namespace ftrain::testing;

namespace {

struct AttentionCase {
  std::int64_t batch, seq, q_heads, kv_heads, head_dim;
  bool causal;
  DType storage;
  std::string name() const {
    return "B " + std::to_string(batch) + ", T " + std::to_string(seq) + ", Hq " + std::to_string(q_heads) +
           ", Hkv " + std::to_string(kv_heads) + ", D " + std::to_string(head_dim) +
           (causal ? ", causal, " : ", full, ") + std::string(dtype_name(storage));
  }
};

const std::vector<AttentionCase> kCases = {
    {1, 1, 1, 1, 1, true, DType::f32},        // one token, one head, one dimension
    {2, 37, 6, 2, 24, true, DType::f32},      // GQA, T not a tile multiple
    {2, 37, 6, 2, 24, false, DType::f32},     // the same, full attention
    {1, 65, 4, 1, 64, true, DType::bf16},     // MQA, one past the host tile
    {3, 29, 5, 5, 96, false, DType::bf16},    // MHA, odd heads
    {1, 130, 8, 2, 128, true, DType::bf16},   // Llama 3 head dim, T > 2 tiles
    {1, 33, 2, 1, 256, true, DType::f32},     // the kernel's largest head dim
    {1, 17, 3, 3, 7, false, DType::bf16},     // odd head dim
};

bool cuda_usable(std::string& why) {
  if (find_backend(Device::cuda) != nullptr) return true;
  why = "no usable CUDA GPU: " + describe_backend_search();
  return false;
}

// Forward then backward of one case on `device`: out, lse, dq, dk, dv as
// host floats. `documents`: the [B * T] document ids (empty: no mask).
std::vector<std::vector<float>> run_attention(Device device, const AttentionCase& c, std::uint64_t seed,
                                              AttentionBackend backend = AttentionBackend::reference,
                                              const std::vector<std::int32_t>& documents = {}) {
  using namespace parity;
  ExecutionOptions o;
  o.device = device;
  o.attention_backend = backend;
  ExecutionContext ctx(o);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const Shape qs{c.batch, c.seq, c.q_heads, c.head_dim}, ks{c.batch, c.seq, c.kv_heads, c.head_dim};
  Tensor q = random(ctx, qs, seed, c.storage), k = random(ctx, ks, seed + 1, c.storage),
         v = random(ctx, ks, seed + 2, c.storage), dout = random(ctx, qs, seed + 3, c.storage);
  Tensor out = zeros(ctx, qs, c.storage), lse = zeros(ctx, {c.batch, c.q_heads, c.seq});
  Tensor dq = zeros(ctx, qs, c.storage), dk = zeros(ctx, ks, c.storage), dv = zeros(ctx, ks, c.storage);
  Tensor ids;
  if (!documents.empty()) {
    ids = Tensor::empty({c.batch, c.seq}, DType::i32);
    std::memcpy(ids.data(), documents.data(), documents.size() * sizeof(std::int32_t));
    if (device != Device::host) ids = to_device(ids, device);
  }
  const Tensor* docs = documents.empty() ? nullptr : &ids;
  ops::attention_forward(ctx, q, k, v, c.causal, docs, scale, out, lse);
  ops::attention_backward(ctx, q, k, v, out, lse, dout, c.causal, docs, scale, dq, dk, dv);
  ctx.synchronize();
  std::vector<std::vector<float>> r;
  for (const Tensor& t : {out, lse, dq, dk, dv})
    r.push_back(to_float_vector(t.device() == Device::host ? t : to_device(t, Device::host)));
  return r;
}

}  // namespace

TEST(CudaReferenceAttention, ForwardAndBackwardMatchTheHost) {
  std::string why;
  if (!cuda_usable(why)) GTEST_SKIP() << why;
  const char* names[] = {"out", "lse", "dq", "dk", "dv"};
  for (const AttentionCase& c : kCases) {
    SCOPED_TRACE(c.name());
    const auto want = run_attention(Device::host, c, 7);
    const auto got = run_attention(Device::cuda, c, 7);
    ASSERT_EQ(got.size(), want.size());
    // bf16 outputs may round the other way when the f32 values differ in
    // their last bits: a bf16 ulp is 2^-7 relative.
    const float tolerance = c.storage == DType::bf16 ? 2e-2f : 2e-4f;
    for (std::size_t t = 0; t < want.size(); ++t) {
      ASSERT_EQ(got[t].size(), want[t].size()) << names[t];
      std::size_t bad = 0;
      for (std::size_t i = 0; i < want[t].size(); ++i) {
        const float w = want[t][i], g = got[t][i];
        if (!(std::abs(g - w) <= tolerance * (1.0f + std::abs(w))) && bad++ < 3)
          ADD_FAILURE() << names[t] << " element " << i << ": cuda " << g << " vs host " << w;
      }
      EXPECT_EQ(bad, 0u) << names[t];
    }
  }
}

TEST(CudaReferenceAttention, RepeatedRunsAreBitIdentical) {
  std::string why;
  if (!cuda_usable(why)) GTEST_SKIP() << why;
  for (const AttentionCase& c : kCases) {
    SCOPED_TRACE(c.name());
    const auto first = run_attention(Device::cuda, c, 9), second = run_attention(Device::cuda, c, 9);
    for (std::size_t t = 0; t < first.size(); ++t)
      ASSERT_EQ(std::memcmp(first[t].data(), second[t].data(), first[t].size() * sizeof(float)), 0) << "output " << t;
  }
}

TEST(CudaReferenceAttention, AHeadDimAboveTheLimitIsRefusedNamingIt) {
  std::string why;
  if (!cuda_usable(why)) GTEST_SKIP() << why;
  try {
    run_attention(Device::cuda, {1, 4, 2, 1, 257, true, DType::f32}, 1);
    ADD_FAILURE() << "head dim 257 ran on the CUDA reference attention";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at most 256"), std::string::npos) << e.what();
  }
}

namespace {

// Shapes the presets use (head dims 64 and 128, Llama 3 GQA 4:1, MHA) at
// short sequences, one not a multiple of cuDNN's 64/128-row tiles.
const std::vector<AttentionCase> kCudnnCases = {
    {2, 256, 8, 2, 64, true, DType::bf16},    // GQA 4:1, head dim 64 (Llama 3.2 1B's)
    {2, 256, 8, 2, 64, false, DType::bf16},   // the same, full attention
    {1, 200, 4, 4, 128, true, DType::bf16},   // MHA, head dim 128, T not a tile multiple
    {1, 128, 6, 2, 128, false, DType::bf16},  // GQA 3:1, head dim 128, full
    {2, 197, 12, 12, 64, false, DType::bf16}, // ViT-B/16's shape
};

// |got - want| <= tolerance * (1 + |want|) for every element, the first few misses reported.
void expect_close(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want,
                  float tolerance, const char* against) {
  const char* names[] = {"out", "lse", "dq", "dk", "dv"};
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t t = 0; t < want.size(); ++t) {
    ASSERT_EQ(got[t].size(), want[t].size()) << names[t];
    std::size_t bad = 0;
    for (std::size_t i = 0; i < want[t].size(); ++i) {
      const float w = want[t][i], g = got[t][i];
      if (!(std::abs(g - w) <= tolerance * (1.0f + std::abs(w))) && bad++ < 3)
        ADD_FAILURE() << names[t] << " element " << i << ": cudnn " << g << " vs " << against << " " << w;
    }
    EXPECT_EQ(bad, 0u) << names[t] << " against " << against;
  }
}

}  // namespace

TEST(CudnnAttention, ForwardAndBackwardMatchTheReferenceKernelAndTheHost) {
  std::string why;
  if (!cuda_usable(why)) GTEST_SKIP() << why;
  for (const AttentionCase& c : kCudnnCases) {
    SCOPED_TRACE(c.name());
    const auto cudnn = run_attention(Device::cuda, c, 21, AttentionBackend::cudnn);
    const auto reference = run_attention(Device::cuda, c, 21, AttentionBackend::reference);
    const auto host = run_attention(Device::host, c, 21);
    // bf16 storage; cuDNN rounds P to bf16 before P.V and dS before dK/dQ
    // (the reference keeps f32), hence more than the reference's 2e-2.
    expect_close(cudnn, reference, 3e-2f, "reference");
    expect_close(cudnn, host, 3e-2f, "host");
  }
}

TEST(CudnnAttention, AutoTakesCudnnSaysSoAndAgreesWithAnExplicitCudnnRun) {
  std::string why;
  if (!cuda_usable(why)) GTEST_SKIP() << why;
  const AttentionCase c = kCudnnCases.front();
  ::testing::internal::CaptureStderr();
  const auto automatic = run_attention(Device::cuda, c, 5, AttentionBackend::automatic);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("attention_forward (B 2, T 256, Hq 8, Hkv 2, D 64, bf16, causal): cuDNN fused SDPA "
                     "(attention_backend auto)"),
            std::string::npos)
      << log;
  const auto cudnn = run_attention(Device::cuda, c, 5, AttentionBackend::cudnn);
  // The forward is deterministic (same plan, same inputs): out and lse to the bit; the backward's
  // dQ accumulation order may vary between runs, so dq/dk/dv within a bf16 ulp or two.
  const std::vector<std::vector<float>> forward_auto(automatic.begin(), automatic.begin() + 2),
      forward_cudnn(cudnn.begin(), cudnn.begin() + 2);
  expect_close(forward_auto, forward_cudnn, 0.0f, "attention_backend cudnn");
  expect_close(automatic, cudnn, 1e-2f, "attention_backend cudnn");
}

TEST(CudnnAttention, UnderCudnnAShapeItCannotRunStopsNamingShapeAndReason) {
  std::string why;
  if (!cuda_usable(why)) GTEST_SKIP() << why;
  try {
    run_attention(Device::cuda, {1, 64, 4, 2, 64, true, DType::f32}, 3, AttentionBackend::cudnn);
    ADD_FAILURE() << "f32 attention ran under attention_backend cudnn";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("attention_forward (B 1, T 64, Hq 4, Hkv 2, D 64, f32, causal)"), std::string::npos) << m;
    EXPECT_NE(m.find("take bf16 tensors"), std::string::npos) << m;
  }
  // Under auto the same shape falls back to the reference kernel (logged) and matches the host.
  const AttentionCase c{1, 64, 4, 2, 64, true, DType::f32};
  expect_close(run_attention(Device::cuda, c, 3, AttentionBackend::automatic), run_attention(Device::host, c, 3),
               2e-4f, "host");
}

namespace {

// Document ids of a batch of packed windows from each row's document lengths.
std::vector<std::int32_t> packed(const std::vector<std::vector<std::int64_t>>& rows) {
  std::vector<std::int32_t> ids;
  for (const auto& lengths : rows)
    for (std::size_t d = 0; d < lengths.size(); ++d) ids.insert(ids.end(), lengths[d], static_cast<std::int32_t>(d));
  return ids;
}

struct DocumentCase {
  AttentionCase shape;
  std::vector<std::vector<std::int64_t>> lengths;  // per row, summing to T
};

const std::vector<DocumentCase> kReferenceDocumentCases = {
    {{2, 37, 6, 2, 24, true, DType::f32}, {{10, 20, 7}, {37}}},          // GQA; a row of one document
    {{2, 37, 6, 2, 24, false, DType::f32}, {{1, 1, 35}, {18, 1, 18}}},   // full attention within documents
    {{1, 130, 8, 2, 128, true, DType::bf16}, {{64, 1, 33, 32}}},         // documents across the host's tile edges
};

const std::vector<DocumentCase> kCudnnDocumentCases = {
    {{2, 256, 8, 2, 64, true, DType::bf16}, {{100, 1, 155}, {256}}},     // GQA 4:1, head dim 64
    {{1, 200, 4, 4, 128, true, DType::bf16}, {{64, 64, 64, 8}}},         // MHA, head dim 128
    {{2, 128, 6, 2, 128, true, DType::bf16}, {{1, 1, 1, 125}, {7, 121}}},  // GQA 3:1, one-token documents
};

}  // namespace

TEST(CudaReferenceAttention, DocumentMaskMatchesTheHost) {
  std::string why;
  if (!cuda_usable(why)) GTEST_SKIP() << why;
  for (const DocumentCase& d : kReferenceDocumentCases) {
    SCOPED_TRACE(d.shape.name());
    const std::vector<std::int32_t> ids = packed(d.lengths);
    const auto host = run_attention(Device::host, d.shape, 11, AttentionBackend::reference, ids);
    expect_close(run_attention(Device::cuda, d.shape, 11, AttentionBackend::reference, ids), host,
                 d.shape.storage == DType::bf16 ? 2e-2f : 2e-4f, "host");
    // The mask changes the result: without it the same inputs give other numbers.
    const auto unmasked = run_attention(Device::host, d.shape, 11);
    EXPECT_NE(std::memcmp(unmasked[0].data(), host[0].data(), host[0].size() * sizeof(float)), 0);
  }
}

TEST(CudnnAttention, DocumentMaskMatchesTheReferenceKernelAndTheHost) {
  std::string why;
  if (!cuda_usable(why)) GTEST_SKIP() << why;
  for (const DocumentCase& d : kCudnnDocumentCases) {
    SCOPED_TRACE(d.shape.name());
    const std::vector<std::int32_t> ids = packed(d.lengths);
    const auto cudnn = run_attention(Device::cuda, d.shape, 23, AttentionBackend::cudnn, ids);
    expect_close(cudnn, run_attention(Device::cuda, d.shape, 23, AttentionBackend::reference, ids), 3e-2f,
                 "reference");
    expect_close(cudnn, run_attention(Device::host, d.shape, 23, AttentionBackend::reference, ids), 3e-2f, "host");
  }
}

TEST(CudnnAttention, DocumentIdsThatAreNoPackedWindowAreRefusedNamingTheRow) {
  std::string why;
  if (!cuda_usable(why)) GTEST_SKIP() << why;
  const AttentionCase c{2, 64, 4, 2, 64, true, DType::bf16};
  std::vector<std::int32_t> ids = packed({{32, 32}, {64}});
  ids[64 + 10] = 1;  // row 1 goes 0 .. 1 .. 0
  for (AttentionBackend backend : {AttentionBackend::reference, AttentionBackend::cudnn}) {
    try {
      run_attention(Device::cuda, c, 3, backend, ids);
      ADD_FAILURE() << "decreasing document ids were accepted under " << attention_backend_name(backend);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("row 1 decreases at token 11"), std::string::npos) << e.what();
    }
  }
}
