#include "comm/comm_stream.hpp"

#include <chrono>

namespace ftrain {

using Clock = std::chrono::steady_clock;

class StreamRequest final : public Request::Impl {
 public:
  StreamRequest(CommStream& stream, std::future<void> done) : stream_(stream), done_(std::move(done)) {}
  ~StreamRequest() override {
    // Never let buffers die under a running collective.
    if (done_.valid()) done_.wait();
  }
  void wait() override {
    if (done_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
      const auto t0 = Clock::now();
      done_.wait();
      const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
      std::lock_guard<std::mutex> lock(stream_.mutex_);
      stream_.exposed_seconds_ += dt;
    }
    done_.get();  // rethrows a failure of the task
  }
  bool test() override { return done_.wait_for(std::chrono::seconds(0)) == std::future_status::ready; }

 private:
  CommStream& stream_;
  std::future<void> done_;
};

CommStream::CommStream(bool threaded) : threaded_(threaded) {
  if (threaded_) thread_ = std::thread([this] { worker(); });
}

CommStream::~CommStream() {
  if (!threaded_) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

Request CommStream::submit(std::function<void()> task) {
  std::packaged_task<void()> packaged(std::move(task));
  auto done = packaged.get_future();
  if (!threaded_) {
    const auto t0 = Clock::now();
    packaged();
    std::lock_guard<std::mutex> lock(mutex_);
    busy_seconds_ += std::chrono::duration<double>(Clock::now() - t0).count();
    exposed_seconds_ += std::chrono::duration<double>(Clock::now() - t0).count();
    return Request(std::make_unique<StreamRequest>(*this, std::move(done)));
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(packaged));
  }
  wake_.notify_one();
  return Request(std::make_unique<StreamRequest>(*this, std::move(done)));
}

void CommStream::synchronize() {
  if (!threaded_) return;
  std::unique_lock<std::mutex> lock(mutex_);
  idle_.wait(lock, [this] { return queue_.empty() && !running_task_; });
}

void CommStream::worker() {
  for (;;) {
    std::packaged_task<void()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and nothing left
      task = std::move(queue_.front());
      queue_.pop_front();
      running_task_ = true;
    }
    const auto t0 = Clock::now();
    task();  // exceptions are stored in the future
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      busy_seconds_ += dt;
      running_task_ = false;
      if (queue_.empty()) idle_.notify_all();
    }
  }
}

double CommStream::busy_seconds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return busy_seconds_;
}

double CommStream::exposed_seconds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return exposed_seconds_;
}

void CommStream::reset_timers() {
  std::lock_guard<std::mutex> lock(mutex_);
  busy_seconds_ = 0;
  exposed_seconds_ = 0;
}

}  // namespace ftrain
