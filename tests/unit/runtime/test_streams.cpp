// Host streams and events (runtime/stream.hpp): inline vs worker thread,
// order, events as completion points, sticky errors, cross-stream waits.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <future>
#include <stdexcept>
#include <vector>

#include "base/error.hpp"
#include "runtime/stream.hpp"

using namespace ftrain;

TEST(HostStream, SynchronousRunsInlineAndEventsAreComplete) {
  auto s = make_host_stream(false, "test.sync");
  EXPECT_FALSE(s->asynchronous());
  int ran = 0;
  s->enqueue([&] { ++ran; });
  EXPECT_EQ(ran, 1) << "a synchronous stream runs the work before enqueue returns";
  EXPECT_TRUE(s->record().query());
  EXPECT_THROW(s->enqueue([] { throw std::runtime_error("boom"); }), std::runtime_error);
}

TEST(HostStream, AsynchronousRunsInOrderAndEventsCompleteLater) {
  auto s = make_host_stream(true, "test.async");
  EXPECT_TRUE(s->asynchronous());
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  std::vector<int> order;
  s->enqueue([opened] { opened.wait(); });
  for (int i = 0; i < 5; ++i) s->enqueue([&order, i] { order.push_back(i); });
  Event e = s->record();
  EXPECT_FALSE(e.query()) << "the event is behind blocked work";
  EXPECT_TRUE(order.empty()) << "enqueue returned before the work ran";
  gate.set_value();
  e.synchronize();
  EXPECT_TRUE(e.query());
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(HostStream, AnErrorIsStickyUntilSynchronizeRethrowsIt) {
  auto s = make_host_stream(true, "test.error");
  std::atomic<int> after{0};
  s->enqueue([] { FT_THROW() << "kernel failed on tensor x"; });
  s->enqueue([&] { ++after; });
  try {
    s->synchronize();
    ADD_FAILURE() << "synchronize must rethrow the error of enqueued work";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kernel failed on tensor x"), std::string::npos) << e.what();
  }
  EXPECT_EQ(after.load(), 0) << "work after the error is skipped";
  s->enqueue([&] { ++after; });
  s->synchronize();  // observed errors are cleared
  EXPECT_EQ(after.load(), 1);
}

TEST(HostStream, WaitOrdersOneStreamAfterAnother) {
  auto producer = make_host_stream(true, "test.producer");
  auto consumer = make_host_stream(true, "test.consumer");
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  std::atomic<int> value{0};
  producer->enqueue([opened, &value] {
    opened.wait();
    value = 42;
  });
  consumer->wait(producer->record());
  int seen = -1;
  consumer->enqueue([&] { seen = value.load(); });
  Event consumed = consumer->record();
  EXPECT_FALSE(consumed.query());
  gate.set_value();
  consumer->synchronize();
  EXPECT_EQ(seen, 42) << "the consumer ran only after the producer's event";
}

namespace {

// A backend event that completes when the test says so (what a cudaEvent_t
// is to the CUDA backend): counts how it is asked.
class ManualNativeEvent final : public NativeEvent {
 public:
  bool query() override {
    ++queries;
    return done.load();
  }
  void synchronize() override {
    ++synchronizes;
    while (!done.load()) std::this_thread::yield();
  }
  void* handle() const override { return const_cast<ManualNativeEvent*>(this); }
  std::atomic<bool> done{false};
  std::atomic<int> queries{0}, synchronizes{0};
};

}  // namespace

TEST(NativeEvent, AnEventFromABackendAsksIt) {
  auto native = std::make_shared<ManualNativeEvent>();
  const Event e = Event::from_native(native);
  EXPECT_EQ(e.native(), native.get());
  EXPECT_FALSE(e.query()) << "not reached yet: the host flag must not answer";
  native->done = true;
  EXPECT_TRUE(e.query());
  e.synchronize();
  EXPECT_EQ(native->queries.load(), 2);
  EXPECT_EQ(native->synchronizes.load(), 1);
  EXPECT_EQ(Event().native(), nullptr) << "a host event has no backend event";
}

TEST(NativeEvent, AHostStreamWaitsForABackendEvent) {
  // The communication stream of a host rank waiting for a device's compute
  // event: its later work runs only after the backend event completed.
  auto native = std::make_shared<ManualNativeEvent>();
  auto stream = make_host_stream(true, "waiter");
  std::atomic<bool> ran{false};
  stream->wait(Event::from_native(native));
  stream->enqueue([&] { ran = true; });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(ran.load()) << "work after wait() ran before the backend event completed";
  native->done = true;
  stream->synchronize();
  EXPECT_TRUE(ran.load());
  EXPECT_GE(native->synchronizes.load(), 1);
}
