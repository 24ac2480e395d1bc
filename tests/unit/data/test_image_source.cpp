// Image batches: the documented sample mapping (rank-split invariance,
// shuffling as a per-epoch permutation), evaluation padding, and that the
// synthetic task is deterministic, shares its classes between training and
// held-out evaluation images, and is learnable.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

#include "base/error.hpp"
#include "data/image_source.hpp"
#include "data/token_dataset.hpp"

using namespace ftrain;
using namespace ftrain::data;

namespace {

ImageSourceOptions small_options() {
  ImageSourceOptions o;
  o.height = 4;
  o.width = 6;
  o.channels = 3;
  o.global_batch = 8;
  o.seed = 5;
  o.classes = 5;
  o.samples = 20;
  return o;
}

ImageBatchSource make_source(const ImageSourceOptions& o) { return ImageBatchSource(make_synthetic_images(o), o); }

std::vector<float> pixels_of(const Batch& b) { return to_float_vector(b.inputs); }
std::vector<float> labels_of(const Batch& b) { return to_float_vector(b.targets); }

}  // namespace

TEST(ImageSource, BatchesHaveTheDocumentedShapes) {
  auto source = make_source(small_options());
  Batch batch;
  source.fill_batch(0, 0, 3, batch);
  EXPECT_EQ(batch.inputs.shape(), (Shape{3, 4, 6, 3}));
  EXPECT_EQ(batch.inputs.dtype(), DType::f32);
  EXPECT_EQ(batch.targets.shape(), (Shape{3}));
  EXPECT_EQ(batch.targets.dtype(), DType::i32);
  EXPECT_EQ(source.label_space(), 5);
  EXPECT_EQ(source.eval_size(), 20);
}

TEST(ImageSource, RankSplitDoesNotChangeTheSamples) {
  for (bool shuffle : {false, true}) {
    ImageSourceOptions o = small_options();
    o.shuffle = shuffle;
    auto whole = make_source(o), split = make_source(o);
    for (std::int64_t step : {0, 2, 7}) {  // 8 * 7 = 56: several epochs of 20 images
      Batch all, a, b;
      whole.fill_batch(step, 0, 8, all);
      split.fill_batch(step, 0, 3, a);
      split.fill_batch(step, 3, 5, b);
      auto pa = pixels_of(a), pb = pixels_of(b), la = labels_of(a), lb = labels_of(b);
      pa.insert(pa.end(), pb.begin(), pb.end());
      la.insert(la.end(), lb.begin(), lb.end());
      EXPECT_EQ(pa, pixels_of(all)) << "step " << step << " shuffle " << shuffle;
      EXPECT_EQ(la, labels_of(all)) << "step " << step << " shuffle " << shuffle;
    }
  }
}

TEST(ImageSource, SampleMappingFollowsTheContract) {
  ImageSourceOptions o = small_options();
  auto plain = make_source(o);
  EXPECT_EQ(plain.image_of_sample(0, 0), 0);
  EXPECT_EQ(plain.image_of_sample(2, 5), (2 * 8 + 5) % 20);
  o.shuffle = true;
  auto shuffled = make_source(o);
  // Epoch 1 is global indices 20..39: every image exactly once, in perm_1 order.
  const auto perm1 = shuffle_permutation(20, o.seed, 1);
  std::set<std::int64_t> seen;
  for (std::int64_t g = 20; g < 40; ++g) {
    const std::int64_t image = shuffled.image_of_sample(g / 8, g % 8);
    EXPECT_EQ(image, perm1[static_cast<std::size_t>(g - 20)]);
    seen.insert(image);
  }
  EXPECT_EQ(seen.size(), 20u);
}

TEST(ImageSource, EvalPadsWithIgnoredRows) {
  auto source = make_source(small_options());
  Batch batch;
  source.fill_eval(18, 2, 4, batch);
  const auto labels = labels_of(batch);
  EXPECT_GE(labels[0], 0);
  EXPECT_GE(labels[1], 0);
  EXPECT_EQ(labels[2], -100);
  EXPECT_EQ(labels[3], -100);
  const auto pixels = pixels_of(batch);
  for (std::size_t i = 2 * 72; i < pixels.size(); ++i) EXPECT_EQ(pixels[i], 0.0f);
  Batch again;
  source.fill_batch(0, 0, 8, again);  // training step 0 is images 0..7 (no shuffle)
  Batch first;
  source.fill_eval(0, 8, 8, first);
  EXPECT_EQ(pixels_of(first), pixels_of(again));
}

TEST(ImageSource, SyntheticTaskIsLearnableAndHeldOut) {
  // A nearest-class-mean classifier fitted on training images must classify
  // held-out evaluation images well: the classes are shared, the noise is not.
  ImageSourceOptions o;
  o.height = o.width = 8;
  o.channels = 3;
  o.classes = 10;
  o.samples = 400;
  o.seed = 9;
  const std::int64_t P = 8 * 8 * 3;
  auto train = make_synthetic_images(o);
  o.eval = true;
  o.samples = 200;
  auto held_out = make_synthetic_images(o);

  std::vector<double> means(10 * P, 0.0);
  std::vector<int> counts(10, 0);
  std::vector<float> image(P);
  std::int32_t label = 0;
  for (std::int64_t i = 0; i < train->size(); ++i) {
    train->read(i, image.data(), label);
    ASSERT_GE(label, 0);
    ASSERT_LT(label, 10);
    ++counts[label];
    for (std::int64_t j = 0; j < P; ++j) means[label * P + j] += image[j];
  }
  for (int c = 0; c < 10; ++c) {
    ASSERT_GT(counts[c], 10) << "class " << c << " is nearly absent";
    for (std::int64_t j = 0; j < P; ++j) means[c * P + j] /= counts[c];
  }
  int correct = 0;
  std::vector<float> first_eval(P), first_train(P);
  for (std::int64_t i = 0; i < held_out->size(); ++i) {
    held_out->read(i, image.data(), label);
    if (i == 0) first_eval = image;
    int best = -1;
    double best_d = 1e300;
    for (int c = 0; c < 10; ++c) {
      double d = 0;
      for (std::int64_t j = 0; j < P; ++j) d += (image[j] - means[c * P + j]) * (image[j] - means[c * P + j]);
      if (d < best_d) best_d = d, best = c;
    }
    correct += best == label;
  }
  EXPECT_GT(correct, 180) << "of 200: the synthetic task is not learnable";
  train->read(0, first_train.data(), label);
  EXPECT_NE(first_eval, first_train) << "evaluation images must be held out";
  // Deterministic: the same image twice.
  std::vector<float> again(P);
  train->read(0, again.data(), label);
  EXPECT_EQ(again, first_train);
}

