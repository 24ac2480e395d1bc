// Consolidated HDF5 <-> Hugging Face safetensors (see convert.hpp).
#include "ckpt/convert.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "ckpt/consolidated.hpp"
#include "ckpt/hdf5_util.hpp"
#include "ckpt/safetensors.hpp"
#include "ckpt/safetensors_dir.hpp"
#include "base/error.hpp"
#include "plugin/loader.hpp"

namespace ftrain::ckpt {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kMetadataPrefix = "ftrain.";

std::string errno_text() { return std::strerror(errno); }

// Root attribute -> text (strings as-is, integers and floats formatted).
std::map<std::string, std::string> read_root_attributes(hid_t file, const std::string& path) {
  std::map<std::string, std::string> out;
  H5O_info_t info;
  if (H5Oget_info2(file, &info, H5O_INFO_NUM_ATTRS) < 0) FT_USER_ERROR() << path << ": cannot read the root group";
  for (hsize_t i = 0; i < info.num_attrs; ++i) {
    h5::Handle attr(H5Aopen_by_idx(file, ".", H5_INDEX_NAME, H5_ITER_INC, i, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    if (attr.id() < 0) FT_USER_ERROR() << path << ": cannot open root attribute " << i;
    const ssize_t name_len = H5Aget_name(attr.id(), 0, nullptr);
    std::string name(static_cast<std::size_t>(std::max<ssize_t>(0, name_len)) + 1, '\0');
    H5Aget_name(attr.id(), name.size(), name.data());
    name.resize(static_cast<std::size_t>(std::max<ssize_t>(0, name_len)));
    h5::Handle type(H5Aget_type(attr.id()), H5Tclose);
    h5::Handle space(H5Aget_space(attr.id()), H5Sclose);
    if (H5Sget_simple_extent_npoints(space.id()) != 1) continue;  // not a scalar: not one of ours
    switch (H5Tget_class(type.id())) {
      case H5T_STRING: {
        if (H5Tis_variable_str(type.id()) > 0) {
          char* text = nullptr;
          h5::Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
          H5Tset_size(mem.id(), H5T_VARIABLE);
          if (H5Aread(attr.id(), mem.id(), &text) < 0) FT_USER_ERROR() << path << ": cannot read attribute " << name;
          out[name] = text != nullptr ? text : "";
          H5free_memory(text);
        } else {
          std::string value(H5Tget_size(type.id()), '\0');
          if (H5Aread(attr.id(), type.id(), value.data()) < 0)
            FT_USER_ERROR() << path << ": cannot read attribute " << name;
          out[name] = value.c_str();
        }
        break;
      }
      case H5T_INTEGER: {
        std::int64_t v = 0;
        if (H5Aread(attr.id(), H5T_NATIVE_INT64, &v) < 0) FT_USER_ERROR() << path << ": cannot read attribute " << name;
        out[name] = std::to_string(v);
        break;
      }
      case H5T_FLOAT: {
        double v = 0;
        if (H5Aread(attr.id(), H5T_NATIVE_DOUBLE, &v) < 0)
          FT_USER_ERROR() << path << ": cannot read attribute " << name;
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.17g", v);
        out[name] = buf;
        break;
      }
      default: break;
    }
  }
  return out;
}

struct H5Tensor {
  std::string name;
  std::vector<hsize_t> dims;
  bool stored_bf16 = false;
  DType out = DType::f32;
  std::uint64_t bytes() const {
    std::uint64_t n = 1;
    for (hsize_t d : dims) n *= d;
    return n * dtype_size(out);
  }
  std::int64_t numel() const {
    std::int64_t n = 1;
    for (hsize_t d : dims) n *= static_cast<std::int64_t>(d);
    return n;
  }
};

// Writes one safetensors file whose header is known up front, then each
// tensor's bytes in header order: only one tensor is ever in memory.
class StreamingShardWriter {
 public:
  StreamingShardWriter(std::string path, const std::vector<const H5Tensor*>& tensors,
                       const std::map<std::string, std::string>& metadata)
      : path_(std::move(path)), temp_(path_ + ".tmp") {
    json header = json::object();
    header["__metadata__"] = metadata;
    std::uint64_t offset = 0;
    for (const H5Tensor* t : tensors) {
      header[t->name] = {{"dtype", std::string(st_dtype_name(from_ftrain_dtype(t->out)))},
                         {"shape", t->dims},
                         {"data_offsets", {offset, offset + t->bytes()}}};
      offset += t->bytes();
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    unsigned char length[8];
    const auto header_bytes = static_cast<std::uint64_t>(text.size());
    for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(header_bytes >> (8 * i));
    file_ = std::fopen(temp_.c_str(), "wb");
    if (file_ == nullptr) FT_USER_ERROR() << "cannot create " << temp_ << ": " << errno_text();
    write(length, 8);
    write(text.data(), text.size());
  }
  ~StreamingShardWriter() {
    if (file_ != nullptr) {
      std::fclose(file_);
      std::remove(temp_.c_str());
    }
  }
  void write(const void* data, std::size_t n) {
    if (n > 0 && std::fwrite(data, 1, n, file_) != n) FT_USER_ERROR() << "writing " << temp_ << ": " << errno_text();
  }
  void commit() {
    const bool ok = std::fflush(file_) == 0 && ::fsync(::fileno(file_)) == 0;
    const std::string why = errno_text();
    const bool closed = std::fclose(file_) == 0;
    file_ = nullptr;
    if (!ok || !closed) {
      std::remove(temp_.c_str());
      FT_USER_ERROR() << "writing " << temp_ << ": " << why;
    }
    if (std::rename(temp_.c_str(), path_.c_str()) != 0) FT_USER_ERROR() << "cannot rename " << temp_ << " to " << path_;
  }

 private:
  std::string path_, temp_;
  std::FILE* file_ = nullptr;
};

void write_text_file(const std::string& path, const std::string& text) {
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) FT_USER_ERROR() << "cannot write " << temp;
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) FT_USER_ERROR() << "cannot rename " << temp << " to " << path;
}

}  // namespace

std::uint64_t parse_byte_size(std::string_view text) {
  std::uint64_t number = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
  const std::string_view unit(p, static_cast<std::size_t>(text.data() + text.size() - p));
  static const std::pair<std::string_view, std::uint64_t> kUnits[] = {
      {"", 1},           {"B", 1},          {"KB", 1000},         {"MB", 1000000}, {"GB", 1000000000},
      {"TB", 1000000000000ull}, {"KiB", 1ull << 10}, {"MiB", 1ull << 20}, {"GiB", 1ull << 30}, {"TiB", 1ull << 40}};
  if (ec == std::errc() && p != text.data()) {
    for (const auto& [name, scale] : kUnits) {
      if (unit == name && number > 0 && number <= UINT64_MAX / scale) return number * scale;
    }
  }
  FT_USER_ERROR() << "size '" << text << "': expected a positive number of bytes with an optional unit "
                  << "(KB, MB, GB, TB = powers of 1000; KiB, MiB, GiB, TiB = powers of 1024), e.g. 5GB";
  return 0;  // not reached
}

namespace {

// bos/eos/pad ids of the model a tokenizer directory belongs to (null when unknown).
json special_token_ids(const std::string& tokenizer_dir) {
  json ids = {{"bos_token_id", nullptr}, {"eos_token_id", nullptr}, {"pad_token_id", nullptr}};
  if (tokenizer_dir.empty()) return ids;
  for (const char* file : {"generation_config.json", "config.json"}) {  // config.json wins
    const fs::path path = fs::path(tokenizer_dir) / file;
    std::ifstream in(path);
    if (!in) continue;
    const json j = json::parse(in, nullptr, false);
    if (!j.is_object()) FT_USER_ERROR() << path.string() << ": not a JSON object";
    for (auto& [key, value] : ids.items())
      if (j.contains(key) && !j[key].is_null()) value = j[key];
  }
  return ids;
}

}  // namespace

json plugin_hf_config(const std::string& model_type, const std::map<std::string, std::string>& config,
                      std::string_view torch_dtype, const PluginLoader& loader) {
  if (!loader.find(model_type)) return json();
  const std::optional<std::string> text = loader.load(model_type)->export_hf_config(config, std::string(torch_dtype));
  if (!text) return json();
  const json out = json::parse(*text, nullptr, false);
  if (!out.is_object()) FT_USER_ERROR() << "model '" << model_type << "': its config.json export is not a JSON object";
  return out;
}

json plugin_hf_config(const std::string& model_type, const std::map<std::string, std::string>& config,
                      std::string_view torch_dtype) {
  return plugin_hf_config(model_type, config, torch_dtype, PluginLoader());
}

std::string deck_model_line(const json& config, const std::string& source, const PluginLoader& loader) {
  if (!config.is_object()) FT_USER_ERROR() << source << ": not a JSON object";
  const std::string text = config.dump();
  std::string asked;
  for (const PluginInfo& info : loader.list_plugins()) {
    if (!info.error.empty()) continue;  // a plugin that cannot load converts nothing
    if (auto line = loader.load(info.name)->import_hf_config(text, source)) return *line;
    asked += (asked.empty() ? "" : ", ") + info.name;
  }
  FT_USER_ERROR() << source << ": model_type = " << (config.contains("model_type") ? config["model_type"].dump() : "(absent)")
                  << ": no model plugin converts this config.json (asked: " << (asked.empty() ? "none found" : asked)
                  << ")";
}

std::string deck_model_line(const json& config, const std::string& source) {
  return deck_model_line(config, source, PluginLoader());
}

ConvertSummary h5_to_safetensors(const std::string& in_h5, const std::string& out_dir, std::uint64_t shard_bytes,
                                 std::optional<DType> dtype, const std::string& tokenizer_dir) {
  std::vector<fs::path> tokenizer_files;
  if (!tokenizer_dir.empty()) {
    for (const char* name : kTokenizerFiles)
      if (fs::is_regular_file(fs::path(tokenizer_dir) / name)) tokenizer_files.push_back(fs::path(tokenizer_dir) / name);
    if (tokenizer_files.empty())
      FT_USER_ERROR() << "--tokenizer " << tokenizer_dir << ": no tokenizer file there (looked for tokenizer.json, "
                      << "tokenizer.model, tokenizer_config.json, special_tokens_map.json, ...)";
  }
  FT_CHECK(!dtype || *dtype == DType::f32 || *dtype == DType::bf16) << "dtype " << dtype_name(*dtype);
  FT_CHECK(shard_bytes > 0) << "shard size 0";
  h5::quiet();
  h5::File file = h5::File::open_read(in_h5);
  const auto attributes = read_root_attributes(file.id(), in_h5);

  // Root datasets in name order (other objects are not parameters).
  std::vector<H5Tensor> tensors;
  H5G_info_t group;
  if (H5Gget_info(file.id(), &group) < 0) FT_USER_ERROR() << in_h5 << ": cannot list the root group";
  for (hsize_t i = 0; i < group.nlinks; ++i) {
    const ssize_t len = H5Lget_name_by_idx(file.id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    std::string name(static_cast<std::size_t>(std::max<ssize_t>(0, len)) + 1, '\0');
    H5Lget_name_by_idx(file.id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(), H5P_DEFAULT);
    name.resize(static_cast<std::size_t>(std::max<ssize_t>(0, len)));
    H5O_info_t info;
    if (H5Oget_info_by_name2(file.id(), name.c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT) < 0 ||
        info.type != H5O_TYPE_DATASET)
      continue;
    h5::Handle set(H5Dopen2(file.id(), name.c_str(), H5P_DEFAULT), H5Dclose);
    if (set.id() < 0) FT_USER_ERROR() << in_h5 << ": dataset '" << name << "' cannot be opened (damaged?)";
    H5Tensor t;
    t.name = name;
    t.stored_bf16 = consolidated_dataset_is_bf16(set.id(), in_h5, name);
    h5::Handle space(H5Dget_space(set.id()), H5Sclose);
    const int rank = H5Sget_simple_extent_ndims(space.id());
    if (rank < 0) FT_USER_ERROR() << in_h5 << ": dataset '" << name << "' has no simple shape";
    t.dims.resize(static_cast<std::size_t>(rank));
    H5Sget_simple_extent_dims(space.id(), t.dims.data(), nullptr);
    t.out = dtype ? *dtype : (t.stored_bf16 ? DType::bf16 : DType::f32);
    tensors.push_back(std::move(t));
  }
  if (tensors.empty()) FT_USER_ERROR() << in_h5 << " has no datasets at its root (not a consolidated state dict?)";

  // config.json is decided before anything is written, so a model without a
  // Hugging Face / timm equivalent fails before leaving a half export.
  const auto model_type = attributes.find("model_type");
  std::map<std::string, std::string> config;
  for (const auto& [k, v] : attributes) {
    if (k != "model_type" && k != "step" && k != "ftrain_consolidated_format" && k != kBf16AttributeName)
      config[k] = v;
  }
  json hf_config;
  if (model_type != attributes.end()) {
    const bool all_bf16 =
        std::all_of(tensors.begin(), tensors.end(), [](const H5Tensor& t) { return t.out == DType::bf16; });
    hf_config = plugin_hf_config(model_type->second, config, all_bf16 ? "bfloat16" : "float32");
    // The tokenizer's ids, for the ones the model's config.json names.
    const json ids = special_token_ids(tokenizer_dir);
    for (const auto& [key, id] : ids.items())
      if (hf_config.contains(key)) hf_config[key] = id;
  }

  // Shards: fill in order, a new one when the next tensor would overflow.
  std::vector<std::vector<const H5Tensor*>> shards(1);
  std::uint64_t current = 0, total = 0;
  for (const auto& t : tensors) {
    if (current > 0 && current + t.bytes() > shard_bytes) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(&t);
    current += t.bytes();
    total += t.bytes();
  }
  // Largest element first keeps every tensor aligned to its element size.
  for (auto& shard : shards)
    std::stable_sort(shard.begin(), shard.end(),
                     [](const H5Tensor* a, const H5Tensor* b) { return dtype_size(a->out) > dtype_size(b->out); });

  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) FT_USER_ERROR() << "cannot create " << out_dir << ": " << ec.message();
  std::map<std::string, std::string> metadata{{"format", "pt"}};
  // The bf16 marker describes datasets, not the model: the tensors' dtype says it here.
  for (const auto& [k, v] : attributes)
    if (k != kBf16AttributeName) metadata[kMetadataPrefix + k] = v;

  json weight_map = json::object();
  std::vector<float> values;
  std::vector<std::uint16_t> bits;
  ConvertSummary summary;
  for (std::size_t s = 0; s < shards.size(); ++s) {
    // One shard: model.safetensors and no index, as save_pretrained writes
    // it (timm's hub loader looks for exactly that name).
    char name[64];
    if (shards.size() == 1) std::snprintf(name, sizeof name, "model.safetensors");
    else std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    StreamingShardWriter writer((fs::path(out_dir) / name).string(), shards[s], metadata);
    for (const H5Tensor* t : shards[s]) {
      weight_map[t->name] = name;
      h5::Handle set(H5Dopen2(file.id(), t->name.c_str(), H5P_DEFAULT), H5Dclose);
      const auto n = static_cast<std::size_t>(t->numel());
      if (t->stored_bf16 && t->out == DType::bf16) {
        // bits to bits: exact.
        bits.resize(n);
        if (n > 0 && H5Dread(set.id(), H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, bits.data()) < 0)
          FT_USER_ERROR() << in_h5 << ": reading '" << t->name << "' failed (damaged file?)";
        writer.write(bits.data(), 2 * n);
      } else {
        values.resize(n);
        if (n > 0) read_consolidated_range(set.id(), in_h5, t->name, t->dims, 0, t->numel(), values.data());
        if (t->out == DType::f32) {
          writer.write(values.data(), 4 * n);
        } else {
          bits.resize(n);
          for (std::size_t i = 0; i < n; ++i) bits[i] = to_bf16(values[i]).bits;
          writer.write(bits.data(), 2 * n);
        }
      }
      ++summary.tensors;
      summary.bytes += t->bytes();
    }
    writer.commit();
    ++summary.files;
  }
  const fs::path index_path = fs::path(out_dir) / kSafetensorsIndexName;
  if (shards.size() > 1) {
    json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    write_text_file(index_path.string(), index.dump(2) + "\n");
  } else {
    fs::remove(index_path, ec);  // a stale index from an earlier export would shadow model.safetensors
  }

  if (!hf_config.is_null())
    write_text_file((fs::path(out_dir) / "config.json").string(), hf_config.dump(2) + "\n");
  for (const auto& file : tokenizer_files) {
    const fs::path target = fs::path(out_dir) / file.filename();
    fs::copy_file(file, target, fs::copy_options::overwrite_existing, ec);
    if (ec) FT_USER_ERROR() << "cannot copy " << file.string() << " to " << target.string() << ": " << ec.message();
  }
  return summary;
}

ConvertSummary safetensors_to_h5(const std::string& in, const std::string& out_h5, std::optional<DType> dtype) {
  FT_CHECK(!dtype || *dtype == DType::f32 || *dtype == DType::bf16) << "dtype " << dtype_name(*dtype);
  h5::quiet();
  SafetensorsSource source(in);
  const auto names = source.names();
  if (names.empty()) FT_USER_ERROR() << in << " holds no tensors";

  // Root attributes: those ftrain-convert stored in the shard metadata, else
  // the format version, step 0 and config.json's model_type when there is one.
  std::map<std::string, std::string> attributes;
  for (const auto& [k, v] : source.file_for(names.front()).metadata())
    if (k.rfind(kMetadataPrefix, 0) == 0) attributes[k.substr(std::strlen(kMetadataPrefix))] = v;
  attributes.erase(kBf16AttributeName);  // decided by the datasets written below
  if (attributes.empty()) {
    attributes["ftrain_consolidated_format"] = std::to_string(kConsolidatedFormatVersion);
    attributes["step"] = "0";
    const fs::path folder = fs::is_directory(in) ? fs::path(in) : fs::path(in).parent_path();
    const fs::path config = folder / "config.json";
    std::ifstream cf(config);
    if (cf) {
      const json j = json::parse(cf, nullptr, false);
      if (j.is_object() && j.contains("model_type") && j["model_type"].is_string())
        attributes["model_type"] = j["model_type"].get<std::string>();
    }
  }

  std::vector<DType> out_types;
  for (const auto& name : names) {
    const auto& info = source.tensor(name);
    DType out = info.dtype == StDType::BF16 ? DType::bf16 : DType::f32;
    if (dtype) out = *dtype;
    out_types.push_back(out);
  }
  const bool any_bf16 = std::find(out_types.begin(), out_types.end(), DType::bf16) != out_types.end();

  const std::string temp = out_h5 + ".tmp";
  h5::Handle file(H5Fcreate(temp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
  if (file.id() < 0) FT_USER_ERROR() << "cannot create " << temp;
  // Same attribute order and types as save_consolidated.
  for (const char* k : {"ftrain_consolidated_format", "step"}) {
    const auto it = attributes.find(k);
    std::int64_t v = 0;
    if (it != attributes.end()) {
      auto [p, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
      if (ec != std::errc() || p != it->second.data() + it->second.size())
        FT_USER_ERROR() << in << ": metadata " << kMetadataPrefix << k << " = '" << it->second << "' is not an integer";
    } else if (std::string(k) == "ftrain_consolidated_format") {
      v = kConsolidatedFormatVersion;
    }
    h5::write_attr_i64(file.id(), k, v, temp);
  }
  for (const auto& [k, v] : attributes) {
    if (k != "ftrain_consolidated_format" && k != "step") h5::write_attr_string(file.id(), k.c_str(), v, temp);
  }
  if (any_bf16) h5::write_attr_string(file.id(), kBf16AttributeName, kBf16AttributeValue, temp);

  std::vector<float> values;
  std::vector<std::uint16_t> bits;
  ConvertSummary summary;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const auto& name = names[i];
    const auto& info = source.tensor(name);
    const DType out = out_types[i];
    const std::vector<hsize_t> dims(info.shape.begin(), info.shape.end());
    h5::Handle space(dims.empty() ? H5Screate(H5S_SCALAR)
                                  : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                     H5Sclose);
    h5::Handle set(H5Dcreate2(file.id(), name.c_str(), out == DType::f32 ? H5T_IEEE_F32LE : H5T_STD_U16LE, space.id(),
                              H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                   H5Dclose);
    if (set.id() < 0) FT_USER_ERROR() << temp << ": cannot create dataset '" << name << "'";
    if (out == DType::bf16) h5::write_attr_string(set.id(), kBf16AttributeName, kBf16AttributeValue, temp);
    const auto n = static_cast<std::size_t>(info.numel());
    const void* data = nullptr;
    if (out == DType::bf16 && info.dtype == StDType::BF16) {
      bits.resize(n);
      std::memcpy(bits.data(), source.file_for(name).raw_data(name), 2 * n);
      check_finite_weights(bits.data(), n, "safetensors file " + source.file_for(name).path() + ": tensor '" + name + "'",
                           0);
      data = bits.data();
    } else {
      values.resize(n);
      source.read_into(name, 0, info.numel(), values.data());
      data = values.data();
      if (out == DType::bf16) {
        bits.resize(n);
        for (std::size_t j = 0; j < n; ++j) bits[j] = to_bf16(values[j]).bits;
        data = bits.data();
      }
    }
    if (n > 0 && H5Dwrite(set.id(), out == DType::f32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL,
                          H5P_DEFAULT, data) < 0)
      FT_USER_ERROR() << temp << ": writing '" << name << "' failed (disk full?)";
    ++summary.tensors;
    summary.bytes += n * dtype_size(out);
  }
  const hid_t id = file.release();
  if (H5Fclose(id) < 0) FT_USER_ERROR() << "closing " << temp << " failed (disk full?)";
  if (std::rename(temp.c_str(), out_h5.c_str()) != 0) FT_USER_ERROR() << "cannot rename " << temp << " to " << out_h5;
  summary.files = 1;
  return summary;
}

}  // namespace ftrain::ckpt
