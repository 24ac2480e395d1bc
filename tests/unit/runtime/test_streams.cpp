// Host streams and events (runtime/stream.hpp): inline vs worker thread,
// order, events as completion points, sticky errors, cross-stream waits.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <stdexcept>
#include <vector>

#include "core/error.hpp"
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
