// The record of the CUDA backend's device range checks
// (kernels/cuda/input_check_record.hpp), without a GPU: the key of a bad id
// keeps the smallest row with its value under an integer min (what the
// kernels' atomicMin computes), "none" is above every key, and the message
// names the op, the value, the row and the valid range, as the host's
// immediate error does. The kernels and the read at synchronisation are
// checked on a GPU (gpu_test_cuda_ops: BadIdsAreReportedAtTheNextSynchronisation).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/input_check_record.hpp"

using namespace ftrain::cuda;

TEST(InputCheckRecord, TheSmallestKeyIsTheFirstBadRowWithItsValue) {
  // Bad values at rows 9, 4 (negative), 7, 4 is the first; values of any sign.
  const std::vector<long long> keys{bad_input_key(9, 70000), bad_input_key(4, -3), bad_input_key(7, 64),
                                    bad_input_key(kMaxCheckedRows - 1, 2147483647)};
  const long long first = *std::min_element(keys.begin(), keys.end());
  EXPECT_EQ(bad_input_row(first), 4);
  EXPECT_EQ(bad_input_value(first), -3);
  // Rows below kMaxCheckedRows (launch_input_range_check refuses more ids):
  // the largest key, the last row with value -1, stays below the empty
  // slot's, whose bytes are all kNoBadInputByte (a memset empties a slot).
  long long memset_slot = 0;
  std::memset(&memset_slot, kNoBadInputByte, sizeof memset_slot);
  EXPECT_EQ(memset_slot, kNoBadInput);
  EXPECT_LT(bad_input_key(kMaxCheckedRows - 1, -1), kNoBadInput);
  for (const std::int64_t row : {std::int64_t{0}, std::int64_t{1}, std::int64_t{123456}, kMaxCheckedRows - 1})
    for (const std::int32_t value : {0, -1, -100, 64, 2147483647, -2147483647 - 1}) {
      const long long key = bad_input_key(row, value);
      EXPECT_EQ(bad_input_row(key), row);
      EXPECT_EQ(bad_input_value(key), value);
      EXPECT_LT(key, kNoBadInput) << "a recorded key must be below the empty slot's";
      EXPECT_GE(key, 0) << "keys compare as signed 64-bit integers (atomicMin on long long)";
    }
  // A later row never wins over an earlier one, whatever the values.
  EXPECT_LT(bad_input_key(3, 2147483647), bad_input_key(4, -2147483647 - 1));
}

TEST(InputCheckRecord, MessagesNameTheOpTheValueAndTheRow) {
  const std::string e = describe_bad_input(InputCheck::embedding_forward, bad_input_key(12, 70000), 64);
  for (const char* part : {"embedding_forward", "token 70000", "row 12", "0..63"})
    EXPECT_NE(e.find(part), std::string::npos) << part << " in: " << e;
  const std::string b = describe_bad_input(InputCheck::embedding_backward, bad_input_key(0, -1), 64);
  EXPECT_NE(b.find("embedding_backward: token -1 at row 0"), std::string::npos) << b;
  const std::string t = describe_bad_input(InputCheck::cross_entropy_forward, bad_input_key(3, 99), 64);
  for (const char* part : {"cross_entropy_forward", "target 99", "row 3", "[0, 64)", "ignore index -100"})
    EXPECT_NE(t.find(part), std::string::npos) << part << " in: " << t;
  EXPECT_NE(describe_bad_input(InputCheck::cross_entropy_backward, bad_input_key(1, 64), 64).find("cross_entropy_backward"),
            std::string::npos);
  // Tensor parallelism's vocabulary-parallel ops: their own names, checked against the whole vocabulary.
  const std::string r = describe_bad_input(InputCheck::embedding_forward_rows, bad_input_key(2, 128), 128);
  for (const char* part : {"embedding_forward_rows: token 128 at row 2", "0..127"})
    EXPECT_NE(r.find(part), std::string::npos) << part << " in: " << r;
  for (const InputCheck c : {InputCheck::cross_entropy_slice_forward, InputCheck::cross_entropy_slice_backward}) {
    const std::string m = describe_bad_input(c, bad_input_key(5, -7), 128);
    for (const std::string part : {std::string(input_check_op(c)) + ": target -7 at row 5", std::string("[0, 128)")})
      EXPECT_NE(m.find(part), std::string::npos) << part << " in: " << m;
  }
}

TEST(InputCheckRecord, OnlyTargetsMayBeTheIgnoreIndex) {
  EXPECT_TRUE(input_check_allows_ignore_index(InputCheck::cross_entropy_forward));
  EXPECT_TRUE(input_check_allows_ignore_index(InputCheck::cross_entropy_backward));
  EXPECT_FALSE(input_check_allows_ignore_index(InputCheck::embedding_forward));
  EXPECT_FALSE(input_check_allows_ignore_index(InputCheck::embedding_backward));
  EXPECT_TRUE(input_check_allows_ignore_index(InputCheck::cross_entropy_slice_forward));
  EXPECT_TRUE(input_check_allows_ignore_index(InputCheck::cross_entropy_slice_backward));
  EXPECT_FALSE(input_check_allows_ignore_index(InputCheck::embedding_forward_rows));
  for (int c = 0; c < kInputChecks; ++c)
    EXPECT_NE(std::string(input_check_op(static_cast<InputCheck>(c))), "unknown input check") << c;
}
