// Checkpoint lineage on hand-made step directories (manifests and files of
// the sizes they list; the HDF5 content is not read here): `resume auto`
// follows `latest` and the recorded parents, not the highest step number;
// damaged, missing and off-lineage checkpoints are skipped with a note;
// `keep` prunes only the lineage and keeps the branch point; empty or partial
// step directories are never candidates. End to end (real saves, MPI, a
// branch made by `resume step_3`): tests/checkpoint/checkpoint_test.py,
// scenarios lineage and damaged_fallback.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ckpt/lineage.hpp"
#include "ckpt/sharded_checkpoint.hpp"
#include "base/error.hpp"

using namespace ftrain;
using namespace ftrain::ckpt;
namespace fs = std::filesystem;

namespace {

class LineageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = (fs::temp_directory_path() / ("ftrain_lineage_" + std::to_string(::getpid()) + "_" + info->name())).string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A committed format-2 checkpoint of `step` with id `id` whose parent is
  // (parent_step, parent_id); parent_step < 0: a fresh start.
  void save(std::int64_t step, const std::string& id, std::int64_t parent_step, const std::string& parent_id) {
    const std::string step_dir = step_directory(dir_, step);
    fs::remove_all(step_dir);
    fs::create_directories(step_dir);
    nlohmann::json files = nlohmann::json::array();
    for (int r = 0; r < 2; ++r) {
      const std::string name = "rank_" + std::to_string(r) + ".h5";
      std::ofstream(step_dir + "/" + name) << std::string(100 + r, 'x');
      files.push_back({{"name", name}, {"bytes", 100 + r}});
    }
    nlohmann::json parent = nullptr;
    if (parent_step >= 0) parent = {{"step", parent_step}, {"checkpoint_id", parent_id}};
    nlohmann::json m{{"format_version", kShardedFormatVersion}, {"step", step}, {"checkpoint_id", id},
                     {"parent", parent}, {"world_size", 2}, {"shard_group_size", 2}, {"files", files},
                     {"complete", true}};
    std::ofstream(step_dir + "/manifest.json") << m.dump();
  }
  void set_latest(std::int64_t step) { std::ofstream(dir_ + "/latest") << "step_" << step << "\n"; }
  std::string step_dir(std::int64_t step) const { return step_directory(dir_, step); }
  static std::string notes(const ResumePlan& plan) {
    std::string all;
    for (const auto& n : plan.notes) all += n + "\n";
    return all;
  }

  // The scenario: a run saved steps 1..6; `resume step_3` re-saved
  // step_4 (a new id, parent step_3); `latest` names the new step_4.
  void make_branch() {
    for (int s = 1; s <= 6; ++s) save(s, "a" + std::to_string(s), s - 1, s > 1 ? "a" + std::to_string(s - 1) : "");
    save(4, "b4", 3, "a3");
    set_latest(4);
  }

  std::string dir_;
};

TEST_F(LineageTest, ResumeAutoFollowsLatestNotTheHighestStep) {
  make_branch();
  const ResumePlan plan = plan_resume_auto(dir_);
  ASSERT_FALSE(plan.candidates.empty());
  EXPECT_EQ(plan.candidates.front(), step_dir(4));
  // Fallbacks are the lineage: 4 -> 3 -> 2 -> 1.
  EXPECT_EQ(plan.candidates, (std::vector<std::string>{step_dir(4), step_dir(3), step_dir(2), step_dir(1)}));
  EXPECT_NE(notes(plan).find("not resuming step_5, step_6"), std::string::npos) << notes(plan);
  EXPECT_EQ(find_latest_complete(dir_).value(), step_dir(4));
}

TEST_F(LineageTest, KeepPrunesOnlyTheLineageAndKeepsTheBranchPoint) {
  make_branch();
  // keep 1: step_3 is outside the window but step_5 and step_6 branch off it.
  auto doomed = prune_list(dir_, 4, 1);
  std::sort(doomed.begin(), doomed.end());
  EXPECT_EQ(doomed, (std::vector<std::string>{step_dir(1), step_dir(2)}));
  // Once the abandoned branch is gone, step_3 is an ordinary old checkpoint.
  fs::remove_all(step_dir(5));
  fs::remove_all(step_dir(6));
  doomed = prune_list(dir_, 4, 1);
  std::sort(doomed.begin(), doomed.end());
  EXPECT_EQ(doomed, (std::vector<std::string>{step_dir(1), step_dir(2), step_dir(3)}));
}

