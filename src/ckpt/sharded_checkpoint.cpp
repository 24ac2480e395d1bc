// Sharded checkpoint save/load (see sharded_checkpoint.hpp). Serial HDF5,
// one file per rank, opened with default (non-MPI) property lists even though
// the linked library is the parallel build: each file has one writer.
#include "ckpt/sharded_checkpoint.hpp"

#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <cstdlib>
#include <sstream>

#include <nlohmann/json.hpp>

#include "ckpt/collective_errors.hpp"
#include "ckpt/consolidated.hpp"
#include "ckpt/fp8_state.hpp"
#include "ckpt/hdf5_util.hpp"
#include "ckpt/lineage.hpp"
#include "ckpt/shard_snapshot.hpp"
#include "base/error.hpp"
#include "core/launcher_watch.hpp"

namespace ftrain::ckpt {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kManifest = "manifest.json";
constexpr const char* kLatest = "latest";

std::string rank_file_name(int rank) { return "rank_" + std::to_string(rank) + ".h5"; }

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) return;  // best effort: some file systems refuse directory fds
  ::fsync(fd);
  ::close(fd);
}

// Writes `text` to `path` through a temporary name and a rename, so readers
// see the old or the new content, never a partial one.
void write_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) FT_USER_ERROR() << "checkpoint: cannot write " << tmp;
    out << text;
    out.flush();
    if (!out) FT_USER_ERROR() << "checkpoint: writing " << tmp << " failed (disk full?)";
  }
  fsync_path(tmp, false);
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) FT_USER_ERROR() << "checkpoint: cannot rename " << tmp << " to " << path << ": " << ec.message();
}

json entries_json(const FlatParameter& flat) {
  json entries = json::array();
  for (const auto& e : flat.entries())
    entries.push_back({{"name", e.name}, {"shape", e.shape}, {"offset", e.offset}, {"numel", e.numel}});
  return entries;
}

json read_manifest(const std::string& step_dir) {
  const std::string path = step_dir + "/" + kManifest;
  std::ifstream in(path);
  if (!in) FT_USER_ERROR() << "checkpoint " << step_dir << " is incomplete: " << path << " is missing";
  json m;
  try {
    in >> m;
  } catch (const std::exception& e) {
    // The parser's message quotes the bytes it read: printable, whatever they are.
    FT_USER_ERROR() << "checkpoint manifest " << path << " is not valid JSON: " << printable(e.what());
  }
  return m;
}

void check_file_version(std::int64_t version, const std::string& path) {
  if (version < kOldestReadableShardedFormatVersion || version > kShardedFormatVersion)
    FT_USER_ERROR() << path << ": format version " << version << ", this ftrain reads versions "
                    << kOldestReadableShardedFormatVersion << " to " << kShardedFormatVersion;
}

// A new checkpoint's id: unique enough to tell a replaced step directory
// from the one a child recorded as its parent.
std::string new_checkpoint_id() {
  std::random_device device;
  std::mt19937_64 mix((static_cast<std::uint64_t>(device()) << 32) ^ device() ^
                      static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(mix()));
  return text;
}

// A step directory, if `path` is DIR/step_<N> of this `dir`.
std::optional<std::int64_t> step_in(const std::string& dir, const std::string& path) {
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(path, ec);
  if (ec || fs::weakly_canonical(dir, ec) != p.parent_path() || ec) return std::nullopt;
  return step_of(p.filename().string());
}

