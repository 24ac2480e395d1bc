// Launch configurations of the CUDA kernels (kernels/cuda/launch_config.hpp)
// for every preset's shapes, checked against the sm_90 limits (threads per
// block, shared memory per block, grid size) without a GPU. The per-row
// kernels use one block per row of a norm's width; element-wise kernels the
// largest activation a preset makes at its longest sequence; the embedding
// backward one block per token; the fused cross entropy one block per row of
// a vocabulary chunk (Llama 3's 128256 included); the ViT row ops and
// dropout (token_rows.cu, dropout.cu) at every ViT preset's image size and
// at 384 rounded up to whole patches (fine-tuning resolution); the
// multi-tensor AdamW one block per chunk of every preset unit's flat shard.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "kernels/adamw_chunks.hpp"
#include "kernels/cuda/launch_config.hpp"
#include "unit/cuda/preset_shapes.hpp"

using namespace ftrain;
using namespace ftrain::cuda;

namespace {

// Micro-batches of a training step on one GPU: 1 to 64 sequences of up to the
// preset's maximum length (at least 1 << 20 rows for the image models).
std::vector<std::int64_t> row_counts(const ftrain::testing::PresetShapes& s) {
  const std::int64_t longest = std::max<std::int64_t>(s.max_positions, 1024);
  return {1, 3, longest, 64 * longest};
}

void check(const LaunchConfig& c, const std::string& what) {
  const std::string problem = launch_config_problem(c, kSm90Limits);
  EXPECT_TRUE(problem.empty()) << what << ": " << problem;
}

void check_presets(const std::string& dir, const std::string& plugin) {
  for (const std::string& preset : PluginLoader({dir}).load(plugin)->presets()) {
    const auto s = ftrain::testing::preset_shapes(dir, plugin, preset);
    ASSERT_FALSE(s.norm_widths.empty()) << s.model << " has no norm";
    for (std::int64_t rows : row_counts(s)) {
      for (std::int64_t width : s.norm_widths) {
        const std::string at = s.model + " rows " + std::to_string(rows) + " width " + std::to_string(width);
        check(per_row_launch(rows, width, 1), "per-row (norm) " + at);
        check(elementwise_launch(rows * width), "element-wise " + at);
        check(elementwise_launch(width), "norm dw columns " + at);
      }
      check(elementwise_launch(rows * s.largest_linear_out), s.model + " activation of the widest linear");
      check(embedding_backward_launch(rows, *s.norm_widths.rbegin()), s.model + " embedding backward");
      if (s.heads > 0 && s.head_dim > 0)
        check(elementwise_launch(rows * s.heads * s.head_dim / 2), s.model + " rope pairs");
      // The fused cross-entropy head: a chunk's forward step (block per
      // row), its per-logit backward, the per-row init/finish/target check,
      // at the default chunk, a small odd one and the whole vocabulary.
      // Tensor parallelism's vocabulary slices (tensor 2 and 8) run the
      // same launches over a slice's rows.
      ASSERT_GT(s.vocab, 0) << s.model << " has no vocabulary / class count";
      for (const std::int64_t tensor : {std::int64_t{1}, std::int64_t{2}, std::int64_t{8}}) {
        const std::int64_t vocab = std::max<std::int64_t>(s.vocab / tensor, 1);
        for (std::int64_t vocab_chunk : {std::int64_t{4096}, std::int64_t{97}, vocab}) {
          const std::int64_t width = cross_entropy_chunk_width(vocab, vocab_chunk);
          const std::string at = s.model + " cross entropy rows " + std::to_string(rows) + " vocab " +
                                 std::to_string(vocab) + " (tensor " + std::to_string(tensor) + ") chunk " +
                                 std::to_string(width);
          check(cross_entropy_chunk_launch(rows, width), "chunk forward " + at);
          check(elementwise_launch(rows * width), "chunk backward " + at);
          check(elementwise_launch(width), "dbias columns " + at);
        }
      }
      check(elementwise_launch(rows), s.model + " cross entropy rows");
    }
  }
}

}  // namespace

TEST(CudaLaunchConfig, LlamaPresetsFitSm90) { check_presets(FTRAIN_TEST_LLAMA_PLUGIN_DIR, "llama"); }
TEST(CudaLaunchConfig, VitPresetsFitSm90) { check_presets(FTRAIN_TEST_VIT_PLUGIN_DIR, "vit"); }

