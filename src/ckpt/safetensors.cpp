// Safetensors reader and writer; format and validation rules in the header.
#include "ckpt/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "base/error.hpp"

namespace ftrain::ckpt {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian; so must the host be");

namespace {

using json = nlohmann::json;

struct DTypeRow {
  StDType type;
  std::string_view name;
  std::size_t size;
};
constexpr DTypeRow kDTypes[] = {
    {StDType::BOOL, "BOOL", 1}, {StDType::U8, "U8", 1},     {StDType::I8, "I8", 1},
    {StDType::U16, "U16", 2},   {StDType::I16, "I16", 2},   {StDType::F16, "F16", 2},
    {StDType::BF16, "BF16", 2}, {StDType::U32, "U32", 4},   {StDType::I32, "I32", 4},
    {StDType::F32, "F32", 4},   {StDType::U64, "U64", 8},   {StDType::I64, "I64", 8},
    {StDType::F64, "F64", 8},   {StDType::F8_E4M3, "F8_E4M3", 1}, {StDType::F8_E5M2, "F8_E5M2", 1},
};

const DTypeRow& row_of(StDType t) {
  for (const auto& r : kDTypes)
    if (r.type == t) return r;
  FT_THROW() << "unknown safetensors dtype " << static_cast<int>(t);
}

std::string known_dtype_list() {
  std::string out;
  for (const auto& r : kDTypes) {
    if (!out.empty()) out += ", ";
    out += r.name;
  }
  return out;
}

std::string errno_text() { return std::strerror(errno); }

// Rejects duplicate keys in any JSON object (nlohmann would keep the last
// one silently, and two definitions of one tensor are an error).
class DuplicateKeyCheck {
 public:
  explicit DuplicateKeyCheck(const std::string& file) : file_(file) {}
  bool operator()(int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start: keys_.emplace_back(); break;
      case json::parse_event_t::object_end:
        if (!keys_.empty()) keys_.pop_back();
        break;
      case json::parse_event_t::key:
        if (!keys_.empty() && !keys_.back().insert(parsed.get<std::string>()).second)
          FT_USER_ERROR() << "safetensors file " << file_ << ": the header defines '" << parsed.get<std::string>()
                          << "' twice";
        break;
      default: break;
    }
    return true;
  }

 private:
  const std::string& file_;
  std::vector<std::set<std::string>> keys_;
};

std::uint64_t checked_u64(const json& value, const std::string& file, const std::string& tensor, const char* field) {
  if (!value.is_number_unsigned())
    FT_USER_ERROR() << "safetensors file " << file << ": tensor '" << tensor << "': " << field
                    << " must hold non-negative integers, found " << value.dump();
  return value.get<std::uint64_t>();
}

SafetensorsTensorInfo parse_entry(const std::string& file, const std::string& name, const json& entry,
                                  std::uint64_t data_bytes) {
  const std::string where = "safetensors file " + file + ": tensor '" + name + "': ";
  if (name.empty()) FT_USER_ERROR() << "safetensors file " << file << ": a tensor has an empty name";
  if (!entry.is_object())
    FT_USER_ERROR() << where << "expected an object with dtype, shape and data_offsets, found " << entry.type_name();
  for (const auto& [key, value] : entry.items()) {
    (void)value;
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      FT_USER_ERROR() << where << "unexpected field '" << key << "' (expected dtype, shape, data_offsets)";
  }
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!entry.contains(key)) FT_USER_ERROR() << where << "missing field '" << key << "'";

  SafetensorsTensorInfo info;
  info.name = name;
  const json& dtype = entry["dtype"];
  if (!dtype.is_string()) FT_USER_ERROR() << where << "dtype must be a string, found " << dtype.dump();
  if (!parse_st_dtype(dtype.get<std::string>(), info.dtype))
    FT_USER_ERROR() << where << "unknown dtype " << dtype.dump() << " (known: " << known_dtype_list() << ")";