// Removes what killed saves and killed prunes leave: step_<N>.tmp (a save
// that never committed), step_<N>.pruning.tmp (a prune that renamed before
// deleting), and step_<N>/ without manifest.json (a prune by an older ftrain
// killed half-way, or an empty directory): none of them is a checkpoint.
void remove_leftovers(const std::string& dir) {
  std::error_code ec;
  std::vector<fs::path> doomed;
  for (const auto& item : fs::directory_iterator(dir, ec)) {
    const std::string name = item.path().filename().string();
    const auto dot = name.find('.');
    const std::string base = name.substr(0, dot);
    const std::string suffix = dot == std::string::npos ? "" : name.substr(dot);
    if (!step_of(base) || !item.is_directory(ec)) continue;
    std::error_code probe;  // a directory we cannot look into is left alone
    const bool has_manifest = fs::exists(item.path() / kManifest, probe);
    const bool leftover =
        suffix == ".tmp" || suffix == ".pruning.tmp" || (suffix.empty() && !probe && !has_manifest);
    if (leftover) doomed.push_back(item.path());
  }
  for (const auto& path : doomed) fs::remove_all(path, ec);
}

// Deletes a checkpoint so that a kill at any moment leaves either the whole
// checkpoint or a directory remove_leftovers recognises.
void prune_checkpoint(const std::string& step_dir) {
  std::error_code ec;
  const std::string doomed = step_dir + ".pruning.tmp";
  fs::rename(step_dir, doomed, ec);
  fs::remove_all(ec ? step_dir : doomed, ec);  // a file system that refuses the rename: delete in place
}

struct UnitLayout {
  std::int64_t numel = 0;
  std::int64_t shard_numel = 0;
  json entries;
};

// One old rank file, opened on first use.
struct OldShardFile {
  std::string path;
  h5::File file;
  std::int64_t shard_rank = 0;
};

}  // namespace

// What a checkpoint holds per unit: every base flat, or under LoRA only the
// adapter flats (the frozen base is referenced, not saved).
std::vector<FlatParameter*> checkpointed_flats(const FsdpEngine& engine) {
  std::vector<FlatParameter*> out;
  if (!engine.lora()) {
    for (const auto& f : engine.units()) out.push_back(f.get());
  } else {
    for (const auto& f : engine.adapter_units())
      if (f) out.push_back(f.get());
  }
  return out;
}

std::string step_directory(const std::string& dir, std::int64_t step) {
  return dir + "/step_" + std::to_string(step);
}

namespace {
void verify_step_directory_fields(const std::string& step_dir) {
  const json m = read_manifest(step_dir);
  const std::string path = step_dir + "/" + kManifest;
  if (!m.is_object() || !m.value("complete", false))
    FT_USER_ERROR() << "checkpoint manifest " << path << " is not marked complete";
  const int version = m.value("format_version", 0);
  if (version < kOldestReadableShardedFormatVersion || version > kShardedFormatVersion)
    FT_USER_ERROR() << "checkpoint " << step_dir << " has format version " << version << "; this ftrain reads versions "
                    << kOldestReadableShardedFormatVersion << " to " << kShardedFormatVersion;
  if (!m.contains("files") || !m["files"].is_array() || m["files"].size() != m.value("world_size", 0u))
    FT_USER_ERROR() << "checkpoint manifest " << path << " does not list one file per rank";
  json all_files = m["files"];
  if (m.contains("consolidated")) all_files.push_back(m["consolidated"]);
  for (const auto& f : all_files) {
    const std::string file = step_dir + "/" + f.at("name").get<std::string>();
    std::error_code ec;
    const auto size = fs::file_size(file, ec);
    if (ec) FT_USER_ERROR() << "checkpoint file " << file << " is missing (" << ec.message() << ")";
    const auto expected = f.at("bytes").get<std::uintmax_t>();
    if (size != expected)
      FT_USER_ERROR() << "checkpoint file " << file << " is " << size << " bytes, the manifest says " << expected
                      << " (truncated or overwritten); use an older checkpoint";
  }
}
}  // namespace

void verify_step_directory(const std::string& step_dir) {
  // Valid JSON of the wrong shape (a field missing or of another type) makes
  // nlohmann throw its own exceptions: damage like any other, named as such.
  try {
    verify_step_directory_fields(step_dir);
  } catch (const UserError&) {
    throw;
  } catch (const std::exception& e) {
    FT_USER_ERROR() << "checkpoint manifest " << step_dir << "/" << kManifest
                    << " is damaged (a field is missing or of the wrong type): " << printable(e.what());
  }
}

