// Safetensors weights as Hugging Face ships them: one file (model.safetensors)
// or a sharded directory whose model.safetensors.index.json maps each tensor
// name to the shard file holding it:
//   {"metadata": {"total_size": 123}, "weight_map": {"model.norm.weight":
//    "model-00002-of-00002.safetensors", ...}}
//
// The index is read and checked when the source is opened (valid JSON object,
// "weight_map" an object of string -> plain file name, every named shard file
// present), so a broken directory fails before any collective. Shard files are
// opened (mmap, header validated by SafetensorsFile) lazily, the first time
// one of their tensors is asked for, so a rank touches only the shards its
// slices live in. A tensor the index lists but its shard lacks is a UserError
// naming both. Opening shards is guarded by a mutex; reads are const.
//
// PATH may be: a .safetensors file; a directory with the index; or a
// directory holding just model.safetensors (a single-file HF checkpoint).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ckpt/safetensors.hpp"

namespace ftrain::ckpt {

inline constexpr const char* kSafetensorsIndexName = "model.safetensors.index.json";

class SafetensorsSource {
 public:
  explicit SafetensorsSource(std::string path);
  SafetensorsSource(const SafetensorsSource&) = delete;
  SafetensorsSource& operator=(const SafetensorsSource&) = delete;

  const std::string& path() const { return path_; }
  // True for a directory with an index (as opposed to one file).
  bool sharded() const { return sharded_; }
  // Every tensor name, sorted.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return location_.count(name) != 0; }
  // The file (full path) holding `name`; UserError if there is no such tensor.
  const std::string& file_of(const std::string& name) const;
  // Opens the shard if needed; UserError if the tensor is unknown or its
  // shard does not contain it.
  const SafetensorsTensorInfo& tensor(const std::string& name) const;
  const SafetensorsFile& file_for(const std::string& name) const;
  // As SafetensorsFile::read_into (converted to f32; only the slice's pages).
  void read_into(const std::string& name, std::int64_t element_offset, std::int64_t count, float* dst) const;
  // The index's "metadata" (values as JSON text; strings unquoted), or the
  // single file's __metadata__.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // How many shard files have been opened so far (for tests of laziness).
  std::size_t open_files() const;

 private:
  std::string path_;
  std::string index_path_;  // empty for a single file
  bool sharded_ = false;
  std::map<std::string, std::string> location_;  // tensor -> full file path
  std::map<std::string, std::string> metadata_;
  mutable std::mutex mutex_;
  mutable std::map<std::string, std::unique_ptr<SafetensorsFile>> files_;  // by full path
};

}  // namespace ftrain::ckpt
