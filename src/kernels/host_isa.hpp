// The instruction set the host kernels were compiled for (CMake option
// FTRAIN_HOST_ISA, cmake/FtrainHostIsa.cmake), for the run header.
#pragma once

#include <string>

namespace ftrain::host_isa {

// e.g. "native (avx512f avx512bw avx512vl avx512bf16 avx2 fma ...)", or
// "portable (x86-64 baseline)".
std::string describe();

// The features the build uses that this CPU lacks (empty when it can run).
std::string missing_features();

}  // namespace ftrain::host_isa