std::optional<std::string> find_latest_complete(const std::string& dir, std::string* skipped) {
  const ResumePlan plan = plan_resume_auto(dir);
  if (skipped != nullptr) {
    std::string all;
    for (const auto& note : plan.notes) all += (all.empty() ? "" : "; ") + note;
    *skipped = all;
  }
  if (plan.candidates.empty()) return std::nullopt;
  return plan.candidates.front();
}

std::string rank_file_path(const std::string& step_dir, int rank) { return step_dir + "/" + rank_file_name(rank); }

std::int64_t lineage_parent_step(const std::string& dir, const std::string& parent_directory) {
  if (parent_directory.empty()) return -1;
  return step_in(dir, parent_directory).value_or(-1);
}

namespace {
// Every rank throws rank 0's (or the lowest failing rank's) message, or none does.
void agree(Communicator& world, const std::string& mine) {
  const std::string failure = agree_on_failure(world, mine);
  if (!failure.empty()) FT_USER_ERROR() << failure;
}
}  // namespace

std::string begin_sharded_save(Communicator& world, const std::string& dir, std::int64_t step) {
  const std::string tmp_dir = step_directory(dir, step) + ".tmp";
  // Rank 0 alone touches the directory; its failures are agreed on (the
  // agreement is also the barrier), so no rank is left waiting.
  agree(world, failure_of([&] {
    if (world.rank() != 0) return;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) FT_USER_ERROR() << "checkpoint dir " << dir << ": cannot create: " << ec.message();
    remove_leftovers(dir);
    fs::create_directories(tmp_dir, ec);
    if (ec) FT_USER_ERROR() << "checkpoint: cannot create " << tmp_dir << ": " << ec.message();
  }));
  return tmp_dir;
}

std::string commit_sharded_save(Communicator& world, int shard_group_size, const std::string& dir,
                                const SaveInfo& info, const std::string& write_failure, std::int64_t file_bytes,
                                int keep) {
  const std::string final_dir = step_directory(dir, info.step);
  const std::string tmp_dir = final_dir + ".tmp";
  const bool root = world.rank() == 0;
  // The parent (lineage.hpp): recorded by step and id when it lives in this
  // directory, so a later `resume auto` follows this run and not a branch it
  // abandoned.
  const auto parent_step = info.parent_directory.empty() ? std::nullopt : step_in(dir, info.parent_directory);
  agree(world, write_failure);
  Tensor sizes = Tensor::zeros({world.size()}, DType::i64);
  sizes.data_as<std::int64_t>()[world.rank()] = file_bytes;
  world.all_reduce_sum(sizes).wait();  // every file is closed and synced
  const std::string consolidated = tmp_dir + "/model.h5";

  agree(world, failure_of([&] {
    if (!root) return;
    json m;
    m["format_version"] = kShardedFormatVersion;
    m["step"] = info.step;
    m["checkpoint_id"] = new_checkpoint_id();
    m["parent"] = nullptr;
    std::optional<json> parent_manifest;
    if (parent_step) {
      try {
        parent_manifest = read_manifest(info.parent_directory);
      } catch (const UserError&) {
        // The parent vanished since this run loaded or saved it: the lineage
        // ends here, as for a fresh start.
      }
    }
    if (parent_manifest)
      m["parent"] = {{"step", *parent_step}, {"checkpoint_id", parent_manifest->value("checkpoint_id", "")}};
    else if (!info.parent_directory.empty())
      m["resumed_from"] = info.parent_directory;
    m["world_size"] = world.size();
    m["shard_group_size"] = shard_group_size;
    if (info.tensor_parallel > 1) m["tensor_parallel"] = info.tensor_parallel;
    m["strategy"] = info.strategy;
    json files = json::array();
    for (int r = 0; r < world.size(); ++r)
      files.push_back({{"name", rank_file_name(r)}, {"bytes", sizes.data_as<std::int64_t>()[r]}});
    m["files"] = files;
    if (info.consolidated) {
      fsync_path(consolidated, false);
      m["consolidated"] = {{"name", "model.h5"}, {"bytes", fs::file_size(consolidated)}};
    }
    m["complete"] = true;
    write_atomically(tmp_dir + "/" + kManifest, m.dump(2) + "\n");
    fsync_path(tmp_dir, true);
    std::error_code ec;
    // Saving a step that exists (a resumed run re-reaching it) replaces it.
    // If the job dies between the removal and the rename, `latest` names the
    // previous checkpoint (or, if it named this step, a missing directory:
    // `resume auto` then takes the newest one below it).
    // A job whose launcher died (kill -9 of mpirun) commits nothing: a
    // restart may already be running (core/launcher_watch.hpp).
    stop_if_launcher_gone("committing a checkpoint");
    if (fs::exists(final_dir)) prune_checkpoint(final_dir);
    fs::rename(tmp_dir, final_dir, ec);
    if (ec) FT_USER_ERROR() << "checkpoint: cannot rename " << tmp_dir << " to " << final_dir << ": " << ec.message();
    fsync_path(dir, true);
    write_atomically(dir + "/" + kLatest, "step_" + std::to_string(info.step) + "\n");
    fsync_path(dir, true);
    // `keep` prunes the lineage of this checkpoint only (lineage.hpp).
    for (const auto& old : prune_list(dir, info.step, keep)) prune_checkpoint(old);
    remove_leftovers(dir);
  }));
  return final_dir;
}