  const json& shape = entry["shape"];
  if (!shape.is_array()) FT_USER_ERROR() << where << "shape must be an array, found " << shape.dump();
  std::uint64_t numel = 1;
  bool overflow = false;
  for (const json& d : shape) {
    const std::uint64_t dim = checked_u64(d, file, name, "shape");
    if (dim > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      FT_USER_ERROR() << where << "dimension " << dim << " is too large";
    info.shape.push_back(static_cast<std::int64_t>(dim));
    overflow = overflow || __builtin_mul_overflow(numel, dim, &numel);
  }
  std::uint64_t nbytes = 0;
  overflow = overflow || __builtin_mul_overflow(numel, st_dtype_size(info.dtype), &nbytes);
  if (overflow || numel > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
    FT_USER_ERROR() << where << "shape " << shape.dump() << " has too many elements";

  const json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2)
    FT_USER_ERROR() << where << "data_offsets must be [begin, end], found " << offsets.dump();
  info.begin = checked_u64(offsets[0], file, name, "data_offsets");
  info.end = checked_u64(offsets[1], file, name, "data_offsets");
  if (info.begin > info.end)
    FT_USER_ERROR() << where << "data_offsets [" << info.begin << ", " << info.end << "] end before they begin";
  if (info.end > data_bytes)
    FT_USER_ERROR() << where << "data_offsets [" << info.begin << ", " << info.end << "] run past the end of the "
                    << data_bytes << "-byte data buffer (truncated file?)";
  if (info.end - info.begin != nbytes)
    FT_USER_ERROR() << where << "data_offsets [" << info.begin << ", " << info.end << "] span "
                    << info.end - info.begin << " bytes, but " << st_dtype_name(info.dtype) << shape.dump()
                    << " needs " << nbytes;
  return info;
}

}  // namespace

// ---- dtypes -------------------------------------------------------------------

std::string_view st_dtype_name(StDType t) { return row_of(t).name; }
std::size_t st_dtype_size(StDType t) { return row_of(t).size; }

bool parse_st_dtype(std::string_view name, StDType& out) {
  for (const auto& r : kDTypes)
    if (r.name == name) {
      out = r.type;
      return true;
    }
  return false;
}

bool st_dtype_is_float(StDType t) {
  switch (t) {
    case StDType::F32:
    case StDType::F64:
    case StDType::BF16:
    case StDType::F16:
    case StDType::F8_E4M3:
    case StDType::F8_E5M2: return true;
    default: return false;
  }
}

bool to_ftrain_dtype(StDType t, DType& out) {
  switch (t) {
    case StDType::F32: out = DType::f32; return true;
    case StDType::BF16: out = DType::bf16; return true;
    case StDType::F16: out = DType::f16; return true;
    case StDType::F8_E4M3: out = DType::fp8_e4m3; return true;
    case StDType::F8_E5M2: out = DType::fp8_e5m2; return true;
    case StDType::I32: out = DType::i32; return true;
    case StDType::I64: out = DType::i64; return true;
    default: return false;
  }
}

StDType from_ftrain_dtype(DType t) {
  switch (t) {
    case DType::f32: return StDType::F32;
    case DType::bf16: return StDType::BF16;
    case DType::f16: return StDType::F16;
    case DType::fp8_e4m3: return StDType::F8_E4M3;
    case DType::fp8_e5m2: return StDType::F8_E5M2;
    case DType::i32: return StDType::I32;
    case DType::i64: return StDType::I64;
    case DType::f64: return StDType::F64;
  }
  FT_THROW() << "dtype " << static_cast<int>(t) << " has no safetensors name";
}

std::int64_t SafetensorsTensorInfo::numel() const { return shape_numel(shape); }

// ---- header -------------------------------------------------------------------

SafetensorsHeader parse_safetensors_header(std::string_view bytes, const std::string& file) {
  if (bytes.size() < 8)
    FT_USER_ERROR() << "safetensors file " << file << " is truncated: " << bytes.size()
                    << " bytes, shorter than the 8-byte header length";
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  if (n > kMaxSafetensorsHeaderBytes)
    FT_USER_ERROR() << "safetensors file " << file << ": header length " << n
                    << " exceeds the 100 MiB limit (not a safetensors file?)";
  if (n > bytes.size() - 8)
    FT_USER_ERROR() << "safetensors file " << file << ": header length " << n << " runs past the end of the "
                    << bytes.size() << "-byte file (truncated?)";
  const std::string_view text = bytes.substr(8, n);
  if (text.empty() || text.front() != '{')
    FT_USER_ERROR() << "safetensors file " << file << ": the header is not a JSON object";

  json header;
  try {
    header = json::parse(text.begin(), text.end(), DuplicateKeyCheck(file));
  } catch (const json::exception& e) {
    FT_USER_ERROR() << "safetensors file " << file << ": the header is not valid JSON: " << e.what();
  }
  if (!header.is_object()) FT_USER_ERROR() << "safetensors file " << file << ": the header is not a JSON object";

  SafetensorsHeader out;
  out.data_start = 8 + n;
  out.data_bytes = bytes.size() - out.data_start;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object())
        FT_USER_ERROR() << "safetensors file " << file << ": __metadata__ must be an object of strings";
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string())
          FT_USER_ERROR() << "safetensors file " << file << ": __metadata__ '" << key
                          << "' must be a string, found " << value.dump();
        out.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    out.tensors.push_back(parse_entry(file, name, entry, out.data_bytes));
  }

  std::vector<const SafetensorsTensorInfo*> by_offset;
  for (const auto& t : out.tensors)
    if (t.end > t.begin) by_offset.push_back(&t);  // empty tensors occupy no bytes
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto* a, const auto* b) { return a->begin != b->begin ? a->begin < b->begin : a->end < b->end; });
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    const auto* prev = by_offset[i - 1];
    const auto* cur = by_offset[i];
    if (cur->begin < prev->end)
      FT_USER_ERROR() << "safetensors file " << file << ": tensors '" << prev->name << "' [" << prev->begin << ", "
                      << prev->end << ") and '" << cur->name << "' [" << cur->begin << ", " << cur->end
                      << ") overlap";
  }
  return out;
}

