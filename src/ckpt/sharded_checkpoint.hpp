// Sharded checkpoints: one serial-HDF5 file per rank with that rank's FSDP
// shard state, committed atomically, resumable on any world size or strategy.
//
// Layout (share/doc/checkpoints.md is the full schema):
//   DIR/step_<N>/rank_<r>.h5   master, exp_avg, exp_avg_sq per unit + metadata
//   DIR/step_<N>/model.h5      optional consolidated state dict (consolidated on)
//   DIR/step_<N>/manifest.json format version, world size, each file's size,
//                              the checkpoint's id and its parent (lineage.hpp),
//                              "complete": true (written last, by rank 0)
//   DIR/latest                 "step_<N>", replaced atomically after the commit
// A save writes into DIR/step_<N>.tmp, barriers, then rank 0 writes the
// manifest and renames the directory; a crash at any point leaves the
// previous checkpoint and `latest` untouched. Every f32 dataset carries a
// CRC-32C per 4 MiB block (hdf5_util.hpp; Fletcher32 chunks before format
// 3), so a flipped bit fails the read, and the manifest's sizes catch
// truncation; both errors name the file. checkpoint_writer.hpp runs the same
// steps with the rank files written on a background thread.
//
// Loading never needs the old world size: each rank computes, per unit, which
// old shards overlap its new shard range and reads only those element ranges
// (HDF5 hyperslabs) from the old files. The flat layout of a unit (entry
// order, offsets) depends only on the model, so only the partition differs.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.hpp"
#include "fsdp/engine.hpp"

