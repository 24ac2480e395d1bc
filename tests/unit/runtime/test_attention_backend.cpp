// The deck's attention_backend decision (runtime/attention_backend.hpp):
// `cudnn` on a shape cuDNN refuses is an error carrying the shape and
// cuDNN's reason; `auto` takes cuDNN when it accepts and otherwise the
// reference kernel with a note to log; `reference` never asks cuDNN.
#include <gtest/gtest.h>

#include <string>

#include "base/error.hpp"
#include "runtime/attention_backend.hpp"

using namespace ftrain;

namespace {
const std::string kShape = "attention_forward B 2, T 4096, Hq 32, Hkv 8, D 96";
const std::string kReason = "cudnnBackendFinalize: no engine for head dim 96";
}  // namespace

TEST(AttentionBackend, NamesAreTheDeckWords) {
  EXPECT_STREQ(attention_backend_name(AttentionBackend::automatic), "auto");
  EXPECT_STREQ(attention_backend_name(AttentionBackend::cudnn), "cudnn");
  EXPECT_STREQ(attention_backend_name(AttentionBackend::reference), "reference");
}

TEST(AttentionBackend, CudnnOnARefusedShapeIsAClearError) {
  EXPECT_TRUE(choose_attention_backend(AttentionBackend::cudnn, kShape, "").use_cudnn);
  try {
    choose_attention_backend(AttentionBackend::cudnn, kShape, kReason);
    ADD_FAILURE() << "cudnn ran a refused shape";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(kShape), std::string::npos) << m;
    EXPECT_NE(m.find(kReason), std::string::npos) << m;
  }
}

TEST(AttentionBackend, AutoPicksCudnnAndNotesAFallback) {
  const AttentionBackendChoice accepted = choose_attention_backend(AttentionBackend::automatic, kShape, "");
  EXPECT_TRUE(accepted.use_cudnn);
  EXPECT_TRUE(accepted.fallback_note.empty());
  const AttentionBackendChoice refused = choose_attention_backend(AttentionBackend::automatic, kShape, kReason);
  EXPECT_FALSE(refused.use_cudnn);
  EXPECT_NE(refused.fallback_note.find(kShape), std::string::npos) << refused.fallback_note;
  EXPECT_NE(refused.fallback_note.find(kReason), std::string::npos) << refused.fallback_note;
}

TEST(AttentionBackend, ReferenceNeverUsesCudnn) {
  EXPECT_FALSE(choose_attention_backend(AttentionBackend::reference, kShape, "").use_cudnn);
  EXPECT_FALSE(choose_attention_backend(AttentionBackend::reference, kShape, kReason).use_cudnn);
}

TEST(AttentionBackend, TheRunHeaderSaysWhichAttentionRuns) {
  EXPECT_EQ(describe_attention_choice(AttentionBackend::automatic, Device::host),
            "attention_backend auto: no effect on the host backend");
  const std::string automatic = describe_attention_choice(AttentionBackend::automatic, Device::cuda);
  EXPECT_NE(automatic.find("cuDNN fused SDPA where its plan builds"), std::string::npos) << automatic;
  EXPECT_NE(automatic.find("else the CUDA reference kernel"), std::string::npos) << automatic;
  EXPECT_NE(describe_attention_choice(AttentionBackend::cudnn, Device::cuda).find("cuDNN fused SDPA (bf16"),
            std::string::npos);
  EXPECT_NE(describe_attention_choice(AttentionBackend::reference, Device::cuda).find("CUDA reference attention"),
            std::string::npos);
}
