// Shard snapshots and the rank file writer (see shard_snapshot.hpp).
#include "ckpt/shard_snapshot.hpp"

#include <sys/statvfs.h>

#include <cstring>
#include <filesystem>
#include <mutex>

#include <nlohmann/json.hpp>

#include "ckpt/fp8_state.hpp"
#include "ckpt/hdf5_util.hpp"
#include "base/error.hpp"
#include "core/hdf5_lock.hpp"

namespace ftrain::ckpt {

namespace {

// `t`'s elements as host f32: the tensor itself on the host, else a copy.
const float* host_f32(const Tensor& t, Tensor& staging) {
  FT_CHECK(t.dtype() == DType::f32) << "checkpoint state " << t.name() << " is not f32";
  if (t.device() == Device::host) return t.data_as<float>();
  staging = to_device(t, Device::host);
  return staging.data_as<float>();
}

// Refuses, before HDF5 touches the file, a rank file that cannot fit. HDF5
// 1.10 does not recover from a write failing inside the library (a full
// disk during H5Fcreate or the metadata flush of H5Fclose leaves a file
// object that crashes the library's cleanup at MPI_Finalize), so a full disk
// must show up here, or later in the plain data writes (write_deferred_f32),
// which fail cleanly. The metadata is written first and is small (the
// estimate below is generous), so only a disk that fills up between this
// check and the metadata flush can still reach HDF5's failure.
void check_free_space(const std::string& path, const ShardSnapshot& s) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  struct statvfs fs {};
  if (::statvfs(dir.empty() ? "." : dir.c_str(), &fs) != 0) return;  // unknown: let the writes tell
  const auto free_bytes = static_cast<std::uint64_t>(fs.f_bavail) * fs.f_frsize;
  std::uint64_t metadata = (std::uint64_t{1} << 20) + s.deck_text.size() + s.unit_names_json.size();
  for (const auto& u : s.units) metadata += 8192 + u.entries_json.size() + 4096 * u.arrays.size();
  const std::uint64_t needed = static_cast<std::uint64_t>(s.bytes) + s.bytes / 1000000 + metadata;
  if (free_bytes < needed)
    FT_USER_ERROR() << "writing " << path << ": " << free_bytes << " bytes free in " << dir << ", the rank file needs "
                    << needed << " (disk full?)";
}

}  // namespace

ShardSnapshot take_shard_snapshot(FsdpEngine& engine, Communicator& world, const SaveInfo& info,
                                  SnapshotBuffer* copy_into) {
  engine.execution().synchronize();  // the copies below read what queued ops wrote
  ShardSnapshot s;
  s.step = info.step;
  s.seed = info.seed;
  s.optimizer_steps = engine.optimizer_steps();
  s.world_size = world.size();
  s.rank = world.rank();
  s.shard_group_size = engine.shard_comm().size();
  s.shard_rank = engine.shard_comm().rank();
  s.strategy = info.strategy;
  s.deck_text = info.deck_text;
  s.scalars = info.scalars;
  // FP8 delayed-scaling state (identical on every rank after the amax
  // all-reduce): 0 = the run did not use precision fp8.
  const bool fp8 = engine.options().fp8;
  s.fp8_amax_history_len = fp8 ? engine.options().fp8_recipe.amax_history_len : 0;
  const auto fp8_states = fp8 ? engine.fp8_states() : std::vector<std::vector<Fp8StateRef>>{};
  s.lora = engine.lora();
  s.base_checksum = info.base_checksum;
  s.base_init = info.base_init;
  s.base_dtype = std::string(dtype_name(engine.frozen_base_dtype()));
  s.num_units = static_cast<std::int64_t>(engine.units().size());
  nlohmann::json names = nlohmann::json::array();
  for (const auto& flat : engine.units()) names.push_back(flat->unit_name());
  std::vector<const Tensor*> tensors;  // in array order, for the copy
  for (FlatParameter* flat : checkpointed_flats(engine)) {
    FT_CHECK(flat->unit_name().find('/') == std::string::npos) << "unit name " << flat->unit_name();
    ShardSnapshot::Unit u;
    u.name = flat->unit_name();
    u.index = flat->unit_index();
    u.numel = flat->numel();
    u.padded_numel = flat->padded_numel();
    u.shard_offset = flat->shard_offset();
    u.shard_numel = flat->shard_numel();
    nlohmann::json entries = nlohmann::json::array();
    for (const auto& e : flat->entries())
      entries.push_back({{"name", e.name}, {"shape", e.shape}, {"offset", e.offset}, {"numel", e.numel}});
    u.entries_json = entries.dump();
    auto add = [&](const std::string& name, const Tensor& t, std::int64_t n) {
      u.arrays.push_back({name, nullptr, n});
      tensors.push_back(&t);
      s.bytes += n * static_cast<std::int64_t>(sizeof(float));
    };
    add("master", flat->master, flat->shard_numel());
    add("exp_avg", flat->exp_avg, flat->shard_numel());
    add("exp_avg_sq", flat->exp_avg_sq, flat->shard_numel());
    if (fp8) {
      for (const Fp8StateArray& a : fp8_state_arrays(fp8_states[static_cast<std::size_t>(flat->unit_index())]))
        add(a.name, *a.tensor, a.tensor->numel());
    }
    s.units.push_back(std::move(u));
  }
  s.unit_names_json = names.dump();

  fill_snapshot_arrays(s, tensors, copy_into);
  return s;
}

