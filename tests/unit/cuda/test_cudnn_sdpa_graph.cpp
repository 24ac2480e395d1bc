// cuDNN SDPA forward and backward graphs (kernels/cuda/cudnn_sdpa_graph.hpp) for every
// Llama preset's attention shape (heads, KV heads, head dim; causal; BSHD;
// seq 4096, the benchmark's), checked without a GPU: the operation graph
// finalizes and cuDNN's heuristics offer at least one engine configuration
// for an H100 device description. A graph whose K head dimension differs
// from Q's is refused with cuDNN's reason: the check can fail. The document
// mask's ragged graphs (padding mask over ragged offsets) are checked the
// same way for every preset, forward and backward.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <tuple>

#include "base/error.hpp"
#include "kernels/cuda/cudnn_sdpa_execute.hpp"
#include "kernels/cuda/cudnn_sdpa_graph.hpp"
#include "plugin/loader.hpp"
#include "unit/cuda/preset_shapes.hpp"

using namespace ftrain;
using namespace ftrain::cuda;

namespace {

std::set<std::tuple<std::int64_t, std::int64_t, std::int64_t>> llama_attention_shapes() {
  std::set<std::tuple<std::int64_t, std::int64_t, std::int64_t>> shapes;
  for (const std::string& preset : PluginLoader({FTRAIN_TEST_LLAMA_PLUGIN_DIR}).load("llama")->presets()) {
    auto model = PluginLoader({FTRAIN_TEST_LLAMA_PLUGIN_DIR}).create_model("llama", preset, {});
    const auto config = model->config();
    shapes.insert({std::stoll(config.at("num_attention_heads")), std::stoll(config.at("num_key_value_heads")),
                   std::stoll(config.at("head_dim"))});
  }
  return shapes;
}

}  // namespace

TEST(CudnnSdpaGraph, EveryLlamaPresetsForwardGraphHasAnH100Engine) {
  const CudnnDescriptors h100 = h100_device_description();
  const auto shapes = llama_attention_shapes();
  ASSERT_GE(shapes.size(), 3u) << "tiny, Llama 2 (MHA) and Llama 3 (GQA) shapes";
  for (const auto& [heads, kv_heads, head_dim] : shapes) {
    SCOPED_TRACE("heads " + std::to_string(heads) + ", kv heads " + std::to_string(kv_heads) + ", head dim " +
                 std::to_string(head_dim));
    const CudnnDescriptors graph = build_sdpa_forward_graph({2, heads, kv_heads, 4096, head_dim, true, 0});
    EXPECT_GE(sdpa_engine_configurations(graph, h100), 1);
  }
}

TEST(CudnnSdpaGraph, EveryLlamaPresetsBackwardGraphHasAnH100Engine) {
  const CudnnDescriptors h100 = h100_device_description();
  const auto shapes = llama_attention_shapes();
  ASSERT_GE(shapes.size(), 3u) << "tiny, Llama 2 (MHA) and Llama 3 (GQA) shapes";
  std::set<std::int64_t> head_dims;
  bool saw_gqa = false;
  for (const auto& [heads, kv_heads, head_dim] : shapes) {
    SCOPED_TRACE("heads " + std::to_string(heads) + ", kv heads " + std::to_string(kv_heads) + ", head dim " +
                 std::to_string(head_dim));
    const CudnnDescriptors graph = build_sdpa_backward_graph({2, heads, kv_heads, 4096, head_dim, true, 0});
    EXPECT_GE(sdpa_engine_configurations(graph, h100), 1);
    head_dims.insert(head_dim);
    saw_gqa = saw_gqa || kv_heads < heads;
  }
  EXPECT_TRUE(head_dims.count(64) && head_dims.count(128)) << "the presets cover head dims 64 and 128";
  EXPECT_TRUE(saw_gqa) << "a GQA preset's backward graph was checked";
}

// Packed windows of T 4096 with the document mask: a plan bucket of 8
// documents of <= 2048 tokens (and of 4096 one-token documents, the
// smallest bucket's shape), forward and backward, every preset's heads.
TEST(CudnnSdpaGraph, EveryLlamaPresetsDocumentMaskGraphsHaveAnH100Engine) {
  const CudnnDescriptors h100 = h100_device_description();
  const auto shapes = llama_attention_shapes();
  ASSERT_GE(shapes.size(), 3u) << "tiny, Llama 2 (MHA) and Llama 3 (GQA) shapes";
  for (const auto& [heads, kv_heads, head_dim] : shapes)
    for (const auto& [sequences, length] : {std::pair<std::int64_t, std::int64_t>{8, 2048}, {4096, 1}}) {
      SCOPED_TRACE("heads " + std::to_string(heads) + ", kv heads " + std::to_string(kv_heads) + ", head dim " +
                   std::to_string(head_dim) + ", " + std::to_string(sequences) + " documents of <= " +
                   std::to_string(length));
      const SdpaShape shape{1, heads, kv_heads, 4096, head_dim, true, 0, sequences, length};
      const CudnnDescriptors forward = build_sdpa_forward_graph(shape);
      EXPECT_GE(sdpa_engine_configurations(forward, h100), 1);
      const CudnnDescriptors backward = build_sdpa_backward_graph(shape);
      EXPECT_GE(sdpa_engine_configurations(backward, h100), 1);
    }
}