std::string save_sharded(FsdpEngine& engine, Communicator& world, const std::string& dir, const SaveInfo& info,
                         int keep) {
  const std::string tmp_dir = begin_sharded_save(world, dir, info.step);
  if (info.consolidated)
    save_consolidated(engine, world, tmp_dir + "/model.h5", info.model_name, info.model_config);
  std::int64_t bytes = 0;
  const std::string failure = failure_of([&] {
    const std::string path = rank_file_path(tmp_dir, world.rank());
    write_shard_file(path, take_shard_snapshot(engine, world, info, nullptr),
                     lineage_parent_step(dir, info.parent_directory));
    bytes = static_cast<std::int64_t>(fs::file_size(path));
  });
  return commit_sharded_save(world, engine.shard_comm().size(), dir, info, failure, bytes, keep);
}

LoadedInfo read_checkpoint_info(const std::string& step_dir) {
  verify_step_directory(step_dir);
  const json manifest = read_manifest(step_dir);
  LoadedInfo info;
  info.directory = step_dir;
  try {
    info.world_size = manifest.at("world_size").get<int>();
    info.shard_group_size = manifest.at("shard_group_size").get<int>();
    info.tensor_parallel = manifest.value("tensor_parallel", 1);
    info.strategy = manifest.value("strategy", "");
  } catch (const std::exception& e) {
    FT_USER_ERROR() << "checkpoint manifest " << step_dir << "/" << kManifest
                    << " is damaged (a field is missing or of the wrong type): " << printable(e.what());
  }
  const std::string path = step_dir + "/" + rank_file_name(0);
  h5::File file = h5::File::open_read(path);
  check_file_version(h5::read_attr_i64(file.id(), "format_version", path), path);
  info.step = h5::read_attr_i64(file.id(), "step", path);
  info.seed = h5::read_attr_u64(file.id(), "seed", path);
  // The writing deck's precision and max_steps, for the resume notes when they change.
  if (H5Lexists(file.id(), "deck", H5P_DEFAULT) > 0) {
    std::istringstream deck(h5::read_string(file.id(), "deck", path));
    info.precision = "fp32";
    for (std::string line; std::getline(deck, line);) {
      // Resolved lines read "FILE:LINE: command words..." (deck/parser.cpp).
      std::istringstream words(line);
      std::string command, value;
      if (!(words >> command)) continue;
      if (command.back() == ':' && !(words >> command)) continue;
      if (command == "precision" && words >> value) info.precision = value;
      if (command == "max_steps" && words >> value) info.max_steps = std::strtoll(value.c_str(), nullptr, 10);
    }
  }
  // Scalars are optional and extensible (older checkpoints lack the newer ones).
  if (H5Lexists(file.id(), "scalars", H5P_DEFAULT) > 0) {
    h5::Group scalars = h5::Group::open(file.id(), "scalars", path);
    for (const char* name : {"loss", "lr", "grad_norm", "elapsed_s", "global_batch"})
      if (H5Aexists(scalars.id(), name) > 0) info.scalars[name] = h5::read_attr_f64(scalars.id(), name, path);
  }
  return info;
}

