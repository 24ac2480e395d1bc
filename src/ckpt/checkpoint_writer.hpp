// The run loop's sharded-checkpoint saver: blocking, or asynchronous
// (`checkpoint ... async on`).
//
// An asynchronous save copies the rank's shard state (master weights, AdamW
// moments, FP8 scaling state; the data position and learning rate are
// functions of the step, share/doc/checkpoints.md) into a host buffer kept
// between saves, and writes the rank file on a background thread while
// training goes on. The protocol around the write is the blocking save's
// (sharded_checkpoint.hpp): the temp directory is made before, the commit
// (agreement, manifest, rename, `latest`, pruning) after, both collective and
// both on the calling (main) thread at step boundaries; the background thread
// calls no MPI and holds the HDF5 lock (core/hdf5_lock.hpp) only while it
// writes the file's metadata. So:
// * at most one save is in flight: the next save, the end of the run, a
//   signal stop and a stop on error first wait for it (finish);
// * until the commit, the checkpoint is only DIR/step_<N>.tmp: a crash
//   mid-write leaves the previous checkpoint and `latest` as they were;
// * a failed background write (disk full, I/O error) is kept, agreed on by
//   all ranks at the commit, and returned as Outcome::error naming the step,
//   the rank and the file, so the run stops cleanly with it.
// Both modes write through write_shard_file, so their files are identical.
//
// Test-only switches (environment; only tests and the benchmark set them):
//   FTRAIN_TEST_CHECKPOINT_WRITE_DELAY_MS=MS  every rank file write takes MS
//     longer (a pause before its data is written), to make overlap
//     observable and to expose a snapshot that would not be a copy;
//   FTRAIN_TEST_FAULT_CHECKPOINT_WRITE=RANK:STEP  rank RANK's write of the
//     checkpoint of step STEP fails after the file's metadata is written, as
//     a full disk would.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/shard_snapshot.hpp"
#include "ckpt/sharded_checkpoint.hpp"

namespace ftrain::ckpt {

class CheckpointWriter {
 public:
  struct Options {
    std::string dir;
    int keep = 0;             // 0 = keep all (lineage.hpp)
    bool background = false;  // async on
  };
  // What a call did. Rank 0 prints `lines`; `error` is the same on every rank.
  struct Outcome {
    std::vector<std::string> lines;  // "checkpoint step N -> DIR (...)" per commit
    std::string error;               // non-empty: a save failed, the run must stop
  };

  CheckpointWriter(FsdpEngine& engine, Communicator& world, Options options);
  // Waits for a write in flight and commits nothing (an exception is
  // unwinding: the ranks may not meet again).
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Collective. Finishes the save in flight, then saves `info`: in the
  // background when the writer is asynchronous and `last` is false (the
  // run's final save, which nothing could overlap, is written at once).
  // info.parent_directory is replaced by the last checkpoint this writer
  // committed, if any.
  Outcome save(SaveInfo info, bool last);
  // Collective when a save is in flight (a no-op otherwise; every rank knows
  // the same). Call at each step boundary with the optimizer steps done:
  // commits the save once every rank's file is written.
  Outcome poll(std::int64_t steps_done);
  // Collective when a save is in flight: waits for it and commits it.
  Outcome finish();
  bool in_flight() const { return job_ != nullptr; }
  // The directory of the last commit ("" before the first).
  const std::string& last_committed() const { return last_committed_; }

 private:
  struct Job;
  Outcome commit(Outcome out);
  static void write(Job& job, const std::atomic<std::int64_t>& steps_done);

  FsdpEngine& engine_;
  Communicator& world_;
  Options options_;
  std::string last_committed_;
  SnapshotBuffer snapshot_buffer_;  // the asynchronous saves' copy, reused
  std::unique_ptr<Job> job_;
  std::thread thread_;
  std::atomic<std::int64_t> steps_done_{0};  // the trainer's step, for the overlap report
};

}  // namespace ftrain::ckpt
