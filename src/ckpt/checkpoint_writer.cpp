// Blocking and asynchronous sharded-checkpoint saves (see checkpoint_writer.hpp).
#include "ckpt/checkpoint_writer.hpp"

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "ckpt/collective_errors.hpp"
#include "ckpt/consolidated.hpp"
#include "ckpt/hdf5_util.hpp"
#include "ckpt/shard_snapshot.hpp"
#include "base/error.hpp"

namespace ftrain::ckpt {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// FTRAIN_TEST_CHECKPOINT_WRITE_DELAY_MS (checkpoint_writer.hpp).
std::chrono::milliseconds test_write_delay() {
  const char* text = std::getenv("FTRAIN_TEST_CHECKPOINT_WRITE_DELAY_MS");
  if (text == nullptr || *text == '\0') return std::chrono::milliseconds(0);
  char* end = nullptr;
  const long ms = std::strtol(text, &end, 10);
  FT_CHECK(*end == '\0' && ms >= 0) << "FTRAIN_TEST_CHECKPOINT_WRITE_DELAY_MS=" << text << ": expected milliseconds";
  return std::chrono::milliseconds(ms);
}

// FTRAIN_TEST_FAULT_CHECKPOINT_WRITE=RANK:STEP (checkpoint_writer.hpp).
bool test_fault(int rank, std::int64_t step) {
  const char* spec = std::getenv("FTRAIN_TEST_FAULT_CHECKPOINT_WRITE");
  if (spec == nullptr || *spec == '\0') return false;
  int fault_rank = -1;
  long long fault_step = -1;
  char extra = 0;
  FT_CHECK(std::sscanf(spec, "%d:%lld%c", &fault_rank, &fault_step, &extra) == 2)
      << "FTRAIN_TEST_FAULT_CHECKPOINT_WRITE=" << spec << ": expected RANK:STEP";
  return fault_rank == rank && fault_step == step;
}

}  // namespace

struct CheckpointWriter::Job {
  SaveInfo info;
  ShardSnapshot snapshot;
  std::string path;  // DIR/step_<N>.tmp/rank_<r>.h5
  std::int64_t parent_step = -1;
  bool background = false;
  std::chrono::milliseconds delay{0};
  bool fault = false;
  Clock::time_point requested;  // when save() was called
  double paused_seconds = 0;    // the caller's time inside save() and the commit
  // Written by the writing thread, read after `done` (or the join).
  std::string failure;
  std::int64_t bytes = 0;
  double write_seconds = 0;
  std::int64_t steps_at_end = 0;  // the trainer's step when the write ended
  std::atomic<bool> done{false};
};

CheckpointWriter::CheckpointWriter(FsdpEngine& engine, Communicator& world, Options options)
    : engine_(engine), world_(world), options_(std::move(options)) {}

CheckpointWriter::~CheckpointWriter() {
  if (thread_.joinable()) thread_.join();
}

void CheckpointWriter::write(Job& job, const std::atomic<std::int64_t>& steps_done) {
  const auto t0 = Clock::now();
  job.failure = failure_of([&] {
    const auto deferred = create_shard_file(job.path, job.snapshot, job.parent_step);
    if (job.fault)
      FT_USER_ERROR() << "writing " << job.path << " failed: injected fault (FTRAIN_TEST_FAULT_CHECKPOINT_WRITE)";
    // The delay comes before the data, so a snapshot that did not copy the
    // state would be written after training changed it (tests see that).
    if (job.delay.count() > 0) std::this_thread::sleep_for(job.delay);
    h5::write_deferred_f32(job.path, deferred);
    job.bytes = static_cast<std::int64_t>(std::filesystem::file_size(job.path));
  });
  if (!job.failure.empty())
    job.failure = "checkpoint step " + std::to_string(job.info.step) + (job.background ? " (background write)" : "") +
                  ": " + job.failure + "; nothing was committed, the previous checkpoint stays the latest";
  job.write_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  job.steps_at_end = steps_done.load(std::memory_order_acquire);
  job.done.store(true, std::memory_order_release);
}

CheckpointWriter::Outcome CheckpointWriter::save(SaveInfo info, bool last) {
  Outcome out = finish();
  if (!out.error.empty()) return out;
  const auto t0 = Clock::now();
  if (!last_committed_.empty()) info.parent_directory = last_committed_;
  std::string tmp_dir;
  try {  // both collective: a failure throws the same error on every rank
    tmp_dir = begin_sharded_save(world_, options_.dir, info.step);
    if (info.consolidated)
      save_consolidated(engine_, world_, tmp_dir + "/model.h5", info.model_name, info.model_config);
  } catch (const UserError& e) {
    out.error = e.what();
    return out;
  }
  auto job = std::make_unique<Job>();
  job->background = options_.background && !last;
  job->path = rank_file_path(tmp_dir, world_.rank());
  job->parent_step = lineage_parent_step(options_.dir, info.parent_directory);
  job->delay = test_write_delay();
  job->fault = test_fault(world_.rank(), info.step);
  job->snapshot = take_shard_snapshot(engine_, world_, info, job->background ? &snapshot_buffer_ : nullptr);
  job->info = std::move(info);
  job->requested = t0;
  steps_done_.store(job->info.step, std::memory_order_release);
  job_ = std::move(job);
  if (job_->background) {
    job_->paused_seconds = seconds_since(t0);
    thread_ = std::thread([this, job = job_.get()] { write(*job, steps_done_); });
    return out;
  }
  write(*job_, steps_done_);
  return commit(std::move(out));
}

CheckpointWriter::Outcome CheckpointWriter::poll(std::int64_t steps_done) {
  if (!job_) return {};
  steps_done_.store(steps_done, std::memory_order_release);
  const std::int64_t mine = job_->done.load(std::memory_order_acquire) ? 1 : 0;
  if (world_.all_reduce_sum(mine) < world_.size()) return {};
  return commit({});
}

CheckpointWriter::Outcome CheckpointWriter::finish() {
  if (!job_) return {};
  return commit({});
}

CheckpointWriter::Outcome CheckpointWriter::commit(Outcome out) {
  if (thread_.joinable()) thread_.join();
  const auto t0 = Clock::now();
  const std::unique_ptr<Job> job = std::move(job_);
  std::string where;
  try {
    where = commit_sharded_save(world_, engine_.shard_comm().size(), options_.dir, job->info, job->failure,
                                job->bytes, options_.keep);
  } catch (const UserError& e) {
    out.error = e.what();
    return out;
  }
  last_committed_ = where;
  char text[256];
  if (job->background) {
    const std::int64_t overlapped = job->steps_at_end - job->info.step;
    std::snprintf(text, sizeof text,
                  " (written in the background in %.2f s while %lld step(s) trained; training paused %.2f s)\n",
                  job->write_seconds, static_cast<long long>(overlapped), job->paused_seconds + seconds_since(t0));
  } else {
    std::snprintf(text, sizeof text, " (%.2f s)\n", seconds_since(job->requested));
  }
  out.lines.push_back("checkpoint step " + std::to_string(job->info.step) + " -> " + where + text);
  return out;
}

}  // namespace ftrain::ckpt