TEST_F(LineageTest, BranchPointWithAnIntactParentChain) {
  // Abandoned 4a -> 5a hang off step_3 by id; the new lineage is 3 -> 6.
  for (int s = 1; s <= 5; ++s) save(s, "a" + std::to_string(s), s - 1, s > 1 ? "a" + std::to_string(s - 1) : "");
  save(6, "b6", 3, "a3");
  set_latest(6);
  EXPECT_EQ(plan_resume_auto(dir_).candidates.front(), step_dir(6));
  auto doomed = prune_list(dir_, 6, 1);
  std::sort(doomed.begin(), doomed.end());
  EXPECT_EQ(doomed, (std::vector<std::string>{step_dir(1), step_dir(2)}));
}

TEST_F(LineageTest, DamagedHeadFallsBackAlongTheLineage) {
  make_branch();
  fs::resize_file(step_dir(4) + "/rank_1.h5", 10);
  const ResumePlan plan = plan_resume_auto(dir_);
  ASSERT_FALSE(plan.candidates.empty());
  EXPECT_EQ(plan.candidates.front(), step_dir(3));  // not step_6 of the abandoned branch
  EXPECT_NE(notes(plan).find("skipping " + step_dir(4) + ": checkpoint file " + step_dir(4) +
                             "/rank_1.h5 is 10 bytes, the manifest says 101"),
            std::string::npos)
      << notes(plan);
  // A damaged checkpoint does not count towards `keep`: the intact step_3
  // stays with keep 1.
  auto doomed = prune_list(dir_, 4, 1);
  EXPECT_EQ(std::count(doomed.begin(), doomed.end(), step_dir(3)), 0);
}

TEST_F(LineageTest, LatestOneSaveBehindFindsTheCommittedChild) {
  for (int s = 1; s <= 3; ++s) save(s, "a" + std::to_string(s), s - 1, s > 1 ? "a" + std::to_string(s - 1) : "");
  set_latest(2);  // the save of step_3 was killed after its rename
  const ResumePlan plan = plan_resume_auto(dir_);
  EXPECT_EQ(plan.candidates.front(), step_dir(3));
  EXPECT_NE(notes(plan).find("interrupted before updating `latest`"), std::string::npos) << notes(plan);
}

TEST_F(LineageTest, LatestNamingAMissingCheckpointTakesTheNewestBelowIt) {
  for (int s = 1; s <= 3; ++s) save(s, "a" + std::to_string(s), s - 1, s > 1 ? "a" + std::to_string(s - 1) : "");
  set_latest(3);
  fs::remove_all(step_dir(3));
  const ResumePlan plan = plan_resume_auto(dir_);
  EXPECT_EQ(plan.candidates.front(), step_dir(2));
  EXPECT_NE(notes(plan).find("named by `latest`"), std::string::npos) << notes(plan);
}

TEST_F(LineageTest, EmptyAndPartialStepDirectoriesAreNeverCandidates) {
  for (int s = 1; s <= 2; ++s) save(s, "a" + std::to_string(s), s - 1, s > 1 ? "a" + std::to_string(s - 1) : "");
  set_latest(2);
  fs::create_directories(step_dir(7));  // emptied by a killed prune
  fs::create_directories(step_dir(8));  // half-deleted: a rank file, no manifest
  std::ofstream(step_dir(8) + "/rank_0.h5") << "x";
  EXPECT_EQ(plan_resume_auto(dir_).candidates.front(), step_dir(2));
  fs::remove(dir_ + "/latest");  // even without `latest`
  EXPECT_EQ(plan_resume_auto(dir_).candidates.front(), step_dir(2));
}

TEST_F(LineageTest, NothingIntactOnTheLineageLeavesNoCandidate) {
  make_branch();
  for (int s = 1; s <= 4; ++s) fs::remove(step_dir(s) + "/rank_0.h5");
  const ResumePlan plan = plan_resume_auto(dir_);
  EXPECT_TRUE(plan.candidates.empty());  // never step_5/step_6 of the other branch
  EXPECT_TRUE(plan.found_any);
}

