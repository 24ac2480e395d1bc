// HDF5 RAII helpers (see hdf5_util.hpp).
#include "ckpt/hdf5_util.hpp"

#include <algorithm>
#include <vector>

#include "core/error.hpp"

namespace ftrain::ckpt::h5 {

namespace {

// 1 Mi elements (4 MiB) per chunk: big enough for full-bandwidth I/O, small
// enough that a resharded read of a short range touches little extra data.
constexpr hsize_t kChunkElements = hsize_t{1} << 20;

Handle attribute_for_write(hid_t loc, const char* name, hid_t type, const std::string& file) {
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  if (H5Aexists(loc, name) > 0) H5Adelete(loc, name);
  Handle attr(H5Acreate2(loc, name, type, space.id(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (attr.id() < 0) FT_USER_ERROR() << file << ": cannot create attribute '" << name << "'";
  return attr;
}

template <class T>
void write_attr(hid_t loc, const char* name, hid_t type, T value, const std::string& file) {
  Handle attr = attribute_for_write(loc, name, type, file);
  if (H5Awrite(attr.id(), type, &value) < 0) FT_USER_ERROR() << file << ": cannot write attribute '" << name << "'";
}

template <class T>
T read_attr(hid_t loc, const char* name, hid_t type, const std::string& file) {
  quiet();
  if (H5Aexists(loc, name) <= 0) FT_USER_ERROR() << file << ": attribute '" << name << "' is missing";
  Handle attr(H5Aopen(loc, name, H5P_DEFAULT), H5Aclose);
  T value{};
  if (attr.id() < 0 || H5Aread(attr.id(), type, &value) < 0)
    FT_USER_ERROR() << file << ": cannot read attribute '" << name << "' (damaged file?)";
  return value;
}

// Adds the row-major elements [a, b) of the sub-array dims[level..] (whose
// leading indices are prefix[0..level)) to the selection of `space`.
void select_flat_range(hid_t space, const std::vector<hsize_t>& dims, std::size_t level, std::vector<hsize_t>& prefix,
                       hsize_t a, hsize_t b, bool& first) {
  if (a >= b) return;
  const std::size_t n = dims.size();
  hsize_t inner = 1;
  for (std::size_t i = level + 1; i < n; ++i) inner *= dims[i];
  auto add_block = [&](hsize_t row, hsize_t rows) {
    std::vector<hsize_t> start(n, 0), count(n, 1);
    for (std::size_t i = 0; i < level; ++i) start[i] = prefix[i];
    start[level] = row;
    count[level] = rows;
    for (std::size_t i = level + 1; i < n; ++i) count[i] = dims[i];
    const herr_t status = H5Sselect_hyperslab(space, first ? H5S_SELECT_SET : H5S_SELECT_OR, start.data(), nullptr,
                                              count.data(), nullptr);
    FT_CHECK(status >= 0) << "hyperslab selection failed";
    first = false;
  };
  if (level + 1 == n) {  // the last dimension: one run
    add_block(a, b - a);
    return;
  }
  const hsize_t r0 = a / inner, r1 = b / inner, a_off = a % inner, b_off = b % inner;
  if (r0 == r1) {  // inside one row
    prefix[level] = r0;
    select_flat_range(space, dims, level + 1, prefix, a_off, b_off, first);
    return;
  }
  hsize_t full_begin = r0;
  if (a_off != 0) {
    prefix[level] = r0;
    select_flat_range(space, dims, level + 1, prefix, a_off, inner, first);
    full_begin = r0 + 1;
  }
  if (r1 > full_begin) add_block(full_begin, r1 - full_begin);
  if (b_off != 0) {
    prefix[level] = r1;
    select_flat_range(space, dims, level + 1, prefix, 0, b_off, first);
  }
}

}  // namespace

// File dataspace of `dims` with elements [first, first + count) selected.
Handle flat_range_selection(const std::vector<hsize_t>& dims, std::int64_t first, std::int64_t count) {
  Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  if (count <= 0) {
    H5Sselect_none(space.id());
    return space;
  }
  std::vector<hsize_t> prefix(dims.size(), 0);
  bool first_block = true;
  select_flat_range(space.id(), dims, 0, prefix, static_cast<hsize_t>(first), static_cast<hsize_t>(first + count),
                    first_block);
  FT_CHECK(H5Sget_select_npoints(space.id()) == count) << "selection of " << count << " elements";
  return space;
}


void quiet() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

File File::create(const std::string& path) {
  quiet();
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_libver_bounds(fapl.id(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
  File f;
  f.path_ = path;
  f.handle_ = Handle(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.id()), H5Fclose);
  if (f.handle_.id() < 0) FT_USER_ERROR() << "cannot create HDF5 file " << path;
  return f;
}

File File::open_read(const std::string& path) {
  quiet();
  File f;
  f.path_ = path;
  f.handle_ = Handle(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (f.handle_.id() < 0) FT_USER_ERROR() << path << " is not a readable HDF5 file (missing, truncated or damaged)";
  return f;
}

void File::close() {
  if (handle_.id() < 0) return;
  if (H5Fflush(handle_.id(), H5F_SCOPE_LOCAL) < 0) FT_USER_ERROR() << "writing " << path_ << " failed (disk full?)";
  const hid_t id = handle_.release();
  if (H5Fclose(id) < 0) FT_USER_ERROR() << "closing " << path_ << " failed (disk full?)";
}

Group Group::create(hid_t parent, const std::string& name, const std::string& file) {
  Group g;
  g.handle_ = Handle(H5Gcreate2(parent, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
  if (g.handle_.id() < 0) FT_USER_ERROR() << file << ": cannot create group '" << name << "'";
  return g;
}

Group Group::open(hid_t parent, const std::string& name, const std::string& file) {
  quiet();
  Group g;
  g.handle_ = Handle(H5Gopen2(parent, name.c_str(), H5P_DEFAULT), H5Gclose);
  if (g.handle_.id() < 0) FT_USER_ERROR() << file << ": group '" << name << "' is missing or damaged";
  return g;
}

void write_attr_i64(hid_t loc, const char* name, std::int64_t value, const std::string& file) {
  write_attr(loc, name, H5T_NATIVE_INT64, value, file);
}
void write_attr_u64(hid_t loc, const char* name, std::uint64_t value, const std::string& file) {
  write_attr(loc, name, H5T_NATIVE_UINT64, value, file);
}
void write_attr_f64(hid_t loc, const char* name, double value, const std::string& file) {
  write_attr(loc, name, H5T_NATIVE_DOUBLE, value, file);
}
void write_attr_string(hid_t loc, const char* name, const std::string& value, const std::string& file) {
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.id(), std::max<std::size_t>(1, value.size()));
  H5Tset_strpad(type.id(), H5T_STR_NULLPAD);
  Handle attr = attribute_for_write(loc, name, type.id(), file);
  std::string padded = value.empty() ? std::string(1, '\0') : value;
  if (H5Awrite(attr.id(), type.id(), padded.data()) < 0)
    FT_USER_ERROR() << file << ": cannot write attribute '" << name << "'";
}
std::int64_t read_attr_i64(hid_t loc, const char* name, const std::string& file) {
  return read_attr<std::int64_t>(loc, name, H5T_NATIVE_INT64, file);
}
std::uint64_t read_attr_u64(hid_t loc, const char* name, const std::string& file) {
  return read_attr<std::uint64_t>(loc, name, H5T_NATIVE_UINT64, file);
}
double read_attr_f64(hid_t loc, const char* name, const std::string& file) {
  return read_attr<double>(loc, name, H5T_NATIVE_DOUBLE, file);
}

void write_string(hid_t loc, const char* name, const std::string& value, const std::string& file) {
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.id(), std::max<std::size_t>(1, value.size()));
  H5Tset_strpad(type.id(), H5T_STR_NULLPAD);
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle set(H5Dcreate2(loc, name, type.id(), space.id(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
  std::string padded = value.empty() ? std::string(1, '\0') : value;
  if (set.id() < 0 || H5Dwrite(set.id(), type.id(), H5S_ALL, H5S_ALL, H5P_DEFAULT, padded.data()) < 0)
    FT_USER_ERROR() << file << ": cannot write dataset '" << name << "'";
}

std::string read_string(hid_t loc, const char* name, const std::string& file) {
  quiet();
  Handle set(H5Dopen2(loc, name, H5P_DEFAULT), H5Dclose);
  if (set.id() < 0) FT_USER_ERROR() << file << ": dataset '" << name << "' is missing or damaged";
  Handle type(H5Dget_type(set.id()), H5Tclose);
  if (H5Tget_class(type.id()) != H5T_STRING || H5Tis_variable_str(type.id()) > 0)
    FT_USER_ERROR() << file << ": dataset '" << name << "' is not a fixed-length string";
  const std::size_t size = H5Tget_size(type.id());
  std::vector<char> buffer(size + 1, '\0');
  if (H5Dread(set.id(), type.id(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buffer.data()) < 0)
    FT_USER_ERROR() << file << ": cannot read dataset '" << name << "' (damaged file?)";
  return std::string(buffer.data());
}

void write_f32(hid_t loc, const char* name, const float* data, std::int64_t n, const std::string& file) {
  FT_CHECK(n > 0) << name;
  const hsize_t dims[1] = {static_cast<hsize_t>(n)};
  Handle space(H5Screate_simple(1, dims, nullptr), H5Sclose);
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  const hsize_t chunk[1] = {std::min<hsize_t>(dims[0], kChunkElements)};
  H5Pset_chunk(dcpl.id(), 1, chunk);
  H5Pset_fletcher32(dcpl.id());
  Handle set(H5Dcreate2(loc, name, H5T_IEEE_F32LE, space.id(), H5P_DEFAULT, dcpl.id(), H5P_DEFAULT), H5Dclose);
  if (set.id() < 0 || H5Dwrite(set.id(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    FT_USER_ERROR() << file << ": cannot write dataset '" << name << "' (disk full?)";
}

void read_f32_range(hid_t loc, const char* name, std::int64_t first, std::int64_t count, float* dst,
                    const std::string& where) {
  quiet();
  if (count <= 0) return;
  Handle set(H5Dopen2(loc, name, H5P_DEFAULT), H5Dclose);
  if (set.id() < 0) FT_USER_ERROR() << where << ": dataset '" << name << "' is missing or damaged";
  Handle space(H5Dget_space(set.id()), H5Sclose);
  hsize_t dims[1] = {0};
  if (H5Sget_simple_extent_ndims(space.id()) != 1 || H5Sget_simple_extent_dims(space.id(), dims, nullptr) < 0)
    FT_USER_ERROR() << where << ": dataset '" << name << "' is not 1-D";
  if (first < 0 || static_cast<hsize_t>(first + count) > dims[0])
    FT_USER_ERROR() << where << ": dataset '" << name << "' has " << dims[0] << " elements, elements [" << first << ", "
                    << first + count << ") were asked for";
  const hsize_t start[1] = {static_cast<hsize_t>(first)}, size[1] = {static_cast<hsize_t>(count)};
  H5Sselect_hyperslab(space.id(), H5S_SELECT_SET, start, nullptr, size, nullptr);
  Handle memory(H5Screate_simple(1, size, nullptr), H5Sclose);
  if (H5Dread(set.id(), H5T_NATIVE_FLOAT, memory.id(), space.id(), H5P_DEFAULT, dst) < 0)
    FT_USER_ERROR() << where << ": reading dataset '" << name
                    << "' failed: checksum mismatch or damaged file; use an older checkpoint";
}

}  // namespace ftrain::ckpt::h5
