#include "runtime/stream.hpp"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "base/error.hpp"
#include "runtime/host_streams.hpp"

namespace ftrain {

struct EventState {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  std::shared_ptr<NativeEvent> native;  // set: the backend's event decides, `done` is unused

  void complete() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      done = true;
    }
    cv.notify_all();
  }
};

Event Event::from_native(std::shared_ptr<NativeEvent> native) {
  FT_CHECK(native != nullptr) << "Event::from_native: no backend event";
  auto state = std::make_shared<EventState>();
  state->native = std::move(native);
  return Event(std::move(state));
}

NativeEvent* Event::native() const { return state_ ? state_->native.get() : nullptr; }

bool Event::query() const {
  if (!state_) return true;
  if (state_->native) return state_->native->query();
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->done;
}

Event Event::pending() { return Event(std::make_shared<EventState>()); }

void Event::complete() const {
  if (state_) state_->complete();
}

void Event::synchronize() const {
  if (!state_) return;
  if (state_->native) return state_->native->synchronize();
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->cv.wait(lock, [&] { return state_->done; });
}

namespace {

// Synchronous: the work has run when enqueue returns; events are complete.
class SyncHostStream final : public Stream {
 public:
  explicit SyncHostStream(const char* name) : name_(name) {}
  Device device() const override { return Device::host; }
  bool asynchronous() const override { return false; }
  const char* name() const override { return name_; }
  void enqueue(std::function<void()> work) override { work(); }
  Event record() override { return Event(); }
  void wait(const Event& event) override { event.synchronize(); }
  void synchronize() override {}

 private:
  const char* name_;
};

// Every live asynchronous host stream, so that the host allocator can order a
// release after the work already enqueued on each of them.
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::vector<Stream*>& registry() {
  static std::vector<Stream*>* streams = new std::vector<Stream*>();  // outlives static destruction
  return *streams;
}

class AsyncHostStream final : public Stream {
 public:
  explicit AsyncHostStream(const char* name) : name_(name), worker_([this] { run(); }) {
    std::lock_guard<std::mutex> lock(registry_mutex());
    registry().push_back(this);
  }

  ~AsyncHostStream() override {
    {
      std::lock_guard<std::mutex> lock(registry_mutex());
      auto& r = registry();
      r.erase(std::remove(r.begin(), r.end(), this), r.end());
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    // The last owner may be a task of this very stream (a captured object):
    // a thread cannot join itself, so it finishes on its own.
    if (worker_.get_id() == std::this_thread::get_id()) {
      worker_.detach();
    } else {
      worker_.join();
    }
  }

  Device device() const override { return Device::host; }
  bool asynchronous() const override { return true; }
  const char* name() const override { return name_; }

  void enqueue(std::function<void()> work) override { push(Task{std::move(work), nullptr}); }

  Event record() override {
    auto state = std::make_shared<EventState>();
    push(Task{nullptr, state});
    return Event(state);
  }

  void wait(const Event& event) override {
    if (event.query()) return;
    Event e = event;
    push(Task{[e] { e.synchronize(); }, nullptr});
  }

  void synchronize() override {
    FT_CHECK(worker_.get_id() != std::this_thread::get_id())
        << "stream '" << name_ << "': synchronize() from its own work would wait for itself";
    record().synchronize();
    std::exception_ptr error;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::swap(error, error_);
    }
    if (error) std::rethrow_exception(error);
  }

 private:
  struct Task {
    std::function<void()> work;          // null for an event marker
    std::shared_ptr<EventState> marker;  // completed when reached
  };

  void push(Task task) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(task));
    }
    cv_.notify_one();
  }

  void run() {
    while (true) {
      Task task;
      bool skip = false;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping and drained
        task = std::move(queue_.front());
        queue_.pop_front();
        skip = error_ != nullptr;  // sticky error: later work is not run
      }
      if (task.marker) {
        task.marker->complete();
        continue;
      }
      if (!skip) {
        try {
          task.work();
        } catch (...) {
          std::lock_guard<std::mutex> lock(mutex_);
          if (!error_) error_ = std::current_exception();
        }
      }
      task = Task{};  // captured objects are released here, outside the lock
    }
  }

  const char* name_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  std::exception_ptr error_;
  std::thread worker_;  // last: starts after the members it uses exist
};

}  // namespace

std::unique_ptr<Stream> make_host_stream(bool asynchronous, const char* name) {
  if (asynchronous) return std::make_unique<AsyncHostStream>(name);
  return std::make_unique<SyncHostStream>(name);
}

std::vector<Event> record_on_async_host_streams() {
  std::vector<Event> events;
  std::lock_guard<std::mutex> lock(registry_mutex());
  for (Stream* s : registry()) events.push_back(s->record());
  return events;
}

}  // namespace ftrain
