// Range checks of an op's integer inputs (token ids, targets) on the CUDA
// device, reported without a host round trip per op.
//
// The host backend checks these inputs before it touches memory and throws at
// once. On a GPU the same check would cost a device -> host copy and a stream
// synchronisation in every op that reads token ids (8 per micro-step for a
// Llama: embedding forward and backward, the loss head's forward and
// backward, each with its recompute), so instead:
//  * the op enqueues a check kernel that atomicMin's the key of its smallest
//    bad row (row << 32 | the value's bits: the smallest row, with its value)
//    into a device record, one slot per checking op, and goes on (an invalid
//    id is never used as an index: the kernels skip it);
//  * the record is read where the host waits for the stream anyway
//    (CudaStream::synchronize: the log interval's loss and gradient norm, an
//    evaluation, a checkpoint), and a set slot is thrown as the error the
//    host would have thrown, naming the op, the value and its row, then
//    cleared.
// One record per process (a rank drives one GPU). This header is the key
// arithmetic and the message, plain C++ (tests/unit/cuda/
// test_input_check_record.cpp); the kernel and the read are input_checks.cu
// (declared in kernels.hpp).
#pragma once

#include <cstdint>
#include <string>

#include "base/hd.hpp"

namespace ftrain::cuda {

// One slot per op that checks, in the order a training step runs them.
// The *_rows / *_slice_* ops are tensor parallelism's vocabulary-parallel
// ones: their ids are checked against the whole vocabulary.
enum class InputCheck : int {
  embedding_forward,
  embedding_forward_rows,
  cross_entropy_forward,
  cross_entropy_slice_forward,
  cross_entropy_backward,
  cross_entropy_slice_backward,
  embedding_backward,
  count
};

// Targets may also be the ignore index (-100); token ids may not.
FTRAIN_HD bool input_check_allows_ignore_index(InputCheck c) {
  return c == InputCheck::cross_entropy_forward || c == InputCheck::cross_entropy_backward ||
         c == InputCheck::cross_entropy_slice_forward || c == InputCheck::cross_entropy_slice_backward;
}
inline constexpr int kInputChecks = static_cast<int>(InputCheck::count);

// A slot with no bad input: every byte kNoBadInputByte, so that a slot is
// emptied by cudaMemsetAsync on the stream (no host buffer, no synchronous
// copy inside a training step).
inline constexpr unsigned char kNoBadInputByte = 0x7f;
inline constexpr long long kNoBadInput = 0x7f7f7f7f7f7f7f7fLL;
// Rows a check may key: below this, every key stays below kNoBadInput.
inline constexpr std::int64_t kMaxCheckedRows = 0x7f7f7f7fLL;

// The key of a bad value at `row` (0 <= row < kMaxCheckedRows, so that no
// key reaches kNoBadInput): keys order by row first, so the smallest key is
// the first bad row, and it carries the value.
FTRAIN_HD long long bad_input_key(std::int64_t row, std::int32_t value) {
  return static_cast<long long>((static_cast<std::uint64_t>(row) << 32) |
                                static_cast<std::uint64_t>(static_cast<std::uint32_t>(value)));
}
inline std::int64_t bad_input_row(long long key) { return static_cast<std::int64_t>(static_cast<std::uint64_t>(key) >> 32); }
inline std::int32_t bad_input_value(long long key) {
  return static_cast<std::int32_t>(static_cast<std::uint32_t>(static_cast<std::uint64_t>(key) & 0xffffffffu));
}

inline const char* input_check_op(InputCheck c) {
  switch (c) {
    case InputCheck::embedding_forward: return "embedding_forward";
    case InputCheck::embedding_forward_rows: return "embedding_forward_rows";
    case InputCheck::cross_entropy_slice_forward: return "cross_entropy_slice_forward";
    case InputCheck::cross_entropy_slice_backward: return "cross_entropy_slice_backward";
    case InputCheck::embedding_backward: return "embedding_backward";
    case InputCheck::cross_entropy_forward: return "cross_entropy_forward";
    case InputCheck::cross_entropy_backward: return "cross_entropy_backward";
    case InputCheck::count: break;
  }
  return "unknown input check";
}

// The error for slot `c` holding `key` (not kNoBadInput); `bound` is the
// vocabulary the op checked against (ids and targets must be below it).
inline std::string describe_bad_input(InputCheck c, long long key, std::int64_t bound) {
  const std::string value = std::to_string(bad_input_value(key)), row = std::to_string(bad_input_row(key));
  const std::string where = " (found by the device range check; reported at the first synchronisation after it, "
                            "so in one of the micro-steps since the last loss or log line)";
  if (input_check_allows_ignore_index(c))
    return std::string(input_check_op(c)) + ": target " + value + " at row " + row + " is outside [0, " +
           std::to_string(bound) + ") and is not the ignore index -100" + where;
  return std::string(input_check_op(c)) + ": token " + value + " at row " + row +
         " is outside the embedding table (valid ids 0.." + std::to_string(bound - 1) + ")" + where;
}

}  // namespace ftrain::cuda