// Full attention within documents: the padding mask alone (its -inf tensor
// is there without the causal mask).
TEST(CudnnSdpaGraph, DocumentMaskGraphsWithoutTheCausalMaskAlsoFinalize) {
  const CudnnDescriptors h100 = h100_device_description();
  const SdpaShape shape{2, 12, 12, 1024, 64, false, 0, 8, 512};
  EXPECT_GE(sdpa_engine_configurations(build_sdpa_forward_graph(shape), h100), 1);
  EXPECT_GE(sdpa_engine_configurations(build_sdpa_backward_graph(shape), h100), 1);
}

TEST(CudnnSdpaGraph, NonCausalGraphAlsoFinalizes) {
  const CudnnDescriptors h100 = h100_device_description();
  const CudnnDescriptors graph = build_sdpa_forward_graph({4, 12, 12, 197, 64, false, 0});  // ViT-B/16 shape
  EXPECT_GE(sdpa_engine_configurations(graph, h100), 1);
}

TEST(CudnnSdpaGraph, AWrongGraphIsRefusedWithTheReason) {
  try {
    build_sdpa_forward_graph({2, 32, 8, 4096, 64, true, 128});
    ADD_FAILURE() << "a Q.K^T with head dims 64 and 128 was accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cudnnBackendFinalize"), std::string::npos) << m;
    EXPECT_NE(m.find("getDimA"), std::string::npos) << "cuDNN's own reason is in the message: " << m;
  }
}

TEST(CudnnSdpaGraph, NonCausalBackwardGraphAlsoFinalizes) {
  const CudnnDescriptors h100 = h100_device_description();
  const CudnnDescriptors graph = build_sdpa_backward_graph({4, 12, 12, 197, 64, false, 0});  // ViT-B/16 shape
  EXPECT_GE(sdpa_engine_configurations(graph, h100), 1);
}

TEST(CudnnSdpaGraph, AWrongBackwardGraphIsRefusedWithTheReason) {
  try {
    build_sdpa_backward_graph({2, 32, 8, 4096, 64, true, 128});
    ADD_FAILURE() << "a backward graph with Q head dim 64 and K head dim 128 was accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cudnnBackendFinalize"), std::string::npos) << m;
  }
}

// The execution side without a GPU: the cuDNN handle cannot be created and
// the reason says that SDPA plans need a GPU (what the op table reports for
// `attention_backend cudnn`); deviceless plan finalization against the H100
// description fails too (loading the engine's kernels needs a
// driver), naming cuDNN's reason. With a GPU both would succeed: skipped.
TEST(CudnnSdpaGraph, WithoutAGpuExecutionPlansAreRefusedSayingTheyNeedOne) {
  std::string why;
  void* handle = open_cudnn_handle(nullptr, why);
  if (handle != nullptr) GTEST_SKIP() << "a GPU is present: cudnnCreate succeeded (the gpu tests run the plans)";
  EXPECT_NE(why.find("cuDNN SDPA execution plans need a GPU"), std::string::npos) << why;
  EXPECT_NE(why.find("cudnnCreate returned CUDNN_STATUS_"), std::string::npos) << "cuDNN's status is named: " << why;
  const CudnnDescriptors h100 = h100_device_description();
  const CudnnDescriptors graph = build_sdpa_forward_graph({1, 32, 8, 4096, 64, true, 0});
  try {
    build_sdpa_execution_plan(graph, nullptr, &h100);
    ADD_FAILURE() << "an execution plan finalized without a driver";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("engine configurations finalized an execution plan"), std::string::npos)
        << e.what();
  }
}

TEST(CudnnSdpaGraph, AnExecutionPlanNeedsExactlyOneOfHandleAndDevice) {
  const CudnnDescriptors graph = build_sdpa_forward_graph({1, 4, 4, 128, 64, false, 0});
  EXPECT_THROW(build_sdpa_execution_plan(graph, nullptr, nullptr), Error);
}