// ---- reader -------------------------------------------------------------------

SafetensorsFile::SafetensorsFile(std::string path) : path_(std::move(path)) {
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) FT_USER_ERROR() << "cannot open safetensors file " << path_ << ": " << errno_text();
  struct stat st{};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    FT_USER_ERROR() << "safetensors file " << path_ << " is not a readable regular file";
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    FT_USER_ERROR() << "safetensors file " << path_ << " is truncated: " << size
                    << " bytes, shorter than the 8-byte header length";
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const std::string why = errno_text();
  ::close(fd);
  if (map == MAP_FAILED) FT_USER_ERROR() << "cannot map safetensors file " << path_ << ": " << why;
  map_ = static_cast<const unsigned char*>(map);
  map_bytes_ = size;
  try {
    header_ = parse_safetensors_header(std::string_view(reinterpret_cast<const char*>(map_), map_bytes_), path_);
  } catch (...) {
    ::munmap(const_cast<unsigned char*>(map_), map_bytes_);
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(const_cast<unsigned char*>(map_), map_bytes_);
}

bool SafetensorsFile::contains(const std::string& name) const {
  return std::any_of(header_.tensors.begin(), header_.tensors.end(), [&](const auto& t) { return t.name == name; });
}

const SafetensorsTensorInfo& SafetensorsFile::tensor(const std::string& name) const {
  // tensors are in name order (JSON objects are parsed into a sorted map).
  const auto it = std::lower_bound(header_.tensors.begin(), header_.tensors.end(), name,
                                   [](const SafetensorsTensorInfo& t, const std::string& n) { return t.name < n; });
  if (it == header_.tensors.end() || it->name != name)
    FT_USER_ERROR() << "safetensors file " << path_ << " has no tensor '" << name << "'";
  return *it;
}

const unsigned char* SafetensorsFile::raw_data(const std::string& name) const {
  return map_ + header_.data_start + tensor(name).begin;
}

namespace {
[[noreturn]] void non_finite(float value, std::size_t at, const std::string& what, std::int64_t first_element) {
  FT_USER_ERROR() << what << " holds a non-finite value (" << (std::isnan(value) ? "NaN" : value > 0 ? "+Inf" : "-Inf")
                  << ") at element " << first_element + static_cast<std::int64_t>(at)
                  << "; the weights are damaged or were saved from a diverged run, and training from them cannot "
                     "work (check the file's source, or convert it again)";
}
}  // namespace

void check_finite_weights(const float* values, std::size_t count, const std::string& what,
                          std::int64_t first_element) {
  // Branch-free accumulation first (vectorises); the slow search only when something is wrong.
  bool all_finite = true;
  for (std::size_t i = 0; i < count; ++i) all_finite &= std::isfinite(values[i]);
  if (all_finite) return;
  for (std::size_t i = 0; i < count; ++i)
    if (!std::isfinite(values[i])) non_finite(values[i], i, what, first_element);
}

void check_finite_weights(const std::uint16_t* bf16_bits, std::size_t count, const std::string& what,
                          std::int64_t first_element) {
  // bf16 is non-finite exactly when its 8 exponent bits are all ones.
  bool all_finite = true;
  for (std::size_t i = 0; i < count; ++i) all_finite &= (bf16_bits[i] & 0x7f80u) != 0x7f80u;
  if (all_finite) return;
  for (std::size_t i = 0; i < count; ++i)
    if ((bf16_bits[i] & 0x7f80u) == 0x7f80u) non_finite(to_float(bf16{bf16_bits[i]}), i, what, first_element);
}