void fill_snapshot_arrays(ShardSnapshot& s, const std::vector<const Tensor*>& tensors, SnapshotBuffer* copy_into) {
  const auto elements = static_cast<std::size_t>(s.bytes / static_cast<std::int64_t>(sizeof(float)));
  float* copy = copy_into != nullptr ? copy_into->reserve(elements) : nullptr;
  std::size_t next = 0, at = 0;
  for (auto& u : s.units) {
    for (auto& a : u.arrays) {
      FT_CHECK(next < tensors.size()) << "snapshot array " << a.name << " has no tensor";
      Tensor staging;
      const float* live = host_f32(*tensors[next++], staging);
      if (copy_into == nullptr) {
        a.data = live;  // the engine's host buffer, or the device state's host copy kept below
        if (staging.defined()) s.host_copies.push_back(std::move(staging));
      } else {
        float* dst = copy + at;
        std::memcpy(dst, live, static_cast<std::size_t>(a.n) * sizeof(float));
        a.data = dst;
        at += static_cast<std::size_t>(a.n);
      }
    }
  }
}

std::vector<h5::DeferredF32> create_shard_file(const std::string& path, const ShardSnapshot& s,
                                               std::int64_t parent_step) {
  check_free_space(path, s);
  std::lock_guard<std::mutex> hdf5(hdf5_library_mutex());
  std::vector<h5::DeferredF32> deferred;
  h5::File file = h5::File::create(path);
  const hid_t root = file.id();
  h5::write_attr_i64(root, "format_version", kShardedFormatVersion, path);
  h5::write_attr_i64(root, "step", s.step, path);
  h5::write_attr_u64(root, "seed", s.seed, path);
  h5::write_attr_i64(root, "optimizer_steps", s.optimizer_steps, path);
  h5::write_attr_i64(root, "world_size", s.world_size, path);
  h5::write_attr_i64(root, "rank", s.rank, path);
  h5::write_attr_i64(root, "shard_group_size", s.shard_group_size, path);
  h5::write_attr_i64(root, "shard_rank", s.shard_rank, path);
  h5::write_attr_i64(root, "num_units", s.num_units, path);
  h5::write_attr_i64(root, "parent_step", parent_step, path);
  h5::write_attr_i64(root, "fp8_amax_history_len", s.fp8_amax_history_len, path);
  h5::write_string(root, "strategy", s.strategy, path);
  h5::write_string(root, "deck", s.deck_text, path);
  h5::write_attr_i64(root, "lora", s.lora ? 1 : 0, path);
  if (s.lora) {
    h5::write_attr_u64(root, "base_checksum", s.base_checksum, path);
    h5::write_string(root, "base_init", s.base_init, path);
    h5::write_string(root, "base_dtype", s.base_dtype, path);
  }
  h5::write_string(root, "unit_names", s.unit_names_json, path);
  {
    h5::Group scalars = h5::Group::create(root, "scalars", path);
    for (const auto& [name, value] : s.scalars) h5::write_attr_f64(scalars.id(), name.c_str(), value, path);
  }
  {
  h5::Group units = h5::Group::create(root, "units", path);
  for (const auto& u : s.units) {
    h5::Group g = h5::Group::create(units.id(), u.name, path);
    h5::write_attr_i64(g.id(), "index", u.index, path);
    h5::write_attr_i64(g.id(), "numel", u.numel, path);
    h5::write_attr_i64(g.id(), "padded_numel", u.padded_numel, path);
    h5::write_attr_i64(g.id(), "shard_offset", u.shard_offset, path);
    h5::write_attr_i64(g.id(), "shard_numel", u.shard_numel, path);
    h5::write_string(g.id(), "entries", u.entries_json, path);
    for (const auto& a : u.arrays) {
      deferred.push_back(h5::create_deferred_f32(g.id(), a.name.c_str(), a.data, a.n, path));
      deferred.back().name = "units/" + u.name + "/" + a.name;
    }
  }
  }  // every object closed before the file, so the close writes everything
  file.close();
  return deferred;
}

void write_shard_file(const std::string& path, const ShardSnapshot& snapshot, std::int64_t parent_step) {
  h5::write_deferred_f32(path, create_shard_file(path, snapshot, parent_step));
}

}  // namespace ftrain::ckpt
