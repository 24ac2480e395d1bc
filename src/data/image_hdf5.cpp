// Labelled images from an HDF5 file (data/image_source.hpp documents the
// layout). Each image is one hyperslab read, so a batch touches only its own
// images; the labels (8 bytes per image) are read once at open, which also
// gives the label space and validates every label before training starts.
//
// Plain serial HDF5 calls on each rank: the file is only read, and each rank
// reads different images, so there is nothing to coordinate.
#include <hdf5.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "core/hdf5_lock.hpp"
#include "data/image_source.hpp"

namespace ftrain::data {

namespace {

// Closes an HDF5 id with the matching H5*close on scope exit.
class Id {
 public:
  Id(hid_t id, herr_t (*closer)(hid_t)) : id_(id), closer_(closer) {}
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  ~Id() {
    if (id_ >= 0) closer_(id_);
  }
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*closer_)(hid_t);
};

std::vector<hsize_t> dims_of(hid_t dataset) {
  Id space(H5Dget_space(dataset), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> dims(static_cast<std::size_t>(std::max(rank, 0)));
  if (rank > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  return dims;
}

std::string dims_text(const std::vector<hsize_t>& dims) {
  std::string out = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) out += (i ? ", " : "") + std::to_string(dims[i]);
  return out + "]";
}

class Hdf5Images final : public ImageStore {
 public:
  Hdf5Images(const std::string& path, const ImageSourceOptions& o)
      : path_(path),
        options_(o),
        file_(open_file(path), H5Fclose),
        images_(open_dataset(file_.get(), path, "images"), H5Dclose) {
    const std::int64_t C = o.channels;
    for (const auto* list : {&o.mean, &o.std}) {
      if (list->size() != 1 && static_cast<std::int64_t>(list->size()) != C)
        FT_USER_ERROR() << path << ": mean/std have " << list->size() << " values but the images have " << C
                        << " channels (give one value, or one per channel)";
    }
    for (std::int64_t c = 0; c < C; ++c) {
      const double m = o.mean.size() == 1 ? o.mean[0] : o.mean[static_cast<std::size_t>(c)];
      const double s = o.std.size() == 1 ? o.std[0] : o.std[static_cast<std::size_t>(c)];
      // pixel = (u8 / 255 - m) / s = u8 * scale + shift
      scale_.push_back(static_cast<float>(1.0 / (255.0 * s)));
      shift_.push_back(static_cast<float>(-m / s));
    }

    const auto idims = dims_of(images_.get());
    if (idims.size() != 4 || static_cast<std::int64_t>(idims[1]) != o.height ||
        static_cast<std::int64_t>(idims[2]) != o.width || static_cast<std::int64_t>(idims[3]) != C) {
      FT_USER_ERROR() << path << ": dataset 'images' has shape " << dims_text(idims) << ", the model expects [N, "
                      << o.height << ", " << o.width << ", " << C << "] (N x H x W x C)";
    }
    {
      Id type(H5Dget_type(images_.get()), H5Tclose);
      if (H5Tget_class(type.get()) != H5T_INTEGER || H5Tget_size(type.get()) != 1 ||
          H5Tget_sign(type.get()) != H5T_SGN_NONE)
        FT_USER_ERROR() << path << ": dataset 'images' must hold uint8 pixels";
    }
    n_ = static_cast<std::int64_t>(idims[0]);

    Id labels(open_dataset(file_.get(), path, "labels"), H5Dclose);
    const auto ldims = dims_of(labels.get());
    if (ldims.size() != 1 || static_cast<std::int64_t>(ldims[0]) != n_)
      FT_USER_ERROR() << path << ": dataset 'labels' has shape " << dims_text(ldims) << ", expected [" << n_
                      << "] (one label per image)";
    {
      Id type(H5Dget_type(labels.get()), H5Tclose);
      if (H5Tget_class(type.get()) != H5T_INTEGER)
        FT_USER_ERROR() << path << ": dataset 'labels' must hold integers";
    }
    labels_.resize(static_cast<std::size_t>(n_));
    if (n_ > 0 && H5Dread(labels.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels_.data()) < 0)
      FT_USER_ERROR() << path << ": cannot read dataset 'labels'";
    for (std::int64_t i = 0; i < n_; ++i) {
      const std::int64_t l = labels_[static_cast<std::size_t>(i)];
      if (l < 0 || l > 0x7fffffff)
        FT_USER_ERROR() << path << ": labels[" << i << "] = " << l << " is not a class index (0 or more)";
      classes_ = std::max(classes_, l + 1);
    }
    buffer_.resize(static_cast<std::size_t>(o.height * o.width * C));
  }

  std::int64_t size() const override { return n_; }
  std::int64_t classes() const override { return classes_; }

  void read(std::int64_t index, float* out, std::int32_t& label) override {
    FT_CHECK(index >= 0 && index < n_) << path_ << ": image " << index << " of " << n_;
    const hsize_t start[4] = {static_cast<hsize_t>(index), 0, 0, 0};
    const hsize_t count[4] = {1, static_cast<hsize_t>(options_.height), static_cast<hsize_t>(options_.width),
                              static_cast<hsize_t>(options_.channels)};
    bool ok = false;
    {
      // Training reads images while an asynchronous checkpoint may be in
      // HDF5 on its background thread (core/hdf5_lock.hpp).
      std::lock_guard<std::mutex> hdf5(hdf5_library_mutex());
      Id file_space(H5Dget_space(images_.get()), H5Sclose);
      Id memory_space(H5Screate_simple(4, count, nullptr), H5Sclose);
      ok = file_space.ok() && memory_space.ok() &&
           H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr) >= 0 &&
           H5Dread(images_.get(), H5T_NATIVE_UINT8, memory_space.get(), file_space.get(), H5P_DEFAULT,
                   buffer_.data()) >= 0;
    }
    if (!ok) FT_USER_ERROR() << path_ << ": cannot read image " << index << " of dataset 'images'";
    const std::size_t C = static_cast<std::size_t>(options_.channels);
    for (std::size_t j = 0; j < buffer_.size(); ++j) {
      const std::size_t c = j % C;
      out[j] = static_cast<float>(buffer_[j]) * scale_[c] + shift_[c];
    }
    label = static_cast<std::int32_t>(labels_[static_cast<std::size_t>(index)]);
  }

 private:
  static hid_t open_file(const std::string& path) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors become our messages, not HDF5's stack dump
    const hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    if (id < 0) FT_USER_ERROR() << path << ": cannot open as an HDF5 file";
    return id;
  }
  static hid_t open_dataset(hid_t file, const std::string& path, const char* name) {
    if (H5Lexists(file, name, H5P_DEFAULT) <= 0)
      FT_USER_ERROR() << path << ": no dataset '" << name << "' (expected 'images' uint8 [N, H, W, C] and "
                      << "'labels' int [N])";
    const hid_t id = H5Dopen2(file, name, H5P_DEFAULT);
    if (id < 0) FT_USER_ERROR() << path << ": cannot open dataset '" << name << "'";
    return id;
  }

  std::string path_;
  ImageSourceOptions options_;
  Id file_;
  Id images_;
  std::int64_t n_ = 0;
  std::int64_t classes_ = 0;
  std::vector<std::int64_t> labels_;
  std::vector<float> scale_, shift_;
  std::vector<std::uint8_t> buffer_;
};

}  // namespace

std::unique_ptr<ImageStore> make_hdf5_images(const std::string& path, const ImageSourceOptions& options) {
  return std::make_unique<Hdf5Images>(path, options);
}

}  // namespace ftrain::data
