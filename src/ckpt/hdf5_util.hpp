// Small RAII layer over the HDF5 C API for ftrain's checkpoint files.
//
// Every call checks its status and throws UserError naming the file (and the
// object) on failure, so a damaged checkpoint is one clear message rather than
// HDF5's error stack (automatic stack printing is turned off). f32 datasets
// are contiguous and unfiltered, each with a CRC-32C per block of
// kChecksumBlockElements elements in a sibling dataset `<name>.crc32c`: a
// flipped bit in stored data fails the read (older files used chunks with the
// Fletcher32 filter; HDF5 still checks those when they are read). Files use
// the newest format of this HDF5 version, which also checksums the metadata
// (object headers, B-trees), and record no modification times, so the same
// content always gives the same bytes.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ftrain::ckpt::h5 {

// Turns off HDF5's automatic error printing for this thread (idempotent).
void quiet();

class Handle {
 public:
  Handle() = default;
  Handle(hid_t id, herr_t (*closer)(hid_t)) : id_(id), closer_(closer) {}
  Handle(Handle&& other) noexcept { *this = std::move(other); }
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = other.id_;
      closer_ = other.closer_;
      other.id_ = -1;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { reset(); }
  hid_t id() const { return id_; }
  // Gives up ownership without closing.
  hid_t release() {
    const hid_t id = id_;
    id_ = -1;
    return id;
  }
  void reset() {
    if (id_ >= 0 && closer_ != nullptr) closer_(id_);
    id_ = -1;
  }

 private:
  hid_t id_ = -1;
  herr_t (*closer_)(hid_t) = nullptr;
};

class File {
 public:
  File() = default;
  static File create(const std::string& path);     // truncates
  static File open_read(const std::string& path);  // read-only
  hid_t id() const { return handle_.id(); }
  const std::string& path() const { return path_; }
  void close();  // flushes; throws on failure (a full disk shows here)

 private:
  Handle handle_;
  std::string path_;
};

class Group {
 public:
  static Group create(hid_t parent, const std::string& name, const std::string& file);
  static Group open(hid_t parent, const std::string& name, const std::string& file);
  hid_t id() const { return handle_.id(); }

 private:
  Handle handle_;
};

void write_attr_i64(hid_t loc, const char* name, std::int64_t value, const std::string& file);
void write_attr_u64(hid_t loc, const char* name, std::uint64_t value, const std::string& file);
void write_attr_f64(hid_t loc, const char* name, double value, const std::string& file);
void write_attr_string(hid_t loc, const char* name, const std::string& value, const std::string& file);
std::int64_t read_attr_i64(hid_t loc, const char* name, const std::string& file);
std::uint64_t read_attr_u64(hid_t loc, const char* name, const std::string& file);
double read_attr_f64(hid_t loc, const char* name, const std::string& file);

// A scalar dataset of one fixed-length string (no 64 KiB attribute limit).
void write_string(hid_t loc, const char* name, const std::string& value, const std::string& file);
std::string read_string(hid_t loc, const char* name, const std::string& file);

// Elements per CRC-32C block (4 MiB of f32): big enough that the checksums
// cost nothing, small enough that a resharded read of a short range reads
// and checks little more than it needs.
inline constexpr std::int64_t kChecksumBlockElements = std::int64_t{1} << 20;

// A 1-D f32 dataset whose file space is allocated but not yet written: its
// elements and their block checksums go to the byte offsets below, with
// plain large writes after the file is closed (write_deferred_f32). That
// keeps the bulk of a checkpoint out of HDF5 (no copies, no filter pipeline,
// and no HDF5 lock held while the disk works: the library is not
// thread-safe, core/hdf5_lock.hpp).
struct DeferredF32 {
  std::string name;  // "group/dataset", for errors
  const float* data = nullptr;
  std::int64_t n = 0;
  std::uint64_t data_offset = 0;      // byte offset of element 0 in the file
  std::uint64_t checksum_offset = 0;  // byte offset of the u32 CRC-32C of block 0
};

// Creates the 1-D f32 dataset `name` of n elements (contiguous, no filter,
// space allocated now, never filled) and its checksum dataset; returns where
// their bytes go. `data` must stay valid until write_deferred_f32.
DeferredF32 create_deferred_f32(hid_t loc, const char* name, const float* data, std::int64_t n,
                                const std::string& file);
// Writes the datasets' elements and checksums into the closed file `path` at
// their offsets (pieces of 16 MiB), then fsyncs it once. Throws UserError
// naming the file and dataset on a failed write (disk full, I/O error).
void write_deferred_f32(const std::string& path, const std::vector<DeferredF32>& datasets);

// The same dataset written at once through HDF5 (small files, tests).
void write_f32(hid_t loc, const char* name, const float* data, std::int64_t n, const std::string& file);
// Elements [first, first + count) of a 1-D f32 dataset (a hyperslab: only the
// checksum blocks, or for older files the chunks, that overlap are read and
// checked).
void read_f32_range(hid_t loc, const char* name, std::int64_t first, std::int64_t count, float* dst,
                    const std::string& where);

// A dataspace of shape `dims` with the row-major elements [first, first +
// count) selected, as a union of at most 2 * dims.size() - 1 hyperslabs
// (partial leading row, whole rows, partial trailing row, recursively), so a
// flat shard piece maps onto an N-D dataset of its real shape. count 0
// selects nothing.
Handle flat_range_selection(const std::vector<hsize_t>& dims, std::int64_t first, std::int64_t count);
// The same for several ranges [first, first + count), increasing and
// disjoint (a tensor rank's slice of a full tensor, ParamSpec::tensor_split_dim).
Handle flat_ranges_selection(const std::vector<hsize_t>& dims,
                             const std::vector<std::pair<std::int64_t, std::int64_t>>& ranges);

}  // namespace ftrain::ckpt::h5