// patchify (rows of C * P * P), the class token prepended, the position
// embedding added, the class token sliced back out, and their backward
// copies: one thread per element; dprefix / dbias: one thread per column of
// [T, D] or [1, D]; LoRA / MLP dropout over [B * T, D] and [B * T, mlp].
TEST(CudaLaunchConfig, VitRowOpsAndDropoutFitSm90) {
  const std::string dir = FTRAIN_TEST_VIT_PLUGIN_DIR;
  for (const std::string& preset : PluginLoader({dir}).load("vit")->presets()) {
    // The preset's image size, then a fine-tuning size: 384 rounded up to
    // whole patches (384 for /16, 392 for /14).
    const std::int64_t preset_patch =
        std::stoll(PluginLoader({dir}).create_model("vit", preset, {})->config().at("patch_size"));
    for (std::int64_t image_size : {std::int64_t{0}, (384 + preset_patch - 1) / preset_patch * preset_patch}) {
      ModelOverrides overrides;
      if (image_size > 0) overrides.emplace_back("image_size", std::to_string(image_size));
      ModelHandle model = PluginLoader({dir}).create_model("vit", preset, overrides);
      const auto config = model->config();
      auto number = [&](const char* key) { return std::stoll(config.at(key)); };
      const std::int64_t image = number("image_size"), patch = number("patch_size"),
                         channels = number("num_channels"), width = number("embed_dim"), mlp = number("mlp_dim");
      const std::int64_t patches = (image / patch) * (image / patch), tokens = patches + 1;
      ASSERT_EQ(patches, number("num_patches")) << preset << " at " << image;
      for (std::int64_t batch : {std::int64_t{1}, std::int64_t{3}, std::int64_t{256}, std::int64_t{4096}}) {
        const std::string at = "vit " + preset + " image " + std::to_string(image) + " batch " + std::to_string(batch);
        check(row_copy_launch(batch * patches, channels * patch * patch), "patchify " + at);
        check(row_copy_launch(batch * tokens, width), "prepend / broadcast add / slice backward " + at);
        check(row_copy_launch(batch * patches, width), "prepend backward dx " + at);
        check(row_copy_launch(batch, width), "slice forward (class token) " + at);
        check(batch_sum_launch(tokens * width), "broadcast add backward dbias " + at);
        check(batch_sum_launch(width), "prepend backward dprefix " + at);
        check(row_copy_launch(batch * tokens, width), "dropout " + at);
        check(row_copy_launch(batch * tokens, mlp), "dropout (mlp width) " + at);
      }
    }
  }
}

TEST(CudaLaunchConfig, RowOpsCoverTheirElements) {
  // vit-b16 at 224: dbias [197, 768] one thread per column, 591 blocks of 256.
  const LaunchConfig sums = batch_sum_launch(197 * 768);
  EXPECT_EQ(sums.block, 256);
  EXPECT_EQ(sums.grid_x, (197 * 768 + 255) / 256);
  // A large copy is capped and strides; a tiny one has one block.
  EXPECT_EQ(row_copy_launch(4096 * 257, 1280).grid_x, kSm90Limits.multiprocessors * kElementwiseBlocksPerSm);
  EXPECT_EQ(row_copy_launch(1, 3).grid_x, 1);
}

TEST(CudaLaunchConfig, TheLimitCheckCanFail) {
  LaunchConfig c = per_row_launch(10, 4096, 1);
  EXPECT_EQ(c.block, 1024) << "4096 features, 4 per thread";
  EXPECT_EQ(c.shared_bytes, 32 * 4) << "one float per warp";
  c.block = 2048;
  EXPECT_NE(launch_config_problem(c, kSm90Limits), "");
  c = elementwise_launch(1);
  c.shared_bytes = 64 * 1024;
  EXPECT_NE(launch_config_problem(c, kSm90Limits), "");
  c = elementwise_launch(1);
  c.grid_y = 70000;
  EXPECT_NE(launch_config_problem(c, kSm90Limits), "");
  c = elementwise_launch(1);
  c.block = 100;
  EXPECT_NE(launch_config_problem(c, kSm90Limits), "") << "not whole warps";
}

TEST(CudaLaunchConfig, CrossEntropyChunks) {
  // Llama 3's vocabulary at the default chunk, and the chunk rule.
  EXPECT_EQ(cross_entropy_chunk_width(128256, 4096), 4096);
  EXPECT_EQ(cross_entropy_chunk_width(1000, 4096), 1000) << "a chunk wider than the vocabulary is the vocabulary";
  const LaunchConfig c = cross_entropy_chunk_launch(8 * 4096, cross_entropy_chunk_width(128256, 4096));
  EXPECT_EQ(c.block, 1024);
  EXPECT_EQ(c.shared_bytes, 32 * 4) << "one float per warp, shared by the block max and the block sum";
  EXPECT_EQ(launch_config_problem(c, kSm90Limits), "");
  EXPECT_EQ(launch_config_problem(cross_entropy_chunk_launch(3, 128256), kSm90Limits), "") << "one chunk: V wide";
}

