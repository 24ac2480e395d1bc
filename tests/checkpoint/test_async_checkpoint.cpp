// Asynchronous sharded checkpoints (ckpt/checkpoint_writer.hpp), under
// mpirun (np 1 and 2):
// * an asynchronous save writes rank files byte for byte equal to a blocking
//   save of the same state, although the engine's state is overwritten (as
//   training would) while the background write is in flight, and the save
//   commits only at a later poll, after the caller went on for steps;
// * a failure injected into one rank's background write
//   (FTRAIN_TEST_FAULT_CHECKPOINT_WRITE) is agreed on at the commit: every
//   rank gets the error naming the step, the rank and the file, nothing is
//   committed, and the previous checkpoint stays `latest` and loads.
// The end-to-end runs (resume of an async checkpoint, overlap in a real run,
// a fault mid-run) are checkpoint_test.py's async_* scenarios.
#include <gtest/gtest.h>
#include <mpi.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint_writer.hpp"
#include "ckpt/sharded_checkpoint.hpp"
#include "comm/mpi_communicator.hpp"
#include "fsdp/engine.hpp"
#include "plugin/loader.hpp"

using namespace ftrain;
namespace fs = std::filesystem;

namespace {

std::string bytes_of(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// One directory for all ranks: rank 0's pid names it.
fs::path shared_dir(Communicator& world, const std::string& what) {
  long id = static_cast<long>(::getpid());
  MPI_Bcast(&id, 1, MPI_LONG, 0, MPI_COMM_WORLD);
  const fs::path dir = fs::temp_directory_path() / ("ftrain_async_" + what + "_" + std::to_string(id));
  if (world.rank() == 0) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  world.barrier();
  return dir;
}

ModelHandle tiny_model() {
  return PluginLoader().create_model("llama", "tiny",
                                     {{"hidden_size", "24"}, {"intermediate_size", "40"},
                                      {"num_hidden_layers", "2"}, {"vocab_size", "37"}});
}

ckpt::SaveInfo info_for(std::int64_t step) {
  ckpt::SaveInfo info;
  info.step = step;
  info.seed = 5;
  info.strategy = "full_shard";
  info.deck_text = "test deck";
  info.scalars = {{"loss", 1.25}, {"elapsed_s", 3.0}};
  return info;
}

// Overwrites every shard buffer, as optimizer steps would.
void train_on(FsdpEngine& engine, float value) {
  for (const auto& flat : engine.units())
    for (Tensor* t : {&flat->master, &flat->exp_avg, &flat->exp_avg_sq}) {
      float* p = t->data_as<float>();
      std::fill(p, p + t->numel(), value);
    }
}

}  // namespace

TEST(AsyncCheckpoint, FilesEqualBlockingSaveWhileTrainingGoesOn) {
  MpiCommunicator world(MPI_COMM_WORLD);
  const fs::path dir = shared_dir(world, "equal");
  auto model = tiny_model();
  FsdpEngine engine(*model, world, FsdpOptions{});
  engine.init_random(5);

  ckpt::CheckpointWriter blocking(engine, world, {(dir / "blocking").string(), 0, false});
  const auto done = blocking.save(info_for(3), false);
  ASSERT_EQ(done.error, "");
  ASSERT_FALSE(blocking.in_flight());
  ASSERT_EQ(done.lines.size(), 1u);
  // HDF5 would record modification times in whole seconds: a second apart,
  // equal files also prove that none is stored.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));

  ::setenv("FTRAIN_TEST_CHECKPOINT_WRITE_DELAY_MS", "600", 1);
  ckpt::CheckpointWriter async(engine, world, {(dir / "async").string(), 0, true});
  const auto started = async.save(info_for(3), false);
  ::unsetenv("FTRAIN_TEST_CHECKPOINT_WRITE_DELAY_MS");
  ASSERT_EQ(started.error, "");
  EXPECT_TRUE(started.lines.empty()) << "an asynchronous save must not commit before its write ends";
  ASSERT_TRUE(async.in_flight());
  train_on(engine, 42.0f);  // the live state changes while the write is in flight
  // Step boundaries: poll until the commit; the caller is never blocked.
  std::int64_t step = 3, polls_in_flight = 0;
  ckpt::CheckpointWriter::Outcome committed;
  while (async.in_flight()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    committed = async.poll(++step);
    if (async.in_flight()) ++polls_in_flight;
    ASSERT_LT(step, 1000) << "the background write never finished";
  }
  ASSERT_EQ(committed.error, "");
  ASSERT_EQ(committed.lines.size(), 1u);
  EXPECT_GE(polls_in_flight, 3) << "the save committed before its 600 ms write could have ended";
  EXPECT_NE(committed.lines[0].find("written in the background"), std::string::npos) << committed.lines[0];
  EXPECT_EQ(committed.lines[0].find("while 0 step(s) trained"), std::string::npos) << committed.lines[0];

  const std::string file = "step_3/rank_" + std::to_string(world.rank()) + ".h5";
  const std::string a = bytes_of(dir / "blocking" / file), b = bytes_of(dir / "async" / file);
  ASSERT_GT(a.size(), 1000u);
  EXPECT_TRUE(a == b) << file << ": the asynchronous save's file differs from the blocking save's (" << a.size()
                      << " vs " << b.size() << " bytes)";
  if (world.rank() == 0) {
    auto manifest = [&](const char* which) {
      auto m = nlohmann::json::parse(bytes_of(dir / which / "step_3/manifest.json"));
      m.erase("checkpoint_id");  // random per save
      return m;
    };
    EXPECT_EQ(manifest("blocking"), manifest("async"));
  }

  // And the checkpoint holds the state of step 3, not the one trained since.
  FsdpEngine loaded(*model, world, FsdpOptions{});
  ckpt::load_sharded(loaded, world, (dir / "async/step_3").string());
  FsdpEngine reference(*model, world, FsdpOptions{});
  reference.init_random(5);
  for (std::size_t u = 0; u < loaded.units().size(); ++u) {
    const float* got = loaded.units()[u]->master.data_as<float>();
    const float* want = reference.units()[u]->master.data_as<float>();
    for (std::int64_t i = 0; i < loaded.units()[u]->shard_numel(); ++i) ASSERT_EQ(got[i], want[i]) << u << " " << i;
  }
  world.barrier();
  if (world.rank() == 0) fs::remove_all(dir);
}

TEST(AsyncCheckpoint, FailedBackgroundWriteStopsWithTheFileAndKeepsThePrevious) {
  MpiCommunicator world(MPI_COMM_WORLD);
  const fs::path dir = shared_dir(world, "fault");
  auto model = tiny_model();
  FsdpEngine engine(*model, world, FsdpOptions{});
  engine.init_random(5);
  const std::string ck = (dir / "ck").string();
  ckpt::CheckpointWriter writer(engine, world, {ck, 0, true});
  ASSERT_EQ(writer.save(info_for(1), false).error, "");
  ASSERT_EQ(writer.finish().error, "");
  ASSERT_EQ(writer.last_committed(), ck + "/step_1");

  const int victim = world.size() - 1;
  ::setenv("FTRAIN_TEST_FAULT_CHECKPOINT_WRITE", (std::to_string(victim) + ":2").c_str(), 1);
  const auto started = writer.save(info_for(2), false);
  ::unsetenv("FTRAIN_TEST_FAULT_CHECKPOINT_WRITE");
  ASSERT_EQ(started.error, "") << "the write fails in the background, not at the start";
  train_on(engine, 7.0f);
  const auto finished = writer.finish();
  // Every rank gets the same error: step, rank and file named.
  const std::string file = "step_2.tmp/rank_" + std::to_string(victim) + ".h5";
  EXPECT_NE(finished.error.find("checkpoint step 2 (background write)"), std::string::npos) << finished.error;
  EXPECT_NE(finished.error.find(file), std::string::npos) << finished.error;
  EXPECT_NE(finished.error.find("injected fault"), std::string::npos) << finished.error;
  if (world.size() > 1)
    EXPECT_EQ(finished.error.rfind("rank " + std::to_string(victim) + ": ", 0), 0u) << finished.error;
  EXPECT_TRUE(finished.lines.empty());
  EXPECT_FALSE(writer.in_flight());
  world.barrier();
  EXPECT_EQ(writer.last_committed(), ck + "/step_1");
  std::ifstream latest(ck + "/latest");
  std::string named;
  latest >> named;
  EXPECT_EQ(named, "step_1");
  EXPECT_FALSE(fs::exists(ck + "/step_2"));
  EXPECT_EQ(ckpt::find_latest_complete(ck).value_or(""), ck + "/step_1");
  FsdpEngine loaded(*model, world, FsdpOptions{});
  EXPECT_EQ(ckpt::load_sharded(loaded, world, ck + "/step_1").step, 1);
  world.barrier();
  if (world.rank() == 0) fs::remove_all(dir);
}