TEST_F(LineageTest, Format1CheckpointsAreOneLinearHistoryAndCanBeParents) {
  // Written by an ftrain before the lineage fields: no id, no parent.
  for (int s = 1; s <= 3; ++s) {
    save(s, "", -1, "");
    auto m = nlohmann::json::parse(std::ifstream(step_dir(s) + "/manifest.json"));
    m["format_version"] = 1;
    m.erase("checkpoint_id");
    m.erase("parent");
    std::ofstream(step_dir(s) + "/manifest.json") << m.dump();
  }
  set_latest(2);  // one behind: step_3 is the newer one of the same history
  EXPECT_NO_THROW(verify_step_directory(step_dir(3)));
  EXPECT_EQ(plan_resume_auto(dir_).candidates,
            (std::vector<std::string>{step_dir(3), step_dir(2), step_dir(1)}));
  // A format-2 save resumed from the format-1 step_3 continues its lineage.
  save(4, "b4", 3, "");
  set_latest(4);
  EXPECT_EQ(plan_resume_auto(dir_).candidates,
            (std::vector<std::string>{step_dir(4), step_dir(3), step_dir(2), step_dir(1)}));
  auto doomed = prune_list(dir_, 4, 2);
  std::sort(doomed.begin(), doomed.end());
  EXPECT_EQ(doomed, (std::vector<std::string>{step_dir(1), step_dir(2)}));
}

TEST_F(LineageTest, PlanSurvivesTheBroadcastEncoding) {
  make_branch();
  ResumePlan plan = plan_resume_auto(dir_);
  plan.skip_first("rank 1: checksum mismatch");
  const ResumePlan back = ResumePlan::from_json(plan.to_json());
  EXPECT_EQ(back.candidates, plan.candidates);
  EXPECT_EQ(back.notes, plan.notes);
  EXPECT_EQ(back.fall_back, plan.fall_back);
  EXPECT_EQ(back.found_any, plan.found_any);
}

// Issue 35: damage of any shape in the newest manifest falls back, and the
// notes (which quote the parser's view of the bytes) stay printable and
// survive the broadcast encoding. On main, a non-UTF-8 byte made to_json()
// throw (json type_error 316) and a field of another type escaped as a json
// exception instead of a note.
TEST_F(LineageTest, AnyDamagedManifestFallsBackWithPrintableNotes) {
  const std::string manifest = step_dir(2) + "/manifest.json";
  const std::vector<std::pair<std::string, std::string>> damages = {
      {"random bytes", std::string("\xff\xfe\x80garbage\x01\x02", 12)},
      {"non-UTF-8 inside a string", "{\"complete\": true, \"checkpoint_id\": \"\xff\xc3(\"}"},
      {"a field of another type", "{\"complete\": \"yes\"}"},
      {"an id of another type", "{\"complete\": true, \"format_version\": 3, \"checkpoint_id\": 5}"},
  };
  for (const auto& [what, bytes] : damages) {
    save(1, "a1", -1, "");
    save(2, "a2", 1, "a1");
    set_latest(2);
    std::ofstream(manifest, std::ios::binary | std::ios::trunc) << bytes;
    ResumePlan plan;
    ASSERT_NO_THROW(plan = plan_resume_auto(dir_)) << what;
    ASSERT_FALSE(plan.candidates.empty()) << what;
    EXPECT_EQ(plan.candidates.front(), step_dir(1)) << what << "\n" << notes(plan);
    EXPECT_NE(notes(plan).find(manifest), std::string::npos) << what << "\n" << notes(plan);
    for (const unsigned char ch : notes(plan))
      EXPECT_TRUE((ch >= 0x20 && ch < 0x7f) || ch == '\n') << what << ": byte " << int(ch) << " in\n" << notes(plan);
    std::string encoded;
    ASSERT_NO_THROW(encoded = plan.to_json()) << what;
    EXPECT_EQ(ResumePlan::from_json(encoded).notes, plan.notes) << what;
  }
  // A file entry without its name: verify_step_directory says so as a UserError.
  save(2, "a2", 1, "a1");
  nlohmann::json m = nlohmann::json::parse(std::ifstream(manifest));
  for (auto& f : m["files"]) f.erase("name");
  std::ofstream(manifest, std::ios::trunc) << m.dump();
  EXPECT_THROW(verify_step_directory(step_dir(2)), UserError);
  const ResumePlan plan = plan_resume_auto(dir_);
  ASSERT_FALSE(plan.candidates.empty());
  EXPECT_EQ(plan.candidates.front(), step_dir(1)) << notes(plan);
}

TEST(Printable, EscapesEveryByteOutsidePrintableAscii) {
  EXPECT_EQ(printable("ok: a-Z ~"), "ok: a-Z ~");
  EXPECT_EQ(printable(std::string("\xff\x00\x7f\n", 4)), "\\xff\\x00\\x7f\n");
}

}  // namespace