TEST(CudaLaunchConfig, ShapesNearTheLimits) {
  // A grid-stride loop caps its grid; a per-row grid strides over rows.
  EXPECT_EQ(elementwise_launch(std::int64_t{1} << 40).grid_x, kSm90Limits.multiprocessors * kElementwiseBlocksPerSm);
  EXPECT_LE(per_row_launch(std::int64_t{1} << 40, 7, 2).grid_x, kSm90Limits.max_grid_x);
  EXPECT_EQ(per_row_launch(5, 1, 2).block, 32);
  EXPECT_EQ(elementwise_launch(0).grid_x, 1);
}

// The multi-tensor AdamW (adamw_update_chunks): one block per chunk of a
// flat shard's table. Every preset's largest unit unsharded (one GPU holds
// the whole flat: the most chunks one launch gets) and sharded 8 and 64
// ways, with the tensors' own decay flags (a flag change starts a chunk).
TEST(CudaLaunchConfig, AdamwChunksFitSm90) {
  for (const auto& [dir, plugin] : {std::pair<std::string, std::string>{FTRAIN_TEST_LLAMA_PLUGIN_DIR, "llama"},
                                    {FTRAIN_TEST_VIT_PLUGIN_DIR, "vit"}}) {
    for (const std::string& preset : PluginLoader({dir}).load(plugin)->presets()) {
      ModelHandle model = PluginLoader({dir}).create_model(plugin, preset, {});
      for (int u = 0; u < model->num_units(); ++u) {
        std::vector<AdamwSegment> segments;
        std::int64_t numel = 0;
        for (const auto& spec : model->unit(u).params()) {
          if (!spec.tied_to.empty()) continue;
          segments.push_back({numel, shape_numel(spec.shape), spec.weight_decay});
          numel += shape_numel(spec.shape);
        }
        for (std::int64_t ranks : {std::int64_t{1}, std::int64_t{8}, std::int64_t{64}}) {
          // Rank 0's shard: the first ceil(numel / ranks) elements.
          const std::int64_t shard = (numel + ranks - 1) / ranks;
          std::vector<AdamwSegment> mine;
          for (const AdamwSegment& s : segments)
            if (s.offset < shard) mine.push_back({s.offset, std::min(s.count, shard - s.offset), s.weight_decay});
          const auto chunks = static_cast<std::int64_t>(adamw_chunk_rows(mine).size()) / math::kAdamwChunkColumns;
          const std::string at = plugin + " " + preset + " unit " + std::to_string(u) + " over " +
                                 std::to_string(ranks) + " ranks (" + std::to_string(chunks) + " chunks)";
          check(adamw_chunks_launch(chunks), "adamw chunks " + at);
          EXPECT_EQ(adamw_chunks_launch(chunks).grid_x, std::max<std::int64_t>(chunks, 1))
              << at << ": a block per chunk";
        }
      }
    }
  }
}

TEST(CudaLaunchConfig, AdamwChunksOneBlockPerChunk) {
  // Llama 2 7B's block on 8 GPUs: 202,383,360 / 8 elements in 9 tensors,
  // about 386 chunks of 65536: 386 blocks of 512 threads, 128 elements each.
  const LaunchConfig c = adamw_chunks_launch(386);
  EXPECT_EQ(c.grid_x, 386);
  EXPECT_EQ(c.block, 512);
  EXPECT_EQ(math::kAdamwChunkElements / c.block, 128);
  EXPECT_EQ(c.shared_bytes, 0);
  EXPECT_EQ(adamw_chunks_launch(0).grid_x, 1) << "never an empty grid (the launcher skips an empty table)";
  EXPECT_EQ(adamw_chunks_launch(std::int64_t{1} << 40).grid_x, kSm90Limits.max_grid_x) << "blocks stride beyond";
}

