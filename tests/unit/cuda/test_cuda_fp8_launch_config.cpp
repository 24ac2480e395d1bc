// Launch configurations of the FP8 kernels (kernels/cuda/fp8_launch_config.hpp)
// for every linear layer of every Llama and ViT preset, checked against the
// sm_90 limits without a GPU: the fused cast + transpose + amax over
// activations [rows, in], weights [out, in] and output gradients [rows, out]
// at 1 row up to 64 of the preset's longest sequences, and the scale update.
// The tiles must cover the tensor exactly once (the kernel strides over
// tiles beyond the grid).
#include <gtest/gtest.h>

#include <string>

#include "kernels/cuda/fp8_launch_config.hpp"
#include "unit/cuda/preset_shapes.hpp"

using namespace ftrain;
using namespace ftrain::cuda;

namespace {

void check(const Fp8TileGrid& g, std::int64_t rows, std::int64_t cols, const std::string& what) {
  const std::string problem = launch_config_problem(g.config, kSm90Limits);
  EXPECT_TRUE(problem.empty()) << what << ": " << problem;
  EXPECT_GE(g.tile_rows * kFp8Tile, rows) << what;
  EXPECT_LT((g.tile_rows - 1) * kFp8Tile, std::max<std::int64_t>(rows, 1)) << what << ": a tile row too many";
  EXPECT_GE(g.tile_cols * kFp8Tile, cols) << what;
  EXPECT_LT((g.tile_cols - 1) * kFp8Tile, std::max<std::int64_t>(cols, 1)) << what << ": a tile column too many";
  EXPECT_EQ(g.config.block, kFp8Tile * kFp8TileRows) << what << ": the kernel's blockDim is (32, 8)";
}

// A fused producer's launch: launchable on sm_90, whole warps (its amax is a
// full-mask warp max), and the very launch of the unfused kernel it
// replaces (for RMSNorm: the same block, so block_sum adds a row in the same
// order and rstd keeps its bits).
void check_fused(const LaunchConfig& c, const LaunchConfig& unfused, bool block_sum, const std::string& what) {
  const std::string problem = launch_config_problem(c, kSm90Limits);
  EXPECT_TRUE(problem.empty()) << what << ": " << problem;
  EXPECT_EQ(c.block % kSm90Limits.warp_size, 0) << what << ": the warp max needs whole warps";
  EXPECT_EQ(c.block, unfused.block) << what;
  EXPECT_EQ(c.grid_x, unfused.grid_x) << what;
  EXPECT_EQ(c.shared_bytes, unfused.shared_bytes) << what;
  if (block_sum)
    EXPECT_GE(c.shared_bytes, c.block / kSm90Limits.warp_size * static_cast<std::int64_t>(sizeof(float)))
      << what << ": block_sum's scratch, one f32 per warp";
}

// The unfused rmsnorm_forward's launch (norms.cu: per_row_launch, one reduction).
LaunchConfig rmsnorm_fp8_expected(std::int64_t rows, std::int64_t width) { return per_row_launch(rows, width, 1); }

void check_presets(const std::string& dir, const std::string& plugin) {
  for (const std::string& preset : PluginLoader({dir}).load(plugin)->presets()) {
    const auto s = ftrain::testing::preset_shapes(dir, plugin, preset);
    const std::int64_t longest = std::max<std::int64_t>(s.max_positions, 1024);
    for (const auto& l : s.linears) {
      const std::string at = s.model + " " + l.example;
      check(cast_transpose_launch(l.out, l.in), l.out, l.in, at + " weight");
      for (std::int64_t rows : {std::int64_t{1}, std::int64_t{3}, longest, 64 * longest}) {
        // The fused producers: RMSNorm over [rows, in] (the hidden size for
        // q/k/v and gate/up), SwiGLU over [rows, in] (down_proj's input).
        check_fused(rmsnorm_fp8_launch(rows, l.in), rmsnorm_fp8_expected(rows, l.in), true,
                    at + " rmsnorm_fp8, rows " + std::to_string(rows));
        check_fused(swiglu_fp8_launch(rows * l.in), elementwise_launch(rows * l.in), false,
                    at + " swiglu_fp8, rows " + std::to_string(rows));
        check(cast_transpose_launch(rows, l.in), rows, l.in, at + " input, rows " + std::to_string(rows));
        check(cast_transpose_launch(rows, l.out), rows, l.out, at + " grad output, rows " + std::to_string(rows));
      }
    }
  }
}

}  // namespace

TEST(CudaFp8LaunchConfig, LlamaPresetsFitSm90) { check_presets(FTRAIN_TEST_LLAMA_PLUGIN_DIR, "llama"); }
TEST(CudaFp8LaunchConfig, VitPresetsFitSm90) { check_presets(FTRAIN_TEST_VIT_PLUGIN_DIR, "vit"); }

TEST(CudaFp8LaunchConfig, TilesAndLimits) {
  const Fp8TileGrid g = cast_transpose_launch(33, 64);
  EXPECT_EQ(g.tile_rows, 2);
  EXPECT_EQ(g.tile_cols, 2);
  EXPECT_EQ(g.config.grid_x, 4);
  EXPECT_EQ(g.config.shared_bytes, 32 * 33);
  // A huge tensor: the grid is capped, the kernel strides over the tiles.
  EXPECT_EQ(cast_transpose_launch(std::int64_t{1} << 30, 8192).config.grid_x, kFp8MaxTileBlocks);
  EXPECT_TRUE(launch_config_problem(fp8_update_scales_launch(), kSm90Limits).empty());
  EXPECT_GE(fp8_update_scales_launch().block, 3) << "a thread per history column";
  // The fused producers: a width-1 row and an empty SwiGLU still launch
  // one block (scale_inv is written, the amax combines with 0).
  EXPECT_TRUE(launch_config_problem(rmsnorm_fp8_launch(0, 1), kSm90Limits).empty());
  EXPECT_EQ(rmsnorm_fp8_launch(0, 1).grid_x, 1);
  EXPECT_EQ(rmsnorm_fp8_launch(5, 1).block, 32) << "at least one warp";
  EXPECT_EQ(swiglu_fp8_launch(0).grid_x, 1);
  EXPECT_EQ(rmsnorm_fp8_launch(3, 8192).block, 1024) << "8192 / 4 elements per thread, capped at 1024";
  // The check can fail: a block that is not the kernel's 256 threads.
  Fp8TileGrid bad = cast_transpose_launch(64, 64);
  bad.config.block = 2048;
  EXPECT_NE(launch_config_problem(bad.config, kSm90Limits), "");
}
