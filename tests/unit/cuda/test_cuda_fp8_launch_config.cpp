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

void check_presets(const std::string& dir, const std::string& plugin) {
  for (const std::string& preset : PluginLoader({dir}).load(plugin)->presets()) {
    const auto s = ftrain::testing::preset_shapes(dir, plugin, preset);
    const std::int64_t longest = std::max<std::int64_t>(s.max_positions, 1024);
    for (const auto& l : s.linears) {
      const std::string at = s.model + " " + l.example;
      check(cast_transpose_launch(l.out, l.in), l.out, l.in, at + " weight");
      for (std::int64_t rows : {std::int64_t{1}, std::int64_t{3}, longest, 64 * longest}) {
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
  // The check can fail: a block that is not the kernel's 256 threads.
  Fp8TileGrid bad = cast_transpose_launch(64, 64);
  bad.config.block = 2048;
  EXPECT_NE(launch_config_problem(bad.config, kSm90Limits), "");
}