// The whole-tensor reductions (sum, sum_squares: the gradient norm every step
// and the loss sums) ran as ONE block of 1024 threads: one SM read a whole
// gradient shard. reduction_launch spreads the first pass over the GPU and
// keeps the partials a function of n alone (kernels/math/reduction.hpp), so
// the grid never changes the bits.
TEST(CudaLaunchConfig, ReductionsUseTheWholeGpu) {
  // 10^9 elements (a 1B-parameter shard on one GPU): at least a block per SM.
  const ReductionLaunch big = reduction_launch(1'000'000'000);
  EXPECT_GE(big.partials.grid_x, kSm90Limits.multiprocessors) << "a 10^9-element reduction must use every SM";
  EXPECT_EQ(launch_config_problem(big.partials, kSm90Limits), "");
  EXPECT_EQ(big.chunks, (1'000'000'000 + math::kReduceChunk - 1) / math::kReduceChunk) << "one partial per chunk";
  EXPECT_EQ(big.chunks_per_block * math::kReduceLanes, big.partials.block) << "kReduceLanes threads per chunk";
  EXPECT_EQ(big.partials.block % kSm90Limits.warp_size, 0) << "a chunk's lanes never straddle a warp";
  EXPECT_EQ(kSm90Limits.warp_size % math::kReduceLanes, 0);
  // Every preset-sized shard: launchable, and a block per SM once there are
  // enough chunks for it (132 x 32 chunks = 17.3M elements).
  for (std::int64_t n : {std::int64_t{1}, std::int64_t{4096}, std::int64_t{4097}, std::int64_t{1} << 24,
                         std::int64_t{17'301'504}, std::int64_t{202'383'360}, std::int64_t{1} << 40}) {
    const ReductionLaunch r = reduction_launch(n);
    EXPECT_EQ(launch_config_problem(r.partials, kSm90Limits), "") << "n " << n;
    EXPECT_EQ(r.chunks, math::reduce_chunks(n)) << "n " << n;
    // The grid covers the chunks directly or strides over them.
    EXPECT_GE(r.partials.grid_x * r.chunks_per_block, std::min<std::int64_t>(
                                                          r.chunks, kSm90Limits.multiprocessors * kReduceBlocksPerSm *
                                                                        r.chunks_per_block))
        << "n " << n;
    if (r.chunks >= kSm90Limits.multiprocessors * r.chunks_per_block)
      EXPECT_GE(r.partials.grid_x, kSm90Limits.multiprocessors) << "n " << n;
  }
  // Small tensors: one block, and an empty one still launches the total pass (it writes 0).
  EXPECT_EQ(reduction_launch(1).partials.grid_x, 1);
  EXPECT_EQ(reduction_launch(0).chunks, 0);
  EXPECT_EQ(reduction_launch(0).partials.grid_x, 1);
}

// The norms' dw / db column sums: a thread per (32-row block, column), the
// row blocks on the grid's y (kernels/math/column_sums.hpp: the host's
// order). They ran one thread per column over every row: 8 blocks for a
// 2048-wide norm whatever the batch.
TEST(CudaLaunchConfig, NormColumnSumsSpreadTheRowsOverTheGpu) {
  // Llama 3.2 1B: width 2048, one 4096-token sequence: 128 row blocks x 8.
  const LaunchConfig c = column_partials_launch(4096, 2048);
  EXPECT_EQ(c.block, 256);
  EXPECT_EQ(c.grid_x, 8);
  EXPECT_EQ(c.grid_y, 4096 / math::kColumnSumRows);
  EXPECT_GE(c.grid_x * c.grid_y, kSm90Limits.multiprocessors) << "at least a block per SM";
  EXPECT_EQ(launch_config_problem(c, kSm90Limits), "");
  // Past the grid's y limit the row blocks stride; narrow norms get whole warps.
  const LaunchConfig tall = column_partials_launch(std::int64_t{1} << 32, 64);
  EXPECT_EQ(tall.grid_y, kSm90Limits.max_grid_yz);
  EXPECT_EQ(tall.block, 64);
  EXPECT_EQ(launch_config_problem(tall, kSm90Limits), "");
  EXPECT_EQ(column_partials_launch(1, 1).block, 32);
  EXPECT_EQ(column_partials_launch(0, 1).grid_y, 1);
  for (std::int64_t rows : {std::int64_t{1}, std::int64_t{33}, std::int64_t{65536}, std::int64_t{1} << 22})
    for (std::int64_t width : {std::int64_t{1}, std::int64_t{192}, std::int64_t{768}, std::int64_t{8192}}) {
      const LaunchConfig w = column_partials_launch(rows, width);
      EXPECT_EQ(launch_config_problem(w, kSm90Limits), "") << rows << " x " << width;
      EXPECT_GE(w.grid_x * w.block, width) << "every column has a thread";
    }
}
