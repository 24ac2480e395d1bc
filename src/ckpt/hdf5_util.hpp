// Small RAII layer over the HDF5 C API for ftrain's checkpoint files.
//
// Every call checks its status and throws UserError naming the file (and the
// object) on failure, so a damaged checkpoint is one clear message rather than
// HDF5's error stack (automatic stack printing is turned off). f32 datasets
// are chunked with the Fletcher32 checksum filter: a flipped bit in stored
// data fails the read. Files use the newest format of this HDF5 version, which
// also checksums the metadata (object headers, B-trees).
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
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

// 1-D f32 dataset of n elements, chunked, Fletcher32.
void write_f32(hid_t loc, const char* name, const float* data, std::int64_t n, const std::string& file);
// Elements [first, first + count) of a 1-D f32 dataset (a hyperslab: only the
// chunks that overlap are read and checksummed).
void read_f32_range(hid_t loc, const char* name, std::int64_t first, std::int64_t count, float* dst,
                    const std::string& where);

// A dataspace of shape `dims` with the row-major elements [first, first +
// count) selected, as a union of at most 2 * dims.size() - 1 hyperslabs
// (partial leading row, whole rows, partial trailing row, recursively), so a
// flat shard piece maps onto an N-D dataset of its real shape. count 0
// selects nothing.
Handle flat_range_selection(const std::vector<hsize_t>& dims, std::int64_t first, std::int64_t count);

}  // namespace ftrain::ckpt::h5
