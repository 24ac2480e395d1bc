// Sharded Hugging Face safetensors directories (see safetensors_dir.hpp).
#include "ckpt/safetensors_dir.hpp"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "base/error.hpp"

namespace ftrain::ckpt {

namespace fs = std::filesystem;
using json = nlohmann::json;

SafetensorsSource::SafetensorsSource(std::string path) : path_(std::move(path)) {
  std::error_code ec;
  const auto status = fs::status(path_, ec);
  if (ec || !fs::exists(status)) FT_USER_ERROR() << "safetensors path " << path_ << " does not exist";
  std::string single;
  if (fs::is_directory(status)) {
    const fs::path index = fs::path(path_) / kSafetensorsIndexName;
    if (fs::exists(index)) {
      index_path_ = index.string();
    } else if (fs::is_regular_file(fs::path(path_) / "model.safetensors")) {
      single = (fs::path(path_) / "model.safetensors").string();
    } else {
      FT_USER_ERROR() << "safetensors directory " << path_ << " has neither " << kSafetensorsIndexName
                      << " (sharded weights) nor model.safetensors";
    }
  } else {
    single = path_;
  }

  if (!single.empty()) {
    auto file = std::make_unique<SafetensorsFile>(single);
    for (const auto& t : file->tensors()) location_[t.name] = single;
    metadata_ = file->metadata();
    files_[single] = std::move(file);
    return;
  }

  sharded_ = true;
  std::ifstream in(index_path_, std::ios::binary);
  if (!in) FT_USER_ERROR() << "cannot read " << index_path_;
  std::stringstream text;
  text << in.rdbuf();
  json index;
  try {
    index = json::parse(text.str());
  } catch (const json::exception& e) {
    FT_USER_ERROR() << index_path_ << ": not valid JSON: " << e.what();
  }
  if (!index.is_object()) FT_USER_ERROR() << index_path_ << ": expected a JSON object";
  if (!index.contains("weight_map") || !index["weight_map"].is_object())
    FT_USER_ERROR() << index_path_ << ": no \"weight_map\" object (tensor name -> shard file)";
  if (index.contains("metadata")) {
    if (!index["metadata"].is_object()) FT_USER_ERROR() << index_path_ << ": \"metadata\" is not an object";
    for (const auto& [k, v] : index["metadata"].items()) metadata_[k] = v.is_string() ? v.get<std::string>() : v.dump();
  }
  if (index["weight_map"].empty()) FT_USER_ERROR() << index_path_ << ": \"weight_map\" is empty";
  std::set<std::string> checked;
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (!file.is_string())
      FT_USER_ERROR() << index_path_ << ": weight_map entry for tensor '" << name << "' is not a file name string";
    const std::string shard = file.get<std::string>();
    const fs::path rel(shard);
    bool plain = !shard.empty() && rel.is_relative();
    for (const auto& part : rel) plain = plain && part != "..";
    if (!plain)
      FT_USER_ERROR() << index_path_ << ": weight_map entry for tensor '" << name << "' names '" << shard
                      << "', expected a file name inside " << path_;
    const std::string full = (fs::path(path_) / rel).string();
    if (checked.insert(full).second && !fs::is_regular_file(full, ec))
      FT_USER_ERROR() << index_path_ << ": tensor '" << name << "' is mapped to " << shard
                      << ", which does not exist in " << path_;
    location_[name] = full;
  }
}

std::vector<std::string> SafetensorsSource::names() const {
  std::vector<std::string> out;
  out.reserve(location_.size());
  for (const auto& [name, file] : location_) out.push_back(name);
  return out;
}

const std::string& SafetensorsSource::file_of(const std::string& name) const {
  const auto it = location_.find(name);
  if (it == location_.end())
    FT_USER_ERROR() << (sharded_ ? index_path_ : path_) << " has no tensor '" << name << "'";
  return it->second;
}

const SafetensorsFile& SafetensorsSource::file_for(const std::string& name) const {
  const std::string& full = file_of(name);
  const SafetensorsFile* file = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& slot = files_[full];
    if (!slot) slot = std::make_unique<SafetensorsFile>(full);
    file = slot.get();
  }
  if (!file->contains(name))
    FT_USER_ERROR() << index_path_ << " maps tensor '" << name << "' to " << fs::path(full).filename().string()
                    << ", but that file has no such tensor";
  return *file;
}

const SafetensorsTensorInfo& SafetensorsSource::tensor(const std::string& name) const {
  return file_for(name).tensor(name);
}

void SafetensorsSource::read_into(const std::string& name, std::int64_t element_offset, std::int64_t count,
                                  float* dst) const {
  file_for(name).read_into(name, element_offset, count, dst);
}

std::size_t SafetensorsSource::open_files() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return files_.size();
}

}  // namespace ftrain::ckpt
