// Checkpoint lineage: which checkpoints of a directory belong to the history
// of the run that `latest` names, which one `resume auto` starts from, and
// which ones `keep` may delete.
//
// Every checkpoint of format 2 records its parent in manifest.json: the
// checkpoint (same directory, step and id) the saved state descends from,
// i.e. the previous save of the same run or the checkpoint it resumed from.
// After `resume DIR/step_3` into a directory that also holds step_5 and
// step_6 of an abandoned run, the new step_4 records step_3 as its parent,
// so step_5 and step_6 are not on the lineage: `resume auto` never takes them
// and `keep` never deletes them (nor step_3, the branch point they descend
// from). Format-1 checkpoints (no lineage fields) are treated as one linear
// history ordered by step, as ftrain did before.
//
// Nothing here is collective: rank 0 decides and the trainer broadcasts the
// decision (ResumePlan::to_json / from_json), so ranks that see the file
// system differently cannot disagree.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ftrain::ckpt {

// `text` with every byte outside printable ASCII written as \xNN: messages
// quote file contents (a parser's error names the bytes it choked on), and a
// damaged file may hold anything; the notes travel as JSON and end up in the
// log, where raw bytes are neither valid UTF-8 nor readable.
std::string printable(const std::string& text);

// One DIR/step_<N> directory, as its manifest describes it.
struct CheckpointRecord {
  std::int64_t step = 0;
  std::string directory;           // DIR/step_<N>
  bool has_manifest = false;       // manifest.json readable, valid and marked complete
  std::string manifest_problem;    // why has_manifest is false
  int format_version = 0;
  std::string id;                  // format 2: unique per save; "" for format 1
  bool has_parent_field = false;   // format 2 (else: implicit linear history)
  std::optional<std::int64_t> parent_step;  // format 2: null = no parent in this directory
  std::string parent_id;
};

// Every step_<N> directory under `dir` (not the .tmp ones), by step.
std::vector<CheckpointRecord> scan_checkpoints(const std::string& dir);

// The lineage ending at `head` (head first, then its parent, ...), as
// indices into `records`. Stops where a parent is missing, replaced (another
// id) or has no manifest.
std::vector<std::size_t> trace_lineage(const std::vector<CheckpointRecord>& records, std::size_t head);

// Lineage checkpoints that other checkpoints (not on the lineage) descend
// from: `keep` must not delete them while their branch exists.
std::vector<std::size_t> branch_points(const std::vector<CheckpointRecord>& records,
                                       const std::vector<std::size_t>& lineage);

// What `resume` starts from.
struct ResumePlan {
  std::vector<std::string> candidates;  // step directories, preferred first
  std::vector<std::string> notes;       // what was skipped and why, for the log
  bool fall_back = false;  // resume auto: if a candidate fails to load, try the next; resume PATH: stop
  bool found_any = false;  // resume auto: the directory holds checkpoints (intact or not)

  // Drops the first candidate, noting why.
  void skip_first(const std::string& why);
  std::string to_json() const;
  static ResumePlan from_json(const std::string& text);
};

// `resume auto` on DIR: the head of the lineage is the checkpoint `latest`
// names (or a child of it committed just before a kill that left `latest`
// one save behind); candidates are the lineage members that pass
// verify_step_directory, newest first; damaged ones and newer checkpoints
// off the lineage are noted. Not collective.
ResumePlan plan_resume_auto(const std::string& dir);

// `resume PATH`: PATH only, verified (throws UserError), no fall-back. A
// PATH that does not exist (deleted by `keep`) is said to, with the
// checkpoints its directory holds.
ResumePlan plan_resume_path(const std::string& step_dir);

// Step directories `keep K` deletes after committing the checkpoint at step
// `head_step`: lineage members beyond the K newest intact ones, except
// branch points. Off-lineage checkpoints are never returned.
std::vector<std::string> prune_list(const std::string& dir, std::int64_t head_step, int keep);

}  // namespace ftrain::ckpt
