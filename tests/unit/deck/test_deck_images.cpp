// The deck's image data forms (`data images synthetic ...`,
// `data images hdf5 PATH ...` and their eval counterparts; two-word form
// selectors), including the per-channel mean/std lists, and the FP8 recipe
// (`precision fp8`, `fp8 ...`).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "base/error.hpp"
#include "deck/parser.hpp"

using namespace ftrain;

namespace {

const std::string kRequired = "model vit preset tiny\nmax_steps 10\n";

RunConfig parse(const std::string& text) { return parse_deck_string(text, "vit.in", {}); }

std::string error_of(const std::string& text) {
  try {
    parse(text);
  } catch (const UserError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error for deck:\n" << text;
  return "";
}

}  // namespace

TEST(DeckImages, SyntheticTrainAndEval) {
  const RunConfig c = parse(kRequired +
                            "data images synthetic classes 7 samples 4096 noise 0.5 shuffle on\n"
                            "eval images synthetic every 5 samples 64\n");
  EXPECT_EQ(c.data.kind, deck::DataKind::images);
  EXPECT_EQ(c.data.images.source, deck::ImageSource::synthetic);
  EXPECT_EQ(c.data.images.classes, 7);
  EXPECT_EQ(c.data.images.samples, 4096);
  EXPECT_DOUBLE_EQ(c.data.images.noise, 0.5);
  EXPECT_TRUE(c.data.shuffle);
  EXPECT_EQ(c.data.where.line, 3);
  EXPECT_EQ(c.eval.kind, deck::DataKind::images);
  EXPECT_EQ(c.eval.images.source, deck::ImageSource::synthetic);
  EXPECT_EQ(c.eval.every, 5);
  EXPECT_EQ(c.eval.images.samples, 64);
  EXPECT_FALSE(c.eval.path.empty()) << "eval is on";
}

TEST(DeckImages, SyntheticDefaults) {
  const RunConfig c = parse(kRequired + "data images synthetic\n");
  EXPECT_EQ(c.data.images.classes, 0);  // the model's
  EXPECT_EQ(c.data.images.samples, 1024);
  EXPECT_EQ(c.eval.images.samples, 256);
  EXPECT_TRUE(c.eval.path.empty()) << "no eval command, no eval";
}

TEST(DeckImages, Hdf5WithNormalisation) {
  const std::string path = (std::filesystem::temp_directory_path() / "ftrain_deck_images_test.h5").string();
  std::FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  const RunConfig c = parse(kRequired + "data images hdf5 " + path + " mean 0.485,0.456,0.406 std 0.229,0.224,0.225\n" +
                            "eval images hdf5 " + path + " every 10 mean 0.5 std 0.25\n");
  EXPECT_EQ(c.data.images.source, deck::ImageSource::hdf5);
  EXPECT_EQ(c.data.path, path);
  ASSERT_EQ(c.data.images.mean.size(), 3u);
  EXPECT_DOUBLE_EQ(c.data.images.mean[2], 0.406);
  EXPECT_DOUBLE_EQ(c.data.images.std[0], 0.229);
  EXPECT_EQ(c.eval.images.mean, std::vector<double>{0.5});
  EXPECT_EQ(c.eval.images.std, std::vector<double>{0.25});

  const std::string bad_std = error_of(kRequired + "data images hdf5 " + path + " std 0.2,0\n");
  EXPECT_NE(bad_std.find("vit.in:3:"), std::string::npos) << bad_std;
  EXPECT_NE(bad_std.find("positive numbers"), std::string::npos) << bad_std;
  const std::string bad_mean = error_of(kRequired + "data images hdf5 " + path + " mean 0.5,,0.5\n");
  EXPECT_NE(bad_mean.find("'0.5,,0.5'"), std::string::npos) << bad_mean;
  std::filesystem::remove(path);
}

TEST(DeckImages, ErrorsNameTheForm) {
  const std::string unknown = error_of(kRequired + "data images fake\n");
  EXPECT_NE(unknown.find("vit.in:3:"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("images synthetic"), std::string::npos) << unknown;
  const std::string missing = error_of(kRequired + "data images hdf5\n");
  EXPECT_NE(missing.find("PATH"), std::string::npos) << missing;
  const std::string keyword = error_of(kRequired + "data images synthetic packing on\n");
  EXPECT_NE(keyword.find("packing"), std::string::npos) << keyword;
  const std::string every = error_of(kRequired + "eval images synthetic samples 3\n");
  EXPECT_NE(every.find("every"), std::string::npos) << every;
}

TEST(DeckFp8, PrecisionAndRecipe) {
  const RunConfig defaults = parse(kRequired);
  EXPECT_EQ(defaults.fp8.format, deck::Fp8Format::hybrid);
  EXPECT_EQ(defaults.fp8.amax_history, 1024);
  EXPECT_EQ(defaults.fp8.margin, 0);
  EXPECT_EQ(defaults.fp8.amax_algo, deck::AmaxAlgo::max);
  const RunConfig c = parse(kRequired + "precision fp8\nfp8 format e4m3 amax_history 16 margin 2 amax_algo most_recent\n");
  EXPECT_EQ(c.precision, deck::Precision::fp8);
  EXPECT_EQ(c.fp8.format, deck::Fp8Format::e4m3);
  EXPECT_EQ(c.fp8.amax_history, 16);
  EXPECT_EQ(c.fp8.margin, 2);
  EXPECT_EQ(c.fp8.amax_algo, deck::AmaxAlgo::most_recent);
  EXPECT_EQ(c.fp8.where.line, 4);
  const std::string bad = error_of(kRequired + "fp8 format e5m2\n");
  EXPECT_NE(bad.find("vit.in:3:"), std::string::npos) << bad;
  EXPECT_NE(bad.find("hybrid"), std::string::npos) << bad;
  EXPECT_NE(error_of(kRequired + "fp8 amax_history 0\n").find("amax_history"), std::string::npos);
  EXPECT_NE(error_of(kRequired + "fp8 margin 100\n").find("too large"), std::string::npos);
}
