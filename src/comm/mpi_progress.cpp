#include "comm/mpi_progress.hpp"

#include <mpi.h>

#include <chrono>
#include <cstdlib>
#include <iostream>

#include "base/error.hpp"

namespace ftrain {

using Clock = std::chrono::steady_clock;

void CommClock::add_busy(double s) {
  std::lock_guard<std::mutex> lock(mutex);
  times.busy_seconds += s;
}

void CommClock::add_exposed(double s) {
  std::lock_guard<std::mutex> lock(mutex);
  times.exposed_seconds += s;
}

namespace {

class ProgressRequest final : public Request::Impl {
 public:
  ProgressRequest(std::future<void> done, std::shared_ptr<CommClock> clock, Event finished)
      : done_(std::move(done)), clock_(std::move(clock)), finished_(std::move(finished)) {}
  ~ProgressRequest() override {
    if (!done_.valid()) return;
    // Dropped without wait(): let it finish (callers rely on a destroyed
    // request being done with its buffers), and never lose its error quietly.
    try {
      done_.get();
    } catch (const std::exception& e) {
      std::cerr << "ftrain: warning: a failed collective was dropped without wait(): " << e.what() << "\n";
    }
  }
  void wait() override {
    if (done_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
      const auto t0 = Clock::now();
      done_.wait();
      if (clock_) clock_->add_exposed(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    done_.get();  // rethrows the job's error on this thread
  }
  bool test() override { return done_.wait_for(std::chrono::seconds(0)) == std::future_status::ready; }
  Event completion() const override { return finished_; }

 private:
  std::future<void> done_;
  std::shared_ptr<CommClock> clock_;
  Event finished_;  // completed by the job's last act, failed or not
};

}  // namespace

std::shared_ptr<MpiProgress> MpiProgress::acquire() {
  static std::mutex mutex;
  static std::weak_ptr<MpiProgress> current;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto existing = current.lock()) return existing;
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);  // no progress thread exists yet: this thread may call MPI
  int world_rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  auto progress = std::make_shared<MpiProgress>(provided >= MPI_THREAD_SERIALIZED, world_rank);
  current = progress;
  return progress;
}

// The watchdog's verdict in a run: say why on stderr, then end every rank.
// MPI_Abort is called from the watchdog thread while the progress thread is
// inside MPI; should it not return promptly, the process exits anyway after
// 10 s and mpirun ends the job because a rank exited without MPI_Finalize.
[[noreturn]] static void abort_job_for_timeout(const std::string& message) {
  std::cerr << "ftrain: error: " << message << std::endl;
  std::thread([] {
    std::this_thread::sleep_for(std::chrono::seconds(10));
    std::_Exit(3);
  }).detach();
  MPI_Abort(MPI_COMM_WORLD, 3);
  std::_Exit(3);
}

MpiProgress::MpiProgress(bool threaded, int world_rank)
    : threaded_(threaded), world_rank_(world_rank), watchdog_(&abort_job_for_timeout) {
  if (threaded_) thread_ = std::thread([this] { worker(); });
}

MpiProgress::~MpiProgress() {
  if (!threaded_) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();  // runs what is still queued first
}

void MpiProgress::set_unit_label(const std::string& unit) {
  std::lock_guard<std::mutex> lock(label_mutex_);
  unit_label_ = unit;
}

std::string MpiProgress::unit_label() {
  std::lock_guard<std::mutex> lock(label_mutex_);
  return unit_label_;
}

std::function<void()> MpiProgress::guarded(std::function<void()> job, std::string what) {
  // The unit is the one labelled when the job was issued, not when it runs.
  CollectiveWatchdog::Watch watch{world_rank_, std::move(what), unit_label(), {}};
  return [this, job = std::move(job), watch = std::move(watch)] {
    {
      std::lock_guard<std::mutex> lock(failure_mutex_);
      if (!first_failure_.empty())
        FT_THROW() << "not started: an earlier collective of this rank failed (" << first_failure_ << ")";
    }
    struct Watched {
      CollectiveWatchdog& dog;
      std::uint64_t id;
      ~Watched() { dog.end(id); }
    } watched{watchdog_, watchdog_.begin(watch)};
    try {
      job();
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(failure_mutex_);
      if (first_failure_.empty()) first_failure_ = e.what();
      throw;
    }
  };
}

void MpiProgress::clear_failure_for_testing() {
  std::lock_guard<std::mutex> lock(failure_mutex_);
  first_failure_.clear();
}

Request MpiProgress::submit(const Event& after, std::function<void()> job, std::shared_ptr<CommClock> clock,
                            std::string what) {
  job = guarded(std::move(job), std::move(what));
  // Busy time is booked before the request completes, so a waiter that
  // returns sees its collective counted.
  Event finished = Event::pending();
  std::packaged_task<void()> task([after, job = std::move(job), clock, finished] {
    // Completed last, failure or not: a stream waiting on the request moves on.
    struct Complete {
      Event event;
      ~Complete() { event.complete(); }
    } complete{finished};
    // Stream order with compute: the collective's buffers were written by
    // ops enqueued before `after`. Waited for here, on the progress thread
    // (jobs behind this one wait too: collectives stay in issue order).
    after.synchronize();
    struct BookBusy {
      CommClock* clock;
      Clock::time_point t0 = Clock::now();
      ~BookBusy() {
        if (clock) clock->add_busy(std::chrono::duration<double>(Clock::now() - t0).count());
      }
    } book{clock.get()};
    job();
  });
  auto done = task.get_future();
  if (!threaded_) {
    const auto t0 = Clock::now();
    task();  // an exception is stored in the future
    if (clock) clock->add_exposed(std::chrono::duration<double>(Clock::now() - t0).count());
    return Request(std::make_unique<ProgressRequest>(std::move(done), std::move(clock), std::move(finished)));
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(task));
  }
  wake_.notify_one();
  return Request(std::make_unique<ProgressRequest>(std::move(done), std::move(clock), std::move(finished)));
}

void MpiProgress::run(std::function<void()> job, std::string what) {
  job = guarded(std::move(job), std::move(what));
  if (!threaded_) {
    job();
    return;
  }
  std::packaged_task<void()> task(std::move(job));
  auto done = task.get_future();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(task));
  }
  wake_.notify_one();
  done.get();
}

void MpiProgress::worker() {
  for (;;) {
    std::packaged_task<void()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and nothing left
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();  // exceptions are stored in the future
  }
}

}  // namespace ftrain
