// Image batches: the sample mapping and the synthetic task; see image_source.hpp.
#include "data/image_source.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>

#include "base/error.hpp"
#include "core/rng.hpp"
#include "data/token_dataset.hpp"

namespace ftrain::data {

namespace {

using HostPolicy = Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>;

const std::uint64_t kTemplateStream = rng::hash_name("ftrain.data.images.template");

class SyntheticImages final : public ImageStore {
 public:
  explicit SyntheticImages(const ImageSourceOptions& o)
      : options_(o),
        label_stream_(rng::hash_name(o.eval ? "ftrain.data.images.eval.label" : "ftrain.data.images.label")),
        noise_stream_(rng::hash_name(o.eval ? "ftrain.data.images.eval.noise" : "ftrain.data.images.noise")) {
    FT_CHECK(o.classes > 0 && o.samples > 0) << "synthetic images: classes " << o.classes << ", samples "
                                             << o.samples;
  }
  std::int64_t size() const override { return options_.samples; }
  std::int64_t classes() const override { return options_.classes; }

  void read(std::int64_t index, float* out, std::int32_t& label) override {
    const std::int64_t P = options_.height * options_.width * options_.channels;
    const std::uint64_t seed = options_.seed;
    const auto c = static_cast<std::int64_t>(rng::bits(seed, label_stream_, static_cast<std::uint64_t>(index)) %
                                             static_cast<std::uint64_t>(options_.classes));
    label = static_cast<std::int32_t>(c);
    const double signal = options_.signal, noise = options_.noise;
    const std::uint64_t noise_stream = noise_stream_;
    Kokkos::parallel_for("ftrain::data::images::synthetic", HostPolicy(0, P), [=](std::int64_t j) {
      const double t = rng::normal(seed, kTemplateStream, static_cast<std::uint64_t>(c * P + j));
      const double n = rng::normal(seed, noise_stream, static_cast<std::uint64_t>(index * P + j));
      out[j] = static_cast<float>(signal * t + noise * n);
    });
  }

 private:
  ImageSourceOptions options_;
  std::uint64_t label_stream_, noise_stream_;
};

}  // namespace

std::unique_ptr<ImageStore> make_synthetic_images(const ImageSourceOptions& options) {
  return std::make_unique<SyntheticImages>(options);
}

ImageBatchSource::ImageBatchSource(std::unique_ptr<ImageStore> store, const ImageSourceOptions& options)
    : store_(std::move(store)), options_(options) {
  FT_CHECK(store_ != nullptr && options_.global_batch > 0) << "image source without images or batch";
  if (store_->size() <= 0) FT_USER_ERROR() << "the image data has no images";
}

std::int64_t ImageBatchSource::image_of_sample(std::int64_t step, std::int64_t sample) {
  FT_CHECK(step >= 0 && sample >= 0 && sample < options_.global_batch)
      << "step " << step << " sample " << sample << " global batch " << options_.global_batch;
  const std::int64_t n = store_->size();
  const std::int64_t g = step * options_.global_batch + sample;
  const std::int64_t epoch = g / n, position = g % n;
  if (!options_.shuffle) return position;
  if (epoch != perm_epoch_) {
    perm_ = shuffle_permutation(n, options_.seed, epoch);
    perm_epoch_ = epoch;
  }
  return perm_[static_cast<std::size_t>(position)];
}

void ImageBatchSource::fill_batch(std::int64_t step, std::int64_t first_sample, std::int64_t count, Batch& batch) {
  batch.inputs = Tensor::empty({count, options_.height, options_.width, options_.channels}, DType::f32);
  batch.targets = Tensor::empty({count}, DType::i32);
  batch.position_offset = 0;
  float* pixels_out = batch.inputs.data_as<float>();
  std::int32_t* labels = batch.targets.data_as<std::int32_t>();
  for (std::int64_t i = 0; i < count; ++i) {
    store_->read(image_of_sample(step, first_sample + i), pixels_out + i * pixels(), labels[i]);
  }
}

void ImageBatchSource::fill_eval(std::int64_t first, std::int64_t count, std::int64_t rows, Batch& batch) {
  FT_CHECK(count >= 0 && count <= rows && first >= 0 && first + count <= store_->size())
      << "eval batch of " << count << " images from " << first << " in " << rows << " rows of "
      << store_->size();
  batch.inputs = Tensor::zeros({rows, options_.height, options_.width, options_.channels}, DType::f32);
  batch.targets = Tensor::empty({rows}, DType::i32);
  batch.position_offset = 0;
  float* pixels_out = batch.inputs.data_as<float>();
  std::int32_t* labels = batch.targets.data_as<std::int32_t>();
  std::fill(labels, labels + rows, kIgnoreTarget);
  for (std::int64_t i = 0; i < count; ++i) store_->read(first + i, pixels_out + i * pixels(), labels[i]);
}

}  // namespace ftrain::data
