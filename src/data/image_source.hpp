// BatchSource over images: a seeded synthetic classification task, or an
// HDF5 file of labelled images.
//
// Batches: inputs f32 [count, H, W, C] (NHWC, normalised), targets i32
// [count] class labels (-100 for evaluation padding rows).
//
// Sample order (the same contract as data/token_dataset.hpp, with images in
// place of windows): sample k (0 <= k < B) of 0-based global step s has the
// global index g = s*B + k; epoch e = g / n, position p = g mod n (n = the
// number of images); shuffle off: image p; shuffle on: image perm_e[p] with
// token_dataset.hpp's shuffle_permutation(n, seed, e). Evaluation reads
// images 0..n-1 in order. Which rank reads which samples is the trainer's
// business; the result does not depend on it.
//
// Synthetic ("the seed's FakeDataset", but learnable so that a loss curve
// means something): every class c has a fixed template image
//     template_c[j] = rng::normal(seed, kTemplateStream, c * P + j)   (P = H*W*C)
// and image i of the set is
//     label_i  = rng::bits(seed, label_stream, i) mod classes
//     pixel_ij = signal * template_{label_i}[j] + noise * rng::normal(seed, noise_stream, i * P + j)
// with label_stream / noise_stream = hash_name("ftrain.data.images.{label,noise}")
// for training and hash_name("ftrain.data.images.eval.{label,noise}") for
// evaluation: the same task (same templates), held-out images. Images are
// generated on demand, so `samples` costs no memory.
//
// HDF5: datasets "images" uint8 [N, H, W, C] and "labels" integer [N] (any
// HDF5 integer type, read as int64). pixel = (u8 / 255 - mean[c]) / std[c],
// the torchvision ToTensor + Normalize convention. Each batch reads only its
// own images (one hyperslab per image), so files larger than memory work.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/batch_source.hpp"

namespace ftrain::data {

struct ImageSourceOptions {
  // Image shape the model expects; the data must match it.
  std::int64_t height = 32, width = 32, channels = 3;
  std::int64_t global_batch = 1;  // B
  bool shuffle = false;
  std::uint64_t seed = 0;
  bool eval = false;  // synthetic: draw the held-out evaluation images
  // synthetic
  std::int64_t classes = 10;
  std::int64_t samples = 1024;
  double signal = 0.5;
  double noise = 1.0;
  // hdf5: per-channel normalisation (one value for every channel is allowed)
  std::vector<double> mean = {0.0};
  std::vector<double> std = {1.0};
};

// Where an image comes from (synthetic generator or an HDF5 file).
class ImageStore {
 public:
  virtual ~ImageStore() = default;
  virtual std::int64_t size() const = 0;
  virtual std::int64_t classes() const = 0;  // largest label + 1
  // Image `index` into out[H*W*C] (normalised f32) and its label.
  virtual void read(std::int64_t index, float* out, std::int32_t& label) = 0;
};

std::unique_ptr<ImageStore> make_synthetic_images(const ImageSourceOptions& options);
// Throws UserError naming the file when it cannot be read or its datasets
// do not have the documented shapes.
std::unique_ptr<ImageStore> make_hdf5_images(const std::string& path, const ImageSourceOptions& options);

class ImageBatchSource final : public BatchSource {
 public:
  ImageBatchSource(std::unique_ptr<ImageStore> store, const ImageSourceOptions& options);
  void fill_batch(std::int64_t step, std::int64_t first_sample, std::int64_t count, Batch& batch) override;
  std::int64_t eval_size() const override { return store_->size(); }
  void fill_eval(std::int64_t first, std::int64_t count, std::int64_t rows, Batch& batch) override;
  std::int64_t label_space() const override { return store_->classes(); }

  // The image sample k of global step s reads (the mapping above).
  std::int64_t image_of_sample(std::int64_t step, std::int64_t sample);

 private:
  std::int64_t pixels() const { return options_.height * options_.width * options_.channels; }
  std::unique_ptr<ImageStore> store_;
  ImageSourceOptions options_;
  std::int64_t perm_epoch_ = -1;
  std::vector<std::int64_t> perm_;
};

}  // namespace ftrain::data