void SafetensorsFile::read_into(const std::string& name, std::int64_t element_offset, std::int64_t count,
                                float* dst) const {
  const SafetensorsTensorInfo& info = tensor(name);
  FT_CHECK(element_offset >= 0 && count >= 0 && element_offset + count <= info.numel())
      << "slice [" << element_offset << ", " << element_offset + count << ") of tensor '" << name << "' "
      << shape_string(info.shape) << " in " << path_;
  const std::size_t size = st_dtype_size(info.dtype);
  const unsigned char* src = map_ + header_.data_start + info.begin + static_cast<std::size_t>(element_offset) * size;
  const auto n = static_cast<std::size_t>(count);
  convert_slice(info, name, src, n, dst);
  check_finite_weights(dst, n, "safetensors file " + path_ + ": tensor '" + name + "'", element_offset);
}

void SafetensorsFile::convert_slice(const SafetensorsTensorInfo& info, const std::string& name,
                                    const unsigned char* src, std::size_t n, float* dst) const {
  switch (info.dtype) {
    case StDType::F32: std::memcpy(dst, src, n * 4); return;
    case StDType::F64:
      for (std::size_t i = 0; i < n; ++i) {
        double v;
        std::memcpy(&v, src + 8 * i, 8);
        dst[i] = static_cast<float>(v);
      }
      return;
    case StDType::BF16:
    case StDType::F16:
      for (std::size_t i = 0; i < n; ++i) {
        const auto bits = static_cast<std::uint16_t>(src[2 * i] | (src[2 * i + 1] << 8));
        dst[i] = info.dtype == StDType::BF16 ? to_float(bf16{bits}) : to_float(f16{bits});
      }
      return;
    case StDType::F8_E4M3:
      for (std::size_t i = 0; i < n; ++i) dst[i] = to_float(fp8_e4m3{src[i]});
      return;
    case StDType::F8_E5M2:
      for (std::size_t i = 0; i < n; ++i) dst[i] = to_float(fp8_e5m2{src[i]});
      return;
    default:
      FT_USER_ERROR() << "safetensors file " << path_ << ": tensor '" << name << "' has dtype "
                      << st_dtype_name(info.dtype) << ", which is not a floating-point type";
  }
}

// ---- writer -------------------------------------------------------------------

void write_safetensors(const std::string& path, const std::vector<SafetensorsWriteEntry>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::set<std::string> names;
  for (const auto& t : tensors) {
    FT_CHECK(!t.name.empty() && t.name != "__metadata__") << "tensor name '" << t.name << "' for " << path;
    FT_CHECK(names.insert(t.name).second) << "tensor '" << t.name << "' given twice for " << path;
    for (std::int64_t d : t.shape) FT_CHECK(d >= 0) << "tensor '" << t.name << "' shape " << shape_string(t.shape);
    FT_CHECK(t.data != nullptr || shape_numel(t.shape) == 0) << "tensor '" << t.name << "' has no data";
  }
  // Largest element first keeps every tensor aligned to its element size.
  std::vector<std::size_t> order(tensors.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return dtype_size(tensors[a].dtype) > dtype_size(tensors[b].dtype);
  });

  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (std::size_t i : order) {
    const auto& t = tensors[i];
    const std::uint64_t nbytes = static_cast<std::uint64_t>(shape_numel(t.shape)) * dtype_size(t.dtype);
    header[t.name] = {{"dtype", std::string(st_dtype_name(from_ftrain_dtype(t.dtype)))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {
    FT_THROW() << "cannot encode the safetensors header of " << path << ": " << e.what();
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(static_cast<std::uint64_t>(text.size()) >> (8 * i));

  const std::string temp = path + ".tmp";
  std::FILE* f = std::fopen(temp.c_str(), "wb");
  if (f == nullptr) FT_USER_ERROR() << "cannot create safetensors file " << temp << ": " << errno_text();
  bool ok = std::fwrite(length, 1, 8, f) == 8 && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  for (std::size_t i : order) {
    if (!ok) break;
    const auto& t = tensors[i];
    const std::size_t nbytes = static_cast<std::size_t>(shape_numel(t.shape)) * dtype_size(t.dtype);
    ok = nbytes == 0 || std::fwrite(t.data, 1, nbytes, f) == nbytes;
  }
  ok = ok && std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  const std::string why = errno_text();
  ok = std::fclose(f) == 0 && ok;
  if (!ok) {
    std::remove(temp.c_str());
    FT_USER_ERROR() << "cannot write safetensors file " << temp << ": " << why;
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    const std::string rename_why = errno_text();
    std::remove(temp.c_str());
    FT_USER_ERROR() << "cannot rename " << temp << " to " << path << ": " << rename_why;
  }
}

}  // namespace ftrain::ckpt
