// Checkpoint lineage (see lineage.hpp).
#include "ckpt/lineage.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "ckpt/sharded_checkpoint.hpp"
#include "base/error.hpp"

namespace ftrain::ckpt {

namespace fs = std::filesystem;
using nlohmann::json;

std::string printable(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const unsigned char ch : text) {
    if ((ch >= 0x20 && ch < 0x7f) || ch == '\n' || ch == '\t') {
      out += static_cast<char>(ch);
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[ch >> 4];
      out += kHex[ch & 15];
    }
  }
  return out;
}

namespace {

CheckpointRecord read_record(std::int64_t step, const std::string& directory) {
  CheckpointRecord r;
  r.step = step;
  r.directory = directory;
  const std::string path = directory + "/manifest.json";
  std::ifstream in(path);
  if (!in) {
    r.manifest_problem = "checkpoint " + directory + " is incomplete: " + path + " is missing";
    return r;
  }
  json m;
  try {
    in >> m;
  } catch (const std::exception& e) {
    r.manifest_problem = "checkpoint manifest " + path + " is not valid JSON: " + printable(e.what());
    return r;
  }
  // Valid JSON of the wrong shape (a field of another type) is damage too:
  // nlohmann's value() throws type_error for it, which must not escape.
  try {
    if (!m.is_object() || !m.value("complete", false)) {
      r.manifest_problem = "checkpoint manifest " + path + " is not marked complete";
      return r;
    }
    CheckpointRecord parsed = r;
    parsed.format_version = m.value("format_version", 0);
    parsed.id = m.value("checkpoint_id", "");
    if (m.contains("parent")) {
      parsed.has_parent_field = true;
      const json& p = m["parent"];
      if (p.is_object() && p.contains("step") && p["step"].is_number_integer()) {
        parsed.parent_step = p["step"].get<std::int64_t>();
        parsed.parent_id = p.value("checkpoint_id", "");
      }
    }
    parsed.has_manifest = true;
    return parsed;
  } catch (const std::exception& e) {
    r.manifest_problem = "checkpoint manifest " + path + " has a field of the wrong type: " + printable(e.what());
    return r;
  }
}

// Index of the record of `step`, if any.
std::optional<std::size_t> index_of(const std::vector<CheckpointRecord>& records, std::int64_t step) {
  for (std::size_t i = 0; i < records.size(); ++i)
    if (records[i].step == step) return i;
  return std::nullopt;
}

// The parent of records[i] among `records`: format 2 names it (step and id
// must both match, so a step directory that a later run replaced is not
// taken for the old parent); format 1 has an implicit linear history (the
// next lower format-1 checkpoint).
std::optional<std::size_t> parent_of(const std::vector<CheckpointRecord>& records, std::size_t i) {
  const CheckpointRecord& r = records[i];
  if (!r.has_manifest) return std::nullopt;
  if (!r.has_parent_field) {
    for (std::size_t j = i; j-- > 0;)
      if (records[j].has_manifest && !records[j].has_parent_field) return j;
    return std::nullopt;
  }
  if (!r.parent_step || *r.parent_step >= r.step) return std::nullopt;
  const auto j = index_of(records, *r.parent_step);
  if (!j || !records[*j].has_manifest || records[*j].id != r.parent_id) return std::nullopt;
  return j;
}

std::string name_of(const CheckpointRecord& r) { return "step_" + std::to_string(r.step); }

// True if `step_dir` passes verify_step_directory; else `why` says why.
bool intact(const std::string& step_dir, std::string* why) {
  try {
    verify_step_directory(step_dir);
    return true;
  } catch (const std::exception& e) {  // a damaged file may fail in any way: each is a reason to skip it
    if (why != nullptr) *why = printable(e.what());
    return false;
  }
}

}  // namespace