namespace ftrain::ckpt {

// Version 2 added the lineage fields (manifest "checkpoint_id", "parent",
// rank-file attribute parent_step); version 3 stores f32 datasets contiguous
// with CRC-32C block checksums (`<name>.crc32c`) instead of Fletcher32
// chunks. Versions 1 and 2 are still read.
inline constexpr int kShardedFormatVersion = 3;
inline constexpr int kOldestReadableShardedFormatVersion = 1;

struct SaveInfo {
  std::int64_t step = 0;  // optimizer steps done
  // parallel tensor T of the writing run: rank r's file holds tensor rank
  // r % T's slices (manifest "tensor_parallel"; absent means 1).
  int tensor_parallel = 1;
  std::uint64_t seed = 0;
  std::string strategy;   // fsdp strategy name of the writing run
  std::string deck_text;  // the resolved deck
  std::vector<std::pair<std::string, double>> scalars;  // loss, lr, grad_norm of the last step, elapsed_s, global_batch
  // Also write step_<N>/model.h5, the consolidated state dict (consolidated.hpp),
  // inside the same atomic commit.
  bool consolidated = false;
  std::string model_name;
  std::map<std::string, std::string> model_config;
  // The checkpoint the saved state descends from: the previous save of this
  // run, or the step directory it resumed from ("" = a fresh start). It is
  // recorded as the new checkpoint's parent (lineage.hpp) when it lives in
  // the same directory, else as "resumed_from".
  std::string parent_directory;
  // LoRA (engine.lora()): only the adapters and their optimizer state are
  // saved; the frozen base is referenced by how it was initialised and the
  // checksum of its bits (FsdpEngine::base_checksum), so a resume can
  // refuse a base that changed.
  std::uint64_t base_checksum = 0;
  std::string base_init;  // "random seed 1234 std 0.02", "safetensors PATH", "hdf5 PATH"
};

struct LoadedInfo {
  std::int64_t step = 0;
  std::uint64_t seed = 0;
  int world_size = 0;
  int shard_group_size = 0;
  int tensor_parallel = 1;
  std::string strategy;
  std::string directory;
  bool resharded = false;  // the partition differs from this run's
  std::string fp8_note;    // non-empty: why FP8 scaling state was not restored
  // read_checkpoint_info: the scalars SaveInfo wrote that are present
  // (loss, lr, grad_norm, elapsed_s = training seconds across resumes,
  // global_batch = samples per step of the writing run).
  std::map<std::string, double> scalars;
  // A LoRA checkpoint: the base it was trained on (SaveInfo).
  bool lora = false;
  std::uint64_t base_checksum = 0;
  std::string base_init;
  std::string base_dtype = "f32";  // what the checksum hashed (checkpoints before bf16 bases: f32)
  // read_checkpoint_info: the `precision` of the deck that wrote it (fp32
  // when it has none: the default); "" when rank 0's file holds no deck.
  std::string precision;
  // read_checkpoint_info: the writing deck's max_steps (its schedule's
  // length); 0 when rank 0's file holds no deck.
  std::int64_t max_steps = 0;
};

// "DIR/step_<N>" for a step.
std::string step_directory(const std::string& dir, std::int64_t step);
// N for a directory name "step_<N>" (at most 18 digits); nullopt otherwise.
std::optional<std::int64_t> step_of(const std::string& name);

// Collective over `world`. Writes, commits, updates `latest` and keeps the
// newest `keep` checkpoints of the lineage (lineage.hpp; 0 = keep all).
// Returns the committed directory.
std::string save_sharded(FsdpEngine& engine, Communicator& world, const std::string& dir, const SaveInfo& info,
                         int keep);

// The steps of a save, in order (save_sharded runs them in a row;
// CheckpointWriter runs the rank file writes on a background thread between
// them):
// 1. Collective: rank 0 creates DIR/step_<N>.tmp, removing what killed saves
//    and prunes left; a failure throws the same UserError on every rank.
//    Returns the temp directory.
std::string begin_sharded_save(Communicator& world, const std::string& dir, std::int64_t step);
// 2. Each rank writes rank_file_path(temp dir, rank) (shard_snapshot.hpp).
std::string rank_file_path(const std::string& step_dir, int rank);
// The step of info.parent_directory when it is DIR/step_<N> of `dir`, else -1
// (the rank files' parent_step attribute).
std::int64_t lineage_parent_step(const std::string& dir, const std::string& parent_directory);
// 3. Collective: the ranks agree on each one's `write_failure` ("" when its
//    file of `file_bytes` bytes is written and synced) and throw the same
//    UserError if any failed; then rank 0 writes the manifest, renames the
//    directory, replaces `latest` and prunes beyond `keep`. Returns DIR/step_<N>.
std::string commit_sharded_save(Communicator& world, int shard_group_size, const std::string& dir,
                                const SaveInfo& info, const std::string& write_failure, std::int64_t file_bytes,
                                int keep);

// The newest intact checkpoint of the lineage `latest` names (lineage.hpp:
// plan_resume_auto's first candidate). Not collective. When checkpoints were
// skipped (damaged, missing, off the lineage), *skipped says which and why.
std::optional<std::string> find_latest_complete(const std::string& dir, std::string* skipped = nullptr);

// Checks a step directory's manifest and file sizes; throws UserError naming
// the file that is missing, truncated or of the wrong size.
void verify_step_directory(const std::string& step_dir);

// Step, seed, world size, strategy of a verified step directory (reads the
// manifest and rank 0's attributes only). Not collective.
LoadedInfo read_checkpoint_info(const std::string& step_dir);

// What a checkpoint holds per unit: every base flat, or under LoRA only the
// adapter flats (the frozen base is referenced by base_init and
// base_checksum, not saved).
std::vector<FlatParameter*> checkpointed_flats(const FsdpEngine& engine);

// Collective over `world`. Fills every unit's master, exp_avg, exp_avg_sq and
// the optimizer step count (under LoRA: every adapter flat's; the base is
// the caller's to initialise and to compare with LoadedInfo::base_checksum)
// from `step_dir`, resharding as needed. A failure on any rank (a missing or
// truncated file, a damaged superblock, a CRC-32C or Fletcher32
// checksum mismatch in the part one rank reads) is agreed on: every rank
// throws the same UserError, naming the failing rank, or none does.
LoadedInfo load_sharded(FsdpEngine& engine, Communicator& world, const std::string& step_dir);

struct ResumePlan;
// Collective over `world`; every rank passes the same plan (rank 0's,
// broadcast). Loads the first candidate that every rank reads without error.
// With plan.fall_back (resume auto) a candidate that fails on any rank is
// skipped (noted in plan.notes) and the next one is tried; without it, or
// when none is left, every rank throws UserError.
LoadedInfo load_resume(FsdpEngine& engine, Communicator& world, ResumePlan& plan);

}  // namespace ftrain::ckpt
