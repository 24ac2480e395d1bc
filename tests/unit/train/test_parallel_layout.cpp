// The tensor-parallel layout of a Llama decoder (which weight dimension the
// T tensor ranks split) and the refusals of grids the model's shapes cannot
// take, each naming the number, T or C, and the deck line.
#include <gtest/gtest.h>

#include "base/error.hpp"
#include "train/parallel_layout.hpp"

using namespace ftrain;

namespace {

std::map<std::string, std::string> llama70b() {
  return {{"hidden_size", "8192"},       {"intermediate_size", "28672"}, {"num_attention_heads", "64"},
          {"num_key_value_heads", "8"},  {"head_dim", "128"},            {"vocab_size", "32000"},
          {"num_hidden_layers", "80"}};
}

}  // namespace

TEST(ParallelLayout, MegatronSplitsOfALlamaBlock) {
  const std::string l = "model.layers.3";
  for (const char* column : {".self_attn.q_proj.weight", ".self_attn.k_proj.weight", ".self_attn.v_proj.weight",
                             ".mlp.gate_proj.weight", ".mlp.up_proj.weight"})
    EXPECT_EQ(tensor_split("llama", l + column, {1024, 8192}), TensorSplit::output) << column;
  EXPECT_EQ(tensor_split("llama", l + ".self_attn.o_proj.weight", {8192, 8192}), TensorSplit::input);
  EXPECT_EQ(tensor_split("llama", l + ".mlp.down_proj.weight", {8192, 28672}), TensorSplit::input);
  EXPECT_EQ(tensor_split("llama", "model.embed_tokens.weight", {32000, 8192}), TensorSplit::output);
  EXPECT_EQ(tensor_split("llama", "lm_head.weight", {32000, 8192}), TensorSplit::output);
  EXPECT_EQ(tensor_split("llama", l + ".input_layernorm.weight", {8192}), TensorSplit::replicated);
  EXPECT_EQ(tensor_split("llama", "model.norm.weight", {8192}), TensorSplit::replicated);
  // No layout for other architectures: nothing is split.
  EXPECT_EQ(tensor_split("vit", "blocks.0.attn.qkv.weight", {2304, 768}), TensorSplit::replicated);
  EXPECT_EQ(tensor_slice_numel(TensorSplit::output, 1024 * 8192, 8), 128 * 8192);
  EXPECT_EQ(tensor_slice_numel(TensorSplit::replicated, 8192, 8), 8192);
}

TEST(ParallelLayout, Llama70bTakesTensor8AndContext4At8192) {
  EXPECT_TRUE(parallel_layout_problems("llama", llama70b(), 8, 1, 4096).empty());
  EXPECT_TRUE(parallel_layout_problems("llama", llama70b(), 8, 4, 8192).empty());
  EXPECT_TRUE(parallel_layout_problems("vit", {}, 1, 1, 128).empty());
}

TEST(ParallelLayout, RefusesWhatTheShapesCannotTake) {
  // 8 KV heads over 16 ranks; 64 heads and 28672 / 16 divide, 32000 / 16 = 2000 too.
  auto problems = parallel_layout_problems("llama", llama70b(), 16, 1, 4096);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("num_key_value_heads 8 is not divisible by tensor 16"), std::string::npos) << problems[0];
  // T 3: heads, KV heads, intermediate size and vocabulary all fail.
  problems = parallel_layout_problems("llama", llama70b(), 3, 1, 4096);
  EXPECT_EQ(problems.size(), 4u);
  problems = parallel_layout_problems("llama", llama70b(), 1, 3, 4096);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("seq_len 4096 is not divisible by 2 x context 3 = 6"), std::string::npos) << problems[0];
  problems = parallel_layout_problems("vit", {}, 2, 1, 128);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("model vit has no tensor or context parallel layout"), std::string::npos) << problems[0];
}

TEST(ParallelLayout, TheErrorNamesTheDeckLines) {
  RunConfig c;
  c.parallel.tensor = 16;
  c.parallel.context = 3;
  c.parallel.where = {"big.in", 12};
  c.batch.seq_len = 4096;
  c.batch.where = {"big.in", 7};
  try {
    check_parallel_layout("llama", llama70b(), c);
    FAIL() << "parallel tensor 16 context 3 was accepted for Llama 2 70B";
  } catch (const UserError& e) {
    const std::string what = e.what();
    for (const char* wanted : {"big.in:12: parallel tensor 16 context 3", "num_key_value_heads 8",
                               "seq_len 4096 is not divisible by 2 x context 3", "seq_len from big.in:7"})
      EXPECT_NE(what.find(wanted), std::string::npos) << wanted << " not in: " << what;
  }
  c.parallel.tensor = 8;
  c.parallel.context = 2;
  EXPECT_NO_THROW(check_parallel_layout("llama", llama70b(), c));
}