// FP8 scaling state is replicated (every rank holds the reduced amaxes), so
// any world size restores it from shard 0's file.
void load_fp8_state(FsdpEngine& engine, OldShardFile& first, LoadedInfo& info) {
  const hid_t root = first.file.id();
  const std::int64_t saved_len =
      H5Aexists(root, "fp8_amax_history_len") > 0 ? h5::read_attr_i64(root, "fp8_amax_history_len", first.path) : 0;
  if (saved_len == 0) {
    info.fp8_note = "the checkpoint was written without precision fp8: FP8 scales start at 1";
    return;
  }
  const std::int64_t len = engine.options().fp8_recipe.amax_history_len;
  if (saved_len != len)
    FT_USER_ERROR() << first.path << ": FP8 amax history of " << saved_len << " steps, the deck's fp8 amax_history is "
                    << len << " (resume with the same fp8 settings)";
  const auto states = engine.fp8_states();
  for (const auto& flat : engine.units()) {
    const std::string unit_path = "units/" + flat->unit_name();
    h5::Group g = h5::Group::open(first.file.id(), unit_path, first.path);
    read_fp8_state_arrays(g.id(), states[static_cast<std::size_t>(flat->unit_index())], first.path + ":" + unit_path);
  }
}

namespace {

// Zeroed host buffers a load reads a flat's f32 state (master, exp_avg,
// exp_avg_sq) into: the shards themselves on the host, else host copies that
// copy_tensor moves to the training device once read.
class StateLoadBuffers {
 public:
  StateLoadBuffers(Tensor* const (&state)[3], std::int64_t shard_numel) {
    for (int t = 0; t < 3; ++t) {
      host_[t] = state[t]->device() == Device::host
                     ? *state[t]
                     : Tensor::empty(state[t]->shape(), DType::f32, Device::host, state[t]->name() + ".load");
      std::fill(host_[t].data_as<float>(), host_[t].data_as<float>() + shard_numel, 0.0f);
    }
  }
  Tensor& operator[](int t) { return host_[t]; }

 private:
  Tensor host_[3];
};

}  // namespace

