// Host GEMM providers: which library multiplies which precision.
//
// Every host matmul of the linear layers goes through these two entry points,
// so the choice of library is made in one place and the run header can say
// it (describe()):
//  * f32 x f32 -> f32: OpenBLAS sgemm. oneDNN 2.6's f32 matmul was measured
//    at about half of OpenBLAS's speed on this project's machines (AVX-512
//    EPYC; share/doc/performance.md), so the rule is "f32 is OpenBLAS's".
//    This also keeps every f32 golden curve bit-identical.
//  * bf16 x bf16 -> f32 accumulate: oneDNN matmul where the CPU multiplies
//    BF16 natively (AVX512-BF16 or AMX); it consumes exactly the bf16 values
//    the tensors hold, like cuBLASLt's BF16 GEMM on the GPU. Elsewhere (no
//    oneDNN in the build, a CPU without BF16 instructions, or
//    FTRAIN_HOST_GEMM=openblas) callers widen to f32 and use sgemm: the
//    header says so, it is never a silent switch.
// Matrices are row-major; op(A) is [m, k], op(B) is [k, n], C is [m, n].
// C = op(A) . op(B) + beta * C with beta 0 (write) or 1 (accumulate, the
// parameter-gradient convention of ops.hpp).
#pragma once

#include <cstdint>
#include <string>

#include "base/dtype.hpp"

namespace ftrain::host::gemm {

enum class Op : std::uint8_t { none, transpose };

struct Dims {
  Op op_a = Op::none, op_b = Op::none;
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t lda = 0, ldb = 0, ldc = 0;  // leading dimensions of A, B, C as stored (row-major)
};

void f32(const Dims& d, const float* a, const float* b, float beta, float* c);

// True when bf16() runs on BF16 hardware through oneDNN. Decided once per
// process (CPU ISA, build, FTRAIN_HOST_GEMM, use_widened_bf16) and stable
// afterwards.
bool bf16_native();
// From now on bf16_native() is false: callers widen to f32 and use sgemm, on
// every CPU. `why` (a string literal: it is kept) ends up in describe(). For
// a run whose results must not depend on whether the CPU multiplies BF16
// natively: oneDNN's BF16 kernels (AVX512-BF16, AMX) sum in another order
// than sgemm does, and precision fp8 turns that last-bit difference into a
// visible one (share/doc/reproducibility.md). Must come before the first
// bf16 GEMM of the process (checked).
void use_widened_bf16(const char* why);
// Requires bf16_native().
void bf16(const Dims& d, const ftrain::bf16* a, const ftrain::bf16* b, float beta, float* c);

// C = op(A) . op(B) stored as bf16 (beta 0): oneDNN rounds its f32
// accumulator to nearest even on the way out, as cuBLASLt's BF16 GEMM with a
// bf16 D does, instead of a f32 C that the caller rounds in a second pass
// (which also pushed the bf16 result out of the cache before its consumer
// read it). Requires bf16_native().
void bf16_rounded(const Dims& d, const ftrain::bf16* a, const ftrain::bf16* b, ftrain::bf16* c);

// bf16() and bf16_rounded() calls served so far (tests prove the oneDNN route was taken).
std::uint64_t bf16_calls();
// The bf16_rounded() ones among them.
std::uint64_t bf16_rounded_calls();

// One line for the run header: "f32 OpenBLAS (...); bf16 oneDNN 2.6.3 (avx512_core_bf16)".
std::string describe();

// Threads for oneDNN's OpenMP runtime (the rank's share of cores), set where
// OpenBLAS's are; a no-op when the user set OMP_NUM_THREADS or there is no oneDNN.
void set_threads(int threads);

}  // namespace ftrain::host::gemm
