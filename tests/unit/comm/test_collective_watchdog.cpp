// The collective watchdog (comm/collective_watchdog.hpp): a collective in
// flight longer than collective_timeout produces one message naming rank,
// collective and unit; completed or probed-done ones never do.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "comm/collective_watchdog.hpp"

namespace ftrain {
namespace {

using Clock = CollectiveWatchdog::Clock;
using std::chrono::seconds;

TEST(CollectiveWatchdog, ExpiresOnlyPastTheTimeoutAndNamesRankCollectiveAndUnit) {
  CollectiveWatchdog dog([](const std::string&) { FAIL() << "the thread must not fire in this test"; });
  const auto t0 = Clock::now();
  dog.begin({1, "all_gather of bf16[64] on MPI communicator rank 1/2", "model.layers.0", {}}, t0);
  EXPECT_EQ(dog.check(t0 + seconds(4), 5.0), "");
  const std::string m = dog.check(t0 + seconds(6), 5.0);
  EXPECT_NE(m.find("rank 1: all_gather of bf16[64] on MPI communicator rank 1/2 for unit 'model.layers.0' has not "
                   "completed after 6 s (collective_timeout 5 s)"),
            std::string::npos)
      << m;
  EXPECT_EQ(dog.check(t0 + seconds(6), 0.0), "") << "timeout 0 turns the watchdog off";
}

TEST(CollectiveWatchdog, EndedAndProbedDoneCollectivesAreForgotten) {
  CollectiveWatchdog dog([](const std::string&) {});
  const auto t0 = Clock::now();
  const auto id = dog.begin({0, "reduce_scatter_sum", "u", {}}, t0);
  dog.end(id);
  bool event_done = false;
  dog.begin({0, "all_reduce_sum", "", [&] { return event_done; }}, t0);
  const std::string m = dog.check(t0 + seconds(700), 600.0);
  EXPECT_NE(m.find("all_reduce_sum outside the FSDP units"), std::string::npos) << m;
  EXPECT_NE(m.find("collective_timeout 10 min"), std::string::npos) << m;
  event_done = true;
  EXPECT_EQ(dog.check(t0 + seconds(700), 600.0), "");
  EXPECT_EQ(dog.in_flight(), 0u);
}

TEST(CollectiveWatchdog, OldestExpiredCollectiveIsReported) {
  CollectiveWatchdog dog([](const std::string&) {});
  const auto t0 = Clock::now();
  dog.begin({0, "first", "a", {}}, t0);
  dog.begin({0, "second", "b", {}}, t0 + seconds(1));
  EXPECT_NE(dog.check(t0 + seconds(10), 5.0).find("first"), std::string::npos);
}

TEST(CollectiveWatchdog, ItsThreadCallsTheHandlerOnceWithinThePoll) {
  const double saved = collective_timeout_seconds();
  set_collective_timeout(0.2);
  std::atomic<int> calls{0};
  std::promise<std::string> fired;
  {
    CollectiveWatchdog dog(
        [&](const std::string& m) {
          if (calls++ == 0) fired.set_value(m);
        },
        std::chrono::milliseconds(10));
    const auto start = Clock::now();
    dog.begin({3, "barrier on MPI communicator rank 3/4", "", {}});
    auto f = fired.get_future();
    ASSERT_EQ(f.wait_for(seconds(5)), std::future_status::ready) << "the watchdog never fired";
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    EXPECT_GE(elapsed, 0.2);
    EXPECT_LT(elapsed, 2.0);
    EXPECT_NE(f.get().find("rank 3: barrier"), std::string::npos);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(calls.load(), 1);
  set_collective_timeout(saved);
}

TEST(CollectiveWatchdog, DescribeTimeoutUsesTheDeckUnits) {
  EXPECT_EQ(describe_timeout(600), "10 min");
  EXPECT_EQ(describe_timeout(90), "90 s");
  EXPECT_EQ(describe_timeout(0), "off");
}

}  // namespace
}  // namespace ftrain