// One rank's part of a load; throws on this rank only (load_sharded agrees).
// A checkpoint written at parallel tensor T_old loaded at another T: every
// element of this rank's shard is found through the full tensor (its
// position there, then the old tensor rank whose slice holds it and where
// in that slice, then the old shard of that rank's flat) and read from that
// file. A tensor the old run held whole comes from its tensor rank 0.
template <class OldRankFile>
void load_across_tensor_parallel(FlatParameter& flat, const std::string& unit_path, const UnitLayout& old,
                                 int old_tensor, OldRankFile& old_rank_file, const std::string& layout_path) {
  const auto& entries = flat.entries();
  if (old.entries.size() != entries.size())
    FT_USER_ERROR() << layout_path << ": unit " << flat.unit_name() << " has " << old.entries.size()
                    << " tensors in the checkpoint, " << entries.size() << " in the model";
  struct OldEntry {
    std::int64_t offset;
    int split_dim;
  };
  std::vector<OldEntry> olds;
  for (std::size_t e = 0; e < entries.size(); ++e) {
    const json& o = old.entries[e];
    const Shape full = full_entry(entries[e]).shape;
    const Shape slice = o.at("shape").get<Shape>();
    int split_dim = -1;
    for (std::size_t k = 0; k < full.size() && k < slice.size(); ++k)
      if (slice[k] != full[k]) split_dim = static_cast<int>(k);
    Shape whole = slice;
    if (split_dim >= 0) whole[static_cast<std::size_t>(split_dim)] *= old_tensor;
    if (o.at("name").get<std::string>() != entries[e].name || whole != full)
      FT_USER_ERROR() << layout_path << ": unit " << flat.unit_name() << ": the checkpoint's " << o.dump()
                      << " (at parallel tensor " << old_tensor << ") is not the model's '" << entries[e].name << "' "
                      << shape_string(full);
    olds.push_back({o.at("offset").get<std::int64_t>(), split_dim});
  }
  Tensor* state[3] = {&flat.master, &flat.exp_avg, &flat.exp_avg_sq};
  StateLoadBuffers host(state, flat.shard_numel());
  float* dst[3] = {host[0].data_as<float>(), host[1].data_as<float>(), host[2].data_as<float>()};
  static const char* kNames[3] = {"master", "exp_avg", "exp_avg_sq"};
  // A slice split by columns (row-parallel o, down) maps this shard to one
  // short run per row: the runs of each (tensor, old tensor rank) are read
  // as the one range that spans them, then copied from memory, instead of
  // three HDF5 reads per row.
  struct Run {
    std::int64_t slice_first, len, dst_at;
  };
  std::map<std::pair<int, int>, std::vector<Run>> runs;  // (entry, old tensor rank) -> its runs
  flat.for_each_shard_piece([&](int e, std::int64_t first, std::int64_t count, std::int64_t at) {
    const FlatEntry& entry = entries[static_cast<std::size_t>(e)];
    const OldEntry& o = olds[static_cast<std::size_t>(e)];
    for_each_full_run(entry, first, count, [&](std::int64_t full_first, std::int64_t n, std::int64_t at_full) {
      for_each_slice_run(full_entry(entry).shape, o.split_dim, old_tensor, full_first, n,
                         [&](int old_rank, std::int64_t slice_first, std::int64_t len, std::int64_t at_slice) {
                           runs[{e, old_rank}].push_back({slice_first, len, at + at_full + at_slice});
                         });
    });
  });
  std::vector<float> span[3];
  for (const auto& [key, list] : runs) {
    const auto [e, old_rank] = key;
    std::int64_t lo = list.front().slice_first, hi = lo;
    for (const Run& r : list) {
      lo = std::min(lo, r.slice_first);
      hi = std::max(hi, r.slice_first + r.len);
    }
    for (auto& v : span) v.resize(static_cast<std::size_t>(hi - lo));
    std::int64_t pos = olds[static_cast<std::size_t>(e)].offset + lo, done = 0;
    while (done < hi - lo) {  // the range may cross the old shards' boundaries
      const int shard = static_cast<int>(pos / old.shard_numel);
      const std::int64_t within = pos - shard * old.shard_numel;
      const std::int64_t take = std::min(hi - lo - done, old.shard_numel - within);
      auto& src = old_rank_file(shard, old_rank);
      h5::Group g = h5::Group::open(src.file.id(), unit_path, src.path);
      for (int t = 0; t < 3; ++t)
        h5::read_f32_range(g.id(), kNames[t], within, take, span[t].data() + done, src.path + ":" + unit_path);
      pos += take;
      done += take;
    }
    for (const Run& r : list)
      for (int t = 0; t < 3; ++t)
        std::copy_n(span[t].data() + (r.slice_first - lo), r.len, dst[t] + r.dst_at);
  }
  for (int t = 0; t < 3; ++t) copy_tensor(host[t], *state[t]);
  flat.gathered_valid = false;
  flat.gathered = Tensor();
}

