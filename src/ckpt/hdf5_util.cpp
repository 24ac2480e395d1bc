// HDF5 RAII helpers (see hdf5_util.hpp).
#include "ckpt/hdf5_util.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "ckpt/crc32c.hpp"
#include "base/error.hpp"

namespace ftrain::ckpt::h5 {

namespace {

// The suffix of a dataset's checksum dataset, and the attribute that marks a
// checksummed dataset with its block size.
constexpr const char* kChecksumSuffix = ".crc32c";
constexpr const char* kChecksumBlockAttr = "crc32c_block_elements";
// Bytes per write call of the deferred data: dd's 16 MiB.
constexpr std::int64_t kWriteBytes = std::int64_t{16} << 20;

std::int64_t checksum_blocks(std::int64_t n) { return (n + kChecksumBlockElements - 1) / kChecksumBlockElements; }

// Object creation properties without modification times: two saves of the
// same state give the same bytes (asynchronous and blocking saves are
// compared byte for byte, tests/checkpoint/test_async_checkpoint.cpp).
Handle timeless(hid_t plist_class) {
  Handle p(H5Pcreate(plist_class), H5Pclose);
  H5Pset_obj_track_times(p.id(), false);
  return p;
}

// A contiguous 1-D dataset of `n` elements of `type` whose space is
// allocated at creation and never filled: its bytes are ours to write.
Handle create_contiguous(hid_t loc, const std::string& name, hid_t type, std::int64_t n, const std::string& file) {
  const hsize_t dims[1] = {static_cast<hsize_t>(n)};
  Handle space(H5Screate_simple(1, dims, nullptr), H5Sclose);
  Handle dcpl = timeless(H5P_DATASET_CREATE);
  H5Pset_layout(dcpl.id(), H5D_CONTIGUOUS);
  H5Pset_alloc_time(dcpl.id(), H5D_ALLOC_TIME_EARLY);
  H5Pset_fill_time(dcpl.id(), H5D_FILL_TIME_NEVER);
  Handle set(H5Dcreate2(loc, name.c_str(), type, space.id(), H5P_DEFAULT, dcpl.id(), H5P_DEFAULT), H5Dclose);
  if (set.id() < 0) FT_USER_ERROR() << file << ": cannot create dataset '" << name << "'";
  return set;
}

std::uint64_t offset_of(hid_t set, const std::string& name, const std::string& file) {
  const haddr_t at = H5Dget_offset(set);
  if (at == HADDR_UNDEF) FT_USER_ERROR() << file << ": dataset '" << name << "' has no file space";
  return static_cast<std::uint64_t>(at);
}

// The checksum of every block of data[0, n).
std::vector<std::uint32_t> block_checksums(const float* data, std::int64_t n) {
  std::vector<std::uint32_t> sums(static_cast<std::size_t>(checksum_blocks(n)));
  for (std::size_t b = 0; b < sums.size(); ++b) {
    const std::int64_t lo = static_cast<std::int64_t>(b) * kChecksumBlockElements;
    const std::int64_t len = std::min(kChecksumBlockElements, n - lo);
    sums[b] = crc32c(data + lo, static_cast<std::size_t>(len) * sizeof(float));
  }
  return sums;
}

void write_all(int fd, const void* bytes, std::size_t size, std::uint64_t offset, const std::string& path,
               const std::string& what) {
  const auto* p = static_cast<const char*>(bytes);
  while (size > 0) {
    const ssize_t done = ::pwrite(fd, p, size, static_cast<off_t>(offset));
    if (done < 0 && errno == EINTR) continue;
    if (done <= 0)
      FT_USER_ERROR() << "writing " << path << " (" << what << ") failed: "
                      << (done < 0 ? std::strerror(errno) : "no progress") << " (disk full?)";
    p += done;
    size -= static_cast<std::size_t>(done);
    offset += static_cast<std::uint64_t>(done);
  }
}

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

Handle flat_ranges_selection(const std::vector<hsize_t>& dims,
                             const std::vector<std::pair<std::int64_t, std::int64_t>>& ranges) {
  Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  std::int64_t total = 0;
  bool first_block = true;
  std::vector<hsize_t> prefix(dims.size(), 0);
  for (const auto& [first, count] : ranges) {
    if (count <= 0) continue;
    select_flat_range(space.id(), dims, 0, prefix, static_cast<hsize_t>(first), static_cast<hsize_t>(first + count),
                      first_block);
    total += count;
  }
  if (total == 0) H5Sselect_none(space.id());
  FT_CHECK(H5Sget_select_npoints(space.id()) == total) << "selection of " << total << " elements";
  return space;
}

void quiet() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

File File::create(const std::string& path) {
  quiet();
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_libver_bounds(fapl.id(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
  Handle fcpl = timeless(H5P_FILE_CREATE);  // the root group's header: no times either
  File f;
  f.path_ = path;
  f.handle_ = Handle(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl.id(), fapl.id()), H5Fclose);
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
  Handle gcpl = timeless(H5P_GROUP_CREATE);
  g.handle_ = Handle(H5Gcreate2(parent, name.c_str(), H5P_DEFAULT, gcpl.id(), H5P_DEFAULT), H5Gclose);
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
  Handle dcpl = timeless(H5P_DATASET_CREATE);
  Handle set(H5Dcreate2(loc, name, type.id(), space.id(), H5P_DEFAULT, dcpl.id(), H5P_DEFAULT), H5Dclose);
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

DeferredF32 create_deferred_f32(hid_t loc, const char* name, const float* data, std::int64_t n,
                                const std::string& file) {
  FT_CHECK(n > 0) << name;
  Handle set = create_contiguous(loc, name, H5T_IEEE_F32LE, n, file);
  write_attr_i64(set.id(), kChecksumBlockAttr, kChecksumBlockElements, file);
  const std::string sums_name = std::string(name) + kChecksumSuffix;
  Handle sums = create_contiguous(loc, sums_name, H5T_STD_U32LE, checksum_blocks(n), file);
  DeferredF32 d;
  d.name = name;
  d.data = data;
  d.n = n;
  d.data_offset = offset_of(set.id(), name, file);
  d.checksum_offset = offset_of(sums.id(), sums_name, file);
  return d;
}

void write_deferred_f32(const std::string& path, const std::vector<DeferredF32>& datasets) {
  // The bytes are the file's little-endian f32/u32 as they are in memory.
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "raw checkpoint writes assume a little-endian host");
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) FT_USER_ERROR() << "cannot open " << path << " for writing: " << std::strerror(errno);
  struct Closer {
    int fd;
    ~Closer() {
      if (fd >= 0) ::close(fd);
    }
  } closer{fd};
  constexpr std::int64_t piece = kWriteBytes / static_cast<std::int64_t>(sizeof(float));
  static_assert(piece % kChecksumBlockElements == 0, "a write piece holds whole checksum blocks");
  for (const auto& d : datasets) {
    std::vector<std::uint32_t> sums;
    sums.reserve(static_cast<std::size_t>(checksum_blocks(d.n)));
    for (std::int64_t lo = 0; lo < d.n; lo += piece) {
      const std::int64_t len = std::min(piece, d.n - lo);
      // Checksum the piece just before writing it: it is then in cache.
      for (std::int64_t b = lo; b < lo + len; b += kChecksumBlockElements)
        sums.push_back(crc32c(d.data + b, static_cast<std::size_t>(std::min(kChecksumBlockElements, lo + len - b)) *
                                              sizeof(float)));
      write_all(fd, d.data + lo, static_cast<std::size_t>(len) * sizeof(float),
                d.data_offset + static_cast<std::uint64_t>(lo) * sizeof(float), path, "dataset '" + d.name + "'");
    }
    write_all(fd, sums.data(), sums.size() * sizeof(std::uint32_t), d.checksum_offset, path,
              "dataset '" + d.name + kChecksumSuffix + "'");
  }
  if (::fsync(fd) != 0) FT_USER_ERROR() << "fsync of " << path << " failed: " << std::strerror(errno);
  closer.fd = -1;
  if (::close(fd) != 0) FT_USER_ERROR() << "closing " << path << " failed: " << std::strerror(errno);
}

void write_f32(hid_t loc, const char* name, const float* data, std::int64_t n, const std::string& file) {
  const DeferredF32 d = create_deferred_f32(loc, name, data, n, file);
  const std::vector<std::uint32_t> sums = block_checksums(data, n);
  Handle set(H5Dopen2(loc, name, H5P_DEFAULT), H5Dclose);
  Handle sum_set(H5Dopen2(loc, (std::string(name) + kChecksumSuffix).c_str(), H5P_DEFAULT), H5Dclose);
  if (set.id() < 0 || sum_set.id() < 0 ||
      H5Dwrite(set.id(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0 ||
      H5Dwrite(sum_set.id(), H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, sums.data()) < 0)
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
  const auto n = static_cast<std::int64_t>(dims[0]);
  if (first < 0 || first + count > n)
    FT_USER_ERROR() << where << ": dataset '" << name << "' has " << n << " elements, elements [" << first << ", "
                    << first + count << ") were asked for";
  auto read_range = [&](std::int64_t lo, std::int64_t len, float* out) {
    const hsize_t start[1] = {static_cast<hsize_t>(lo)}, size[1] = {static_cast<hsize_t>(len)};
    Handle file_space(H5Dget_space(set.id()), H5Sclose);
    H5Sselect_hyperslab(file_space.id(), H5S_SELECT_SET, start, nullptr, size, nullptr);
    Handle memory(H5Screate_simple(1, size, nullptr), H5Sclose);
    if (H5Dread(set.id(), H5T_NATIVE_FLOAT, memory.id(), file_space.id(), H5P_DEFAULT, out) < 0)
      FT_USER_ERROR() << where << ": reading dataset '" << name
                      << "' failed: checksum mismatch or damaged file; use an older checkpoint";
  };
  if (H5Aexists(set.id(), kChecksumBlockAttr) <= 0) {  // format 1-2: chunks that HDF5 checks (Fletcher32)
    read_range(first, count, dst);
    return;
  }
  // Format 3: read whole checksum blocks, check each, keep the asked part.
  const std::int64_t block = read_attr_i64(set.id(), kChecksumBlockAttr, where + ":" + name);
  if (block <= 0) FT_USER_ERROR() << where << ": dataset '" << name << "' has checksum block size " << block;
  const std::int64_t b0 = first / block, b1 = (first + count - 1) / block;
  const std::string sums_name = std::string(name) + kChecksumSuffix;
  Handle sums_set(H5Dopen2(loc, sums_name.c_str(), H5P_DEFAULT), H5Dclose);
  if (sums_set.id() < 0) FT_USER_ERROR() << where << ": dataset '" << sums_name << "' is missing or damaged";
  std::vector<std::uint32_t> sums(static_cast<std::size_t>(b1 - b0 + 1));
  {
    Handle sums_space(H5Dget_space(sums_set.id()), H5Sclose);
    hsize_t sums_dims[1] = {0};
    if (H5Sget_simple_extent_ndims(sums_space.id()) != 1 ||
        H5Sget_simple_extent_dims(sums_space.id(), sums_dims, nullptr) < 0 ||
        static_cast<std::int64_t>(sums_dims[0]) != (n + block - 1) / block)
      FT_USER_ERROR() << where << ": dataset '" << sums_name << "' does not hold one checksum per block of '" << name
                      << "'";
    const hsize_t start[1] = {static_cast<hsize_t>(b0)}, size[1] = {sums.size()};
    H5Sselect_hyperslab(sums_space.id(), H5S_SELECT_SET, start, nullptr, size, nullptr);
    Handle memory(H5Screate_simple(1, size, nullptr), H5Sclose);
    if (H5Dread(sums_set.id(), H5T_NATIVE_UINT32, memory.id(), sums_space.id(), H5P_DEFAULT, sums.data()) < 0)
      FT_USER_ERROR() << where << ": reading dataset '" << sums_name << "' failed (damaged file?)";
  }
  std::vector<float> scratch;
  for (std::int64_t b = b0; b <= b1; ++b) {
    const std::int64_t lo = b * block, len = std::min(block, n - lo);
    const std::int64_t want_lo = std::max(first, lo), want_hi = std::min(first + count, lo + len);
    // A block wholly inside the request is read in place, else into scratch.
    const bool whole = want_lo == lo && want_hi == lo + len;
    if (!whole) scratch.resize(static_cast<std::size_t>(len));
    float* out = whole ? dst + (lo - first) : scratch.data();
    read_range(lo, len, out);
    const std::uint32_t got = crc32c(out, static_cast<std::size_t>(len) * sizeof(float));
    const std::uint32_t stored = sums[static_cast<std::size_t>(b - b0)];
    if (got != stored) {
      char text[64];
      std::snprintf(text, sizeof text, "stored %08x, computed %08x", stored, got);
      FT_USER_ERROR() << where << ": reading dataset '" << name << "' failed: checksum mismatch in elements [" << lo
                      << ", " << lo + len << ") (CRC-32C " << text << "): damaged file; use an older checkpoint";
    }
    if (!whole) std::copy(out + (want_lo - lo), out + (want_hi - lo), dst + (want_lo - first));
  }
}

}  // namespace ftrain::ckpt::h5