std::vector<CheckpointRecord> scan_checkpoints(const std::string& dir) {
  std::vector<CheckpointRecord> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& item : fs::directory_iterator(dir, ec)) {
    const auto step = step_of(item.path().filename().string());
    if (!step || !item.is_directory(ec)) continue;
    out.push_back(read_record(*step, (fs::path(dir) / item.path().filename()).string()));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

std::vector<std::size_t> trace_lineage(const std::vector<CheckpointRecord>& records, std::size_t head) {
  std::vector<std::size_t> lineage{head};
  // Parents have strictly lower steps (parent_of refuses anything else), so
  // this ends.
  for (auto p = parent_of(records, head); p; p = parent_of(records, *p)) lineage.push_back(*p);
  return lineage;
}

std::vector<std::size_t> branch_points(const std::vector<CheckpointRecord>& records,
                                       const std::vector<std::size_t>& lineage) {
  const std::set<std::size_t> on_lineage(lineage.begin(), lineage.end());
  std::set<std::size_t> points;
  for (std::size_t i = 0; i < records.size(); ++i) {
    if (!records[i].has_manifest || on_lineage.count(i) != 0) continue;
    // Walk down the abandoned branch to its oldest member still present.
    std::size_t oldest = i;
    std::optional<std::size_t> p = parent_of(records, i);
    while (p && on_lineage.count(*p) == 0) {
      oldest = *p;
      p = parent_of(records, *p);
    }
    if (p) {
      points.insert(*p);
      continue;
    }
    // The branch's parent is gone or was replaced (a resumed run re-saved
    // that step): the branch left the lineage below that step.
    const CheckpointRecord& o = records[oldest];
    if (o.has_parent_field && !o.parent_step) continue;  // a fresh start: an unrelated run
    const std::int64_t below = o.has_parent_field ? *o.parent_step : o.step;
    std::optional<std::size_t> best;
    for (const std::size_t j : lineage)
      if (records[j].step < below && (!best || records[j].step > records[*best].step)) best = j;
    if (best) points.insert(*best);
  }
  return {points.begin(), points.end()};
}

void ResumePlan::skip_first(const std::string& why) {
  FT_CHECK(!candidates.empty());
  notes.push_back("skipping " + candidates.front() + ": " + printable(why));
  candidates.erase(candidates.begin());
}

std::string ResumePlan::to_json() const {
  // The notes are printable already; `replace` keeps a stray byte in a path
  // from ever turning the broadcast of the plan into an exception.
  return json{{"candidates", candidates}, {"notes", notes}, {"fall_back", fall_back}, {"found_any", found_any}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

ResumePlan ResumePlan::from_json(const std::string& text) {
  const json j = json::parse(text);
  ResumePlan plan;
  plan.candidates = j.at("candidates").get<std::vector<std::string>>();
  plan.notes = j.at("notes").get<std::vector<std::string>>();
  plan.fall_back = j.at("fall_back").get<bool>();
  plan.found_any = j.at("found_any").get<bool>();
  return plan;
}

ResumePlan plan_resume_auto(const std::string& dir) {
  ResumePlan plan;
  plan.fall_back = true;
  const auto records = scan_checkpoints(dir);
  plan.found_any = std::any_of(records.begin(), records.end(), [](const auto& r) { return r.has_manifest; });
  if (records.empty()) return plan;

  // The head: what `latest` names.
  std::optional<std::size_t> head;
  std::string latest_name;
  {
    std::ifstream latest(dir + "/latest");
    if (latest) std::getline(latest, latest_name);
  }
  const auto latest_step = step_of(latest_name);
  if (latest_step) {
    const auto i = index_of(records, *latest_step);
    if (i && records[*i].has_manifest) {
      head = i;
    } else {
      // Nothing to follow: without its manifest the named checkpoint's
      // parent is unknown. The newest checkpoint below it is the best guess
      // (a save of the same step that was killed while replacing it).
      const std::string why = i ? records[*i].manifest_problem : std::string("the directory is missing");
      for (std::size_t j = records.size(); j-- > 0;) {
        if (records[j].has_manifest && records[j].step < *latest_step) {
          head = j;
          break;
        }
      }
      plan.notes.push_back("skipping " + dir + "/" + printable(latest_name) + " (named by `latest`): " + why +
                           (head ? "; its parent is unknown, taking the newest checkpoint below it, " +
                                       records[*head].directory
                                 : std::string()));
    }
  } else {
    for (std::size_t j = records.size(); j-- > 0;) {
      if (records[j].has_manifest) {
        head = j;
        break;
      }
    }
    if (head)
      plan.notes.push_back(dir + "/latest is " + (latest_name.empty() ? "missing or empty" : "unreadable") +
                           "; taking the newest checkpoint, " + records[*head].directory);
  }
  if (!head) return plan;
  // A save killed between its commit (the rename) and the update of `latest`
  // leaves a complete child of the head: it is the newest of the lineage.
  for (bool moved = true; moved;) {
    moved = false;
    for (std::size_t j = records.size(); j-- > *head + 1;) {
      if (parent_of(records, j) == head) {
        plan.notes.push_back(records[j].directory + " descends from " + records[*head].directory +
                             ", which `latest` names: a save was interrupted before updating `latest`; taking it");
        head = j;
        moved = true;
        break;
      }
    }
  }

  const auto lineage = trace_lineage(records, *head);
  for (const std::size_t i : lineage) {
    std::string why;
    if (intact(records[i].directory, &why)) {
      plan.candidates.push_back(records[i].directory);
    } else if (plan.candidates.empty()) {
      plan.notes.push_back("skipping " + records[i].directory + ": " + why);
    }
  }
  // Newer checkpoints that are not on the lineage: an abandoned branch (a
  // run resumed from an older step) or a foreign run; never taken silently.
  const std::set<std::size_t> on_lineage(lineage.begin(), lineage.end());
  std::string off;
  for (std::size_t i = 0; i < records.size(); ++i) {
    if (records[i].has_manifest && on_lineage.count(i) == 0 && records[i].step > records[lineage.back()].step)
      off += (off.empty() ? "" : ", ") + name_of(records[i]);
  }
  if (!off.empty())
    plan.notes.push_back("not resuming " + off + " in " + dir + ": not on the lineage of " + records[*head].directory +
                         " (an abandoned branch: a run resumed an older step); resume one explicitly to continue it");
  return plan;
}

namespace {

// `resume DIR/step_N` of a directory that is not there (`keep` deleted it,
// or a typo): say so, and which checkpoints DIR does hold.
[[noreturn]] void no_such_checkpoint(const std::string& step_dir) {
  const fs::path parent = fs::path(step_dir).lexically_normal().parent_path();
  const std::string dir = parent.empty() ? "." : parent.string();
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    FT_USER_ERROR() << "checkpoint " << step_dir << " does not exist, nor does its directory " << dir;
  std::string steps;
  for (const CheckpointRecord& r : scan_checkpoints(dir))
    if (r.has_manifest) steps += (steps.empty() ? "" : ", ") + name_of(r);
  if (steps.empty())
    FT_USER_ERROR() << "checkpoint " << step_dir << " does not exist; " << dir << " holds no complete checkpoint";
  FT_USER_ERROR() << "checkpoint " << step_dir << " does not exist; " << dir << " holds " << steps
                  << " (resume one of them, or `resume auto` for the newest)";
}

}  // namespace

ResumePlan plan_resume_path(const std::string& step_dir) {
  std::error_code ec;
  if (!fs::exists(step_dir, ec)) no_such_checkpoint(step_dir);
  verify_step_directory(step_dir);
  ResumePlan plan;
  plan.candidates.push_back(step_dir);
  plan.found_any = true;
  return plan;
}

std::vector<std::string> prune_list(const std::string& dir, std::int64_t head_step, int keep) {
  std::vector<std::string> out;
  if (keep <= 0) return out;
  const auto records = scan_checkpoints(dir);
  const auto head = index_of(records, head_step);
  if (!head || !records[*head].has_manifest) return out;
  const auto lineage = trace_lineage(records, *head);
  const auto points = branch_points(records, lineage);
  // Only intact checkpoints count towards `keep`: a damaged one must not
  // push out the last good one. Damaged ones inside the window stay (for
  // inspection); older ones go with the rest.
  int kept = 0;
  for (const std::size_t i : lineage) {
    if (kept < keep) {
      if (intact(records[i].directory, nullptr)) ++kept;
      continue;
    }
    if (std::find(points.begin(), points.end(), i) != points.end()) continue;
    out.push_back(records[i].directory);
  }
  return out;
}

}  // namespace ftrain::ckpt