static LoadedInfo load_sharded_local(FsdpEngine& engine, const std::string& step_dir) {
  verify_step_directory(step_dir);
  const json manifest = read_manifest(step_dir);
  LoadedInfo info;
  info.directory = step_dir;
  info.world_size = manifest.at("world_size").get<int>();
  info.shard_group_size = manifest.at("shard_group_size").get<int>();
  info.tensor_parallel = manifest.value("tensor_parallel", 1);
  info.strategy = manifest.value("strategy", "");
  info.resharded = info.shard_group_size != engine.shard_comm().size();
  const int tensor = engine.grid().tensor_size();
  const int old_tensor = info.tensor_parallel;
  const bool across_tensor = old_tensor != tensor;  // each element read from the old tensor rank holding it

  // Old shard s of every unit lives in the file of old rank s (shard groups
  // are contiguous rank blocks; replica group 0 holds ranks 0..S-1). With
  // parallel tensor T the shard groups are those of this rank's tensor
  // index: old shard s of tensor rank t is world rank s * T + t.
  const int tensor_rank = engine.model_parallel().tensor_rank();
  std::map<int, std::unique_ptr<OldShardFile>> open_files;  // by old world rank
  auto old_rank_file = [&](int shard, int of_tensor_rank) -> OldShardFile& {
    const int rank = shard * old_tensor + of_tensor_rank;
    auto& slot = open_files[rank];
    if (!slot) {
      slot = std::make_unique<OldShardFile>();
      slot->path = step_dir + "/" + rank_file_name(rank);
      slot->file = h5::File::open_read(slot->path);
      const hid_t root = slot->file.id();
      check_file_version(h5::read_attr_i64(root, "format_version", slot->path), slot->path);
      slot->shard_rank = h5::read_attr_i64(root, "shard_rank", slot->path);
      if (slot->shard_rank != shard)
        FT_USER_ERROR() << slot->path << ": holds shard " << slot->shard_rank << ", expected shard " << shard;
    }
    return *slot;
  };
  auto old_file = [&](int shard) -> OldShardFile& { return old_rank_file(shard, across_tensor ? 0 : tensor_rank); };

  {
    OldShardFile& first = old_file(0);
    const hid_t root = first.file.id();
    info.step = h5::read_attr_i64(root, "step", first.path);
    info.seed = h5::read_attr_u64(root, "seed", first.path);
    engine.set_optimizer_steps(h5::read_attr_i64(root, "optimizer_steps", first.path));
    const auto units = static_cast<std::size_t>(h5::read_attr_i64(root, "num_units", first.path));
    if (units != engine.units().size())
      FT_USER_ERROR() << first.path << ": the checkpoint has " << units << " FSDP units, this model has "
                      << engine.units().size() << " (a different model?)";
    info.lora = H5Aexists(root, "lora") > 0 && h5::read_attr_i64(root, "lora", first.path) != 0;
    if (info.lora != engine.lora())
      FT_USER_ERROR() << first.path << ": the checkpoint was written " << (info.lora ? "with" : "without")
                      << " lora, the deck " << (engine.lora() ? "has" : "has no")
                      << " lora line; resume with the same fine-tuning mode (a full checkpoint starts a LoRA run "
                         "through init hdf5 of its model.h5)";
    if (info.lora) {
      info.base_checksum = h5::read_attr_u64(root, "base_checksum", first.path);
      info.base_init = h5::read_string(root, "base_init", first.path);
      if (H5Lexists(root, "base_dtype", H5P_DEFAULT) > 0) info.base_dtype = h5::read_string(root, "base_dtype", first.path);
    }
  }

  for (FlatParameter* flat_ptr : checkpointed_flats(engine)) {
    FlatParameter& flat = *flat_ptr;
    const std::string unit_path = "units/" + flat.unit_name();
    OldShardFile& first = old_file(0);
    UnitLayout old;
    {
      h5::Group g = h5::Group::open(first.file.id(), unit_path, first.path);
      old.numel = h5::read_attr_i64(g.id(), "numel", first.path);
      old.shard_numel = h5::read_attr_i64(g.id(), "shard_numel", first.path);
      old.entries = json::parse(h5::read_string(g.id(), "entries", first.path));
    }
    const json expected = entries_json(flat);
    if (across_tensor) {
      load_across_tensor_parallel(flat, unit_path, old, old_tensor, old_rank_file, first.path);
      continue;
    }
    if (old.numel != flat.numel() || old.entries != expected) {
      // Name the first differing tensor.
      std::ostringstream why;
      for (std::size_t i = 0; i < std::max(old.entries.size(), expected.size()); ++i) {
        if (i >= old.entries.size()) { why << "the model's " << expected[i]["name"] << " is not in it"; break; }
        if (i >= expected.size()) { why << "its " << old.entries[i]["name"] << " is not in the model"; break; }
        if (old.entries[i] != expected[i]) {
          why << "it has " << old.entries[i].dump() << ", the model has " << expected[i].dump();
          break;
        }
      }
      FT_USER_ERROR() << first.path << ": unit " << flat.unit_name() << " does not match the model: " << why.str();
    }

    // New shard range [lo, hi) of the flat buffer; only [0, numel) holds data.
    const std::int64_t lo = flat.shard_offset();
    const std::int64_t hi = std::min(flat.shard_offset() + flat.shard_numel(), flat.numel());
    Tensor* state[3] = {&flat.master, &flat.exp_avg, &flat.exp_avg_sq};
    StateLoadBuffers host(state, flat.shard_numel());
    float* dst[3] = {host[0].data_as<float>(), host[1].data_as<float>(), host[2].data_as<float>()};
    static const char* kNames[3] = {"master", "exp_avg", "exp_avg_sq"};
    for (std::int64_t pos = lo; pos < hi;) {
      const int shard = static_cast<int>(pos / old.shard_numel);
      const std::int64_t shard_begin = shard * old.shard_numel;
      const std::int64_t end = std::min(hi, shard_begin + old.shard_numel);
      OldShardFile& src = old_file(shard);
      h5::Group g = h5::Group::open(src.file.id(), unit_path, src.path);
      for (int t = 0; t < 3; ++t)
        h5::read_f32_range(g.id(), kNames[t], pos - shard_begin, end - pos, dst[t] + (pos - lo),
                           src.path + ":" + unit_path);
      pos = end;
    }
    for (int t = 0; t < 3; ++t) copy_tensor(host[t], *state[t]);
    flat.gathered_valid = false;
    flat.gathered = Tensor();
  }
  engine.masters_changed();  // offload: the compute-dtype shards are remade from the loaded masters
  if (engine.options().fp8) load_fp8_state(engine, old_file(0), info);
  return info;
}

