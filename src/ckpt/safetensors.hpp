// Hugging Face safetensors: a strict reader (mmap, slice reads) and a writer.
//
// File layout (https://huggingface.co/docs/safetensors): an 8-byte
// little-endian u64 N, then N bytes of UTF-8 JSON, then the data buffer. The
// JSON is an object mapping each tensor name to
//   {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end]}
// with offsets in bytes relative to the start of the data buffer, plus an
// optional "__metadata__" object of string -> string. Tensors are row-major
// and little-endian.
//
// The reader trusts nothing: N must fit in the file and be at most 100 MiB;
// the JSON must be an object without duplicate keys; every entry must have
// exactly dtype/shape/data_offsets with a known dtype, non-negative integer
// dims, begin <= end <= data size, end - begin == numel * dtype size (no
// overflow), and no two tensors' byte ranges may overlap. Violations throw
// ftrain::UserError naming the file and the tensor.
//
// The writer pads the JSON with spaces so the data buffer starts 8-byte
// aligned (as the format allows), lays tensors out largest element size
// first so each is aligned to its element size, and writes "<path>.tmp"
// then renames it, so <path> is either the old file or the complete new one.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/dtype.hpp"
#include "core/tensor.hpp"

namespace ftrain::ckpt {

// The safetensors dtype names ("F32", "BF16", ...).
enum class StDType : std::uint8_t { BOOL, U8, I8, U16, I16, F16, BF16, U32, I32, F32, U64, I64, F64, F8_E4M3, F8_E5M2 };

std::string_view st_dtype_name(StDType t);
std::size_t st_dtype_size(StDType t);
// False for a name this reader does not know.
bool parse_st_dtype(std::string_view name, StDType& out);
// The ftrain DType with the same bit layout; false if there is none.
bool to_ftrain_dtype(StDType t, DType& out);
StDType from_ftrain_dtype(DType t);
// The floating-point dtypes read_into converts to f32 (F32, F64, BF16, F16,
// F8_E4M3, F8_E5M2); weights of any other dtype are refused.
bool st_dtype_is_float(StDType t);

struct SafetensorsTensorInfo {
  std::string name;
  StDType dtype = StDType::F32;
  Shape shape;
  std::uint64_t begin = 0;  // byte range in the data buffer
  std::uint64_t end = 0;
  std::int64_t numel() const;
};

struct SafetensorsHeader {
  std::uint64_t data_start = 0;  // 8 + N: file offset of the data buffer
  std::uint64_t data_bytes = 0;  // size of the data buffer (rest of the file)
  std::vector<SafetensorsTensorInfo> tensors;  // in name order
  std::map<std::string, std::string> metadata;
};

inline constexpr std::uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

// Parses and validates the header of a complete safetensors file held in
// `bytes` (also the fuzzing entry point). `name_for_errors` is the file name
// that messages give.
SafetensorsHeader parse_safetensors_header(std::string_view bytes, const std::string& name_for_errors);

class SafetensorsFile {
 public:
  explicit SafetensorsFile(std::string path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsTensorInfo>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  bool contains(const std::string& name) const;
  // UserError naming the file if there is no such tensor.
  const SafetensorsTensorInfo& tensor(const std::string& name) const;

  // Raw little-endian bytes of a tensor (inside the mapping).
  const unsigned char* raw_data(const std::string& name) const;

  // Elements [element_offset, element_offset + count) of the flattened
  // tensor, converted to f32. F32, BF16, F16, F64 and the FP8 types convert;
  // integer tensors are a UserError. Only the pages of that slice are read.
  // A non-finite value (NaN, Inf) is a UserError naming the file, the tensor
  // and the element: damaged or diverged weights must not start a run that
  // then "diverges" at step 1 for no reason the deck can fix.
  void read_into(const std::string& name, std::int64_t element_offset, std::int64_t count, float* dst) const;

 private:
  void convert_slice(const SafetensorsTensorInfo& info, const std::string& name, const unsigned char* src,
                     std::size_t n, float* dst) const;

  std::string path_;
  const unsigned char* map_ = nullptr;
  std::size_t map_bytes_ = 0;
  SafetensorsHeader header_;
};

// UserError unless values[0, count) are all finite: `what` names the file and
// tensor ("safetensors file F: tensor 'T'"), `first_element` is the slice's
// offset in the tensor, for the element index in the message. One pass over
// data just read, so its cost hides behind the read.
void check_finite_weights(const float* values, std::size_t count, const std::string& what,
                          std::int64_t first_element);
// The same for raw bf16 bits (kept as bf16, never widened).
void check_finite_weights(const std::uint16_t* bf16_bits, std::size_t count, const std::string& what,
                          std::int64_t first_element);

struct SafetensorsWriteEntry {
  std::string name;
  DType dtype = DType::f32;  // any ftrain dtype; stored under its safetensors name
  Shape shape;
  const void* data = nullptr;  // numel * dtype_size bytes, host memory
};

void write_safetensors(const std::string& path, const std::vector<SafetensorsWriteEntry>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace ftrain::ckpt