// ---- HDF5 ------------------------------------------------------------------------------

#include <hdf5.h>

#include <filesystem>

namespace {

// Writes images uint8 [n, h, w, c] with pixel (i, y, x, ch) = (i*31 + y*7 + x*3 + ch) mod 256 and
// labels i mod 4 (as `label_type`).
std::string write_h5(const std::string& name, hsize_t n, hsize_t h, hsize_t w, hsize_t c, hid_t label_type,
                     bool with_labels = true) {
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  std::vector<std::uint8_t> pixels(n * h * w * c);
  for (hsize_t i = 0; i < n; ++i)
    for (hsize_t y = 0; y < h; ++y)
      for (hsize_t x = 0; x < w; ++x)
        for (hsize_t ch = 0; ch < c; ++ch)
          pixels[((i * h + y) * w + x) * c + ch] = static_cast<std::uint8_t>((i * 31 + y * 7 + x * 3 + ch) % 256);
  const hsize_t dims[4] = {n, h, w, c};
  hid_t space = H5Screate_simple(4, dims, nullptr);
  hid_t set = H5Dcreate2(file, "images", H5T_STD_U8LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(set, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, pixels.data());
  H5Dclose(set);
  H5Sclose(space);
  if (with_labels) {
    std::vector<std::int64_t> labels(n);
    for (hsize_t i = 0; i < n; ++i) labels[i] = static_cast<std::int64_t>(i % 4);
    space = H5Screate_simple(1, &n, nullptr);
    set = H5Dcreate2(file, "labels", label_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(set, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels.data());
    H5Dclose(set);
    H5Sclose(space);
  }
  H5Fclose(file);
  return path;
}

std::string error_of(const std::string& path, const ImageSourceOptions& o) {
  try {
    make_hdf5_images(path, o);
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(ImageSourceHdf5, ReadsNormalisesAndMapsLikeSynthetic) {
  const std::string path = write_h5("ftrain_image_source_test.h5", 10, 4, 6, 3, H5T_STD_I64LE);
  ImageSourceOptions o = small_options();
  o.global_batch = 4;
  o.mean = {0.5, 0.25, 0.0};
  o.std = {0.5, 0.25, 2.0};
  ImageBatchSource source(make_hdf5_images(path, o), o);
  EXPECT_EQ(source.eval_size(), 10);
  EXPECT_EQ(source.label_space(), 4);
  Batch batch;
  source.fill_batch(3, 1, 2, batch);  // global indices 13, 14 -> images 3, 4
  const auto pixels = pixels_of(batch);
  const auto labels = labels_of(batch);
  EXPECT_EQ(labels, (std::vector<float>{3, 0}));
  for (int k = 0; k < 2; ++k) {
    const int i = 3 + k;
    for (int y = 0; y < 4; ++y)
      for (int x = 0; x < 6; ++x)
        for (int ch = 0; ch < 3; ++ch) {
          const double u8 = (i * 31 + y * 7 + x * 3 + ch) % 256;
          const double expected = (u8 / 255.0 - o.mean[ch]) / o.std[ch];
          ASSERT_NEAR(pixels[((k * 4 + y) * 6 + x) * 3 + ch], expected, 1e-5) << i << " " << y << " " << x;
        }
  }
  std::filesystem::remove(path);
}

TEST(ImageSourceHdf5, BadFilesAreClearErrors) {
  ImageSourceOptions o = small_options();
  EXPECT_NE(error_of("/nonexistent/x.h5", o).find("cannot open as an HDF5 file"), std::string::npos);
  const std::string wrong_shape = write_h5("ftrain_image_source_shape.h5", 5, 4, 4, 3, H5T_STD_I64LE);
  EXPECT_NE(error_of(wrong_shape, o).find("[5, 4, 4, 3]"), std::string::npos) << error_of(wrong_shape, o);
  const std::string no_labels = write_h5("ftrain_image_source_nolabels.h5", 5, 4, 6, 3, H5T_STD_I64LE, false);
  EXPECT_NE(error_of(no_labels, o).find("no dataset 'labels'"), std::string::npos);
  const std::string int32_labels = write_h5("ftrain_image_source_i32.h5", 5, 4, 6, 3, H5T_STD_I32LE);
  EXPECT_EQ(error_of(int32_labels, o), "(no error)") << "any integer label type is read as int64";
  o.mean = {0.1, 0.2};
  EXPECT_NE(error_of(int32_labels, o).find("3 channels"), std::string::npos);
  for (const auto& p : {wrong_shape, no_labels, int32_labels}) std::filesystem::remove(p);
}