LoadedInfo load_sharded(FsdpEngine& engine, Communicator& world, const std::string& step_dir) {
  LoadedInfo info;
  const std::string failure =
      agree_on_failure(world, failure_of([&] { info = load_sharded_local(engine, step_dir); }));
  if (!failure.empty()) FT_USER_ERROR() << failure;
  return info;
}

LoadedInfo load_resume(FsdpEngine& engine, Communicator& world, ResumePlan& plan) {
  while (!plan.candidates.empty()) {
    const std::string step_dir = plan.candidates.front();
    LoadedInfo info;
    const std::string failure =
        agree_on_failure(world, failure_of([&] { info = load_sharded_local(engine, step_dir); }));
    if (failure.empty()) return info;
    if (!plan.fall_back) FT_USER_ERROR() << failure;
    plan.skip_first(failure);
  }
  std::string why;
  for (const auto& note : plan.notes) why += "\n  " + note;
  FT_USER_ERROR() << "resume auto: no checkpoint of the lineage could be loaded:" << why
                  << "\nif the deck changed the model, restore it; else remove the checkpoint directory to start afresh, "
                     "or resume a checkpoint explicitly";
}

std::optional<std::int64_t> step_of(const std::string& name) {
  if (name.rfind("step_", 0) != 0) return std::nullopt;
  const std::string digits = name.substr(5);
  if (digits.empty() || digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), ::isdigit))
    return std::nullopt;
  return std::stoll(digits);
}

}  // namespace ftrain::ckpt
