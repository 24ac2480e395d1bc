// Writes a small learnable image classification set in the HDF5 layout that
// `data images hdf5` reads (src/data/image_source.hpp): dataset "images"
// uint8 [N, H, W, 3] and "labels" int64 [N]. Class c has a fixed random
// template; each image is its template plus noise, clamped to 0..255, with
// label i mod classes. Deterministic (core/rng.hpp), so the regression
// curves are reproducible.
//
//   vit_make_image_h5 OUT.h5 N SIZE CLASSES
#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/rng.hpp"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s OUT.h5 N SIZE CLASSES\n", argv[0]);
    return 2;
  }
  const hsize_t n = std::strtoull(argv[2], nullptr, 10), size = std::strtoull(argv[3], nullptr, 10);
  const hsize_t classes = std::strtoull(argv[4], nullptr, 10), channels = 3;
  const hsize_t pixels = size * size * channels;
  std::vector<std::uint8_t> images(n * pixels);
  std::vector<std::int64_t> labels(n);
  for (hsize_t i = 0; i < n; ++i) {
    labels[i] = static_cast<std::int64_t>(i % classes);
    for (hsize_t j = 0; j < pixels; ++j) {
      const double base = 128.0 + 40.0 * ftrain::rng::normal(5, 1, labels[i] * pixels + j);
      const double noisy = base + 60.0 * ftrain::rng::normal(5, 2, i * pixels + j);
      images[i * pixels + j] = static_cast<std::uint8_t>(std::clamp(std::lround(noisy), 0L, 255L));
    }
  }
  const hid_t file = H5Fcreate(argv[1], H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (file < 0) {
    std::fprintf(stderr, "cannot create %s\n", argv[1]);
    return 1;
  }
  const hsize_t image_dims[4] = {n, size, size, channels};
  hid_t space = H5Screate_simple(4, image_dims, nullptr);
  hid_t set = H5Dcreate2(file, "images", H5T_STD_U8LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  herr_t status = H5Dwrite(set, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, images.data());
  H5Dclose(set);
  H5Sclose(space);
  space = H5Screate_simple(1, &n, nullptr);
  set = H5Dcreate2(file, "labels", H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  status |= H5Dwrite(set, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels.data());
  H5Dclose(set);
  H5Sclose(space);
  status |= H5Fclose(file);
  return status < 0 ? 1 : 0;
}
