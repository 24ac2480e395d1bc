#include <gtest/gtest.h>
#include <sched.h>

#include "train/cpu_binding.hpp"

namespace ftrain {
namespace {

TEST(CpuBinding, CompressesRunsOfCpus) {
  const int cpus[] = {0, 1, 2, 3, 8, 10, 11};
  EXPECT_EQ(compress_cpu_list(cpus, 7), "0-3,8,10-11");
  const int one[] = {5};
  EXPECT_EQ(compress_cpu_list(one, 1), "5");
  EXPECT_EQ(compress_cpu_list(nullptr, 0), "");
}

TEST(CpuBinding, ABoundRankRunsItsCpusAnUnboundOneItsShareOfTheNode) {
  CpuBinding bound{12, 96, "0-11"};
  EXPECT_EQ(cores_for_rank(bound, 8), 12);
  EXPECT_EQ(cores_for_rank(bound, 1), 12) << "a binding is the launcher's word, whatever the rank count";
  CpuBinding unbound{96, 96, "0-95"};
  EXPECT_EQ(cores_for_rank(unbound, 8), 12);
  EXPECT_EQ(cores_for_rank(unbound, 200), 1);
}

TEST(CpuBinding, HeaderSaysWhatEachRankGot) {
  CpuBinding rank0{12, 96, "0-11"};
  EXPECT_EQ(describe_cpu_binding(rank0, 12, 12, true), "bound to 12 CPU(s) per rank (rank 0: CPUs 0-11)");
  EXPECT_EQ(describe_cpu_binding(rank0, 1, 12, true), "bound to 1-12 CPU(s) per rank (rank 0: CPUs 0-11)");
  CpuBinding unbound{96, 96, "0-95"};
  EXPECT_EQ(describe_cpu_binding(unbound, 96, 96, false), "ranks not bound: each may run on all 96 CPUs of its node");
}

// The real affinity mask: bound to one CPU, the process sees one.
TEST(CpuBinding, ReadsTheProcessAffinityMask) {
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof saved, &saved), 0);
  const CpuBinding before = current_cpu_binding();
  EXPECT_EQ(before.allowed, CPU_COUNT(&saved));
  if (before.online < 2) GTEST_SKIP() << "one CPU online: nothing to bind to fewer";
  int first = 0;
  while (!CPU_ISSET(first, &saved)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
  const CpuBinding pinned = current_cpu_binding();
  ASSERT_EQ(sched_setaffinity(0, sizeof saved, &saved), 0);
  EXPECT_EQ(pinned.allowed, 1);
  EXPECT_TRUE(pinned.bound());
  EXPECT_EQ(pinned.cpu_list, std::to_string(first));
  EXPECT_EQ(cores_for_rank(pinned, 1), 1);
}

}  // namespace
}  // namespace ftrain
