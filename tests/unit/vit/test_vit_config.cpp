// ViT presets, overrides and parameter counts, through the real plugin.
//
// The published sizes (timm, with a 1000-class head at 224 px):
// vit_base_patch16_224 86,567,656; vit_large_patch16_224 304,326,632;
// vit_huge_patch14_224 632,045,800 parameters.
#include <gtest/gtest.h>

#include <string>

#include "base/error.hpp"
#include "plugin/loader.hpp"

using namespace ftrain;

namespace {

ModelHandle make_vit(const std::string& preset, const ModelOverrides& overrides = {}) {
  return PluginLoader({FTRAIN_TEST_VIT_PLUGIN_DIR}).create_model("vit", preset, overrides);
}

std::int64_t count_params(Model& model) {
  std::int64_t total = 0;
  for (int u = 0; u < model.num_units(); ++u)
    for (const auto& spec : model.unit(u).params()) total += shape_numel(spec.shape);
  return total;
}

}  // namespace

TEST(VitConfig, PublishedParameterCounts) {
  EXPECT_EQ(count_params(*make_vit("vit-b16")), 86567656);
  EXPECT_EQ(count_params(*make_vit("vit-l16")), 304326632);
  const std::int64_t huge = count_params(*make_vit("vit-h14"));
  EXPECT_EQ(huge, 632045800);
  EXPECT_NEAR(static_cast<double>(huge), 632e6, 1e6);
}

TEST(VitConfig, UnitsAndTimmNames) {
  auto model = make_vit("tiny");
  EXPECT_EQ(count_params(*model), 114250);  // share/doc/vit.md's table
  ASSERT_EQ(model->num_units(), 2 + 2);  // patch_embed, 2 blocks, head
  EXPECT_EQ(model->data_kind(), DataKind::images);
  EXPECT_EQ(model->output_size(), 10);
  const auto embed = model->unit(0).params();
  ASSERT_EQ(embed.size(), 4u);
  EXPECT_EQ(embed[0].name, "cls_token");
  EXPECT_EQ(embed[0].shape, (Shape{1, 1, 64}));
  EXPECT_EQ(embed[1].name, "pos_embed");
  EXPECT_EQ(embed[1].shape, (Shape{1, 17, 64}));  // (32/8)^2 patches + class token
  EXPECT_EQ(embed[2].name, "patch_embed.proj.weight");
  EXPECT_EQ(embed[2].shape, (Shape{64, 3, 8, 8}));
  EXPECT_EQ(embed[3].name, "patch_embed.proj.bias");
  const auto block = model->unit(2).params();
  EXPECT_EQ(model->unit(2).name(), "blocks.1");
  EXPECT_EQ(block[2].name, "blocks.1.attn.qkv.weight");
  EXPECT_EQ(block[2].shape, (Shape{192, 64}));
  EXPECT_EQ(block[8].name, "blocks.1.mlp.fc1.weight");
  EXPECT_EQ(block[8].shape, (Shape{256, 64}));
  EXPECT_FALSE(block[1].weight_decay);  // norm1.bias
  const auto head = model->unit(3).params();
  EXPECT_EQ(head[2].name, "head.weight");
  EXPECT_EQ(head[2].shape, (Shape{10, 64}));
  EXPECT_EQ(head[3].name, "head.bias");
}

TEST(VitConfig, OverridesAndAliases) {
  auto model = make_vit("vit-b16", {{"img_size", "384"}, {"num_classes", "21843"}, {"mlp_ratio", "2"}});
  const auto c = model->config();
  EXPECT_EQ(c.at("image_size"), "384");
  EXPECT_EQ(c.at("num_patches"), "576");
  EXPECT_EQ(c.at("num_classes"), "21843");
  EXPECT_EQ(c.at("mlp_dim"), "1536");
  EXPECT_EQ(c.at("layer_norm_eps"), "1e-06");
}

TEST(VitConfig, ErrorsNameTheProblem) {
  auto message = [](const std::string& preset, const ModelOverrides& o) {
    try {
      make_vit(preset, o);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(message("tiny", {{"patch_size", "5"}}).find("not a multiple of patch_size"), std::string::npos);
  EXPECT_NE(message("tiny", {{"num_heads", "5"}}).find("not divisible by num_heads"), std::string::npos);
  EXPECT_NE(message("tiny", {{"depht", "3"}}).find("unknown vit hyperparameter 'depht'"), std::string::npos);
  EXPECT_NE(message("vit-g", {}).find("vit-h14"), std::string::npos);  // the loader lists the presets
  EXPECT_NE(message("tiny", {{"depth", "-1"}}).find("positive integer"), std::string::npos);
}

TEST(VitConfig, FlopsPerImage) {
  auto model = make_vit("vit-h14");
  // timm lists 167.4 GMACs for one ViT-H/14 forward at 224 px; training
  // (forward + backward) is 3 forwards of 2 FLOPs per MAC.
  const double flops = model->training_flops_per_sample(0);
  EXPECT_NEAR(flops, 6 * 167.4e9, 6 * 0.5e9);
}
