# The instruction set the host kernels (src/kernels) are compiled for.
# FTRAIN_HOST_ISA:
#   native    (default) the build machine's: -march=native. What HPC codes
#             built on the machine that runs them do (GROMACS' GMX_SIMD=AUTO);
#             the element-wise kernels (AdamW, SwiGLU, RMSNorm, bf16
#             widening and rounding, cross entropy) vectorise to AVX-512 or
#             AVX2 instead of SSE2.
#   portable  the x86-64 baseline (SSE2): a binary for any x86-64 CPU.
#   <march>   any -march value, e.g. x86-64-v3 for a cluster whose login
#             node differs from its compute nodes.
# Results do not depend on the choice, bit for bit: every C++ file is built
# with -ffp-contract=off (no fused multiply-add contraction, which would round
# differently on CPUs with FMA) and without -ffast-math, so a wider vector
# does the same IEEE operations as a narrower one. The kernels also get
# -fno-math-errno: sqrt is exact either way, but errno handling keeps it from
# vectorising. A binary started on a CPU that lacks what it was built for
# stops with an error naming this option (src/kernels/host_isa.cpp) instead
# of dying on an illegal instruction.
set(FTRAIN_HOST_ISA "native" CACHE STRING "Host kernels' instruction set: native, portable, or a -march value")

add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off>)

set(FTRAIN_HOST_ISA_FLAGS -fno-math-errno)
if(NOT FTRAIN_HOST_ISA STREQUAL "portable" AND CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  list(APPEND FTRAIN_HOST_ISA_FLAGS -march=${FTRAIN_HOST_ISA})
  include(CheckCXXCompilerFlag)
  check_cxx_compiler_flag(-march=${FTRAIN_HOST_ISA} FTRAIN_HOST_ISA_ACCEPTED_${FTRAIN_HOST_ISA})
  if(NOT FTRAIN_HOST_ISA_ACCEPTED_${FTRAIN_HOST_ISA})
    message(FATAL_ERROR "FTRAIN_HOST_ISA=${FTRAIN_HOST_ISA}: the compiler refuses -march=${FTRAIN_HOST_ISA} "
                        "(use native, portable, or a -march value such as x86-64-v3)")
  endif()
endif()
message(STATUS "ftrain: host kernels built for FTRAIN_HOST_ISA=${FTRAIN_HOST_ISA} (${FTRAIN_HOST_ISA_FLAGS})")


# The CPU features those flags let the compiler use (its predefined macros),
# for the start-up check: "avx512f,avx2,...". The check's own file is built
# for the baseline so that it can run on the CPU it refuses.
set(FTRAIN_HOST_ISA_FEATURES "")
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} ${FTRAIN_HOST_ISA_FLAGS} -dM -E -x c++ /dev/null
                  OUTPUT_VARIABLE _ftrain_isa_macros RESULT_VARIABLE _ftrain_isa_rc ERROR_QUIET)
  if(_ftrain_isa_rc EQUAL 0)
    # macro -> the name __builtin_cpu_supports knows it by
    foreach(_pair IN ITEMS __SSE4_2__:sse4.2 __AVX__:avx __AVX2__:avx2 __FMA__:fma __BMI2__:bmi2
                           __AVX512F__:avx512f __AVX512BW__:avx512bw __AVX512VL__:avx512vl __AVX512DQ__:avx512dq
                           __AVX512BF16__:avx512bf16)
      string(REPLACE ":" ";" _pair "${_pair}")
      list(GET _pair 0 _macro)
      list(GET _pair 1 _feature)
      if(_ftrain_isa_macros MATCHES "#define ${_macro} 1")
        list(APPEND FTRAIN_HOST_ISA_FEATURES ${_feature})
      endif()
    endforeach()
  endif()
endif()
string(REPLACE ";" "," FTRAIN_HOST_ISA_FEATURES "${FTRAIN_HOST_ISA_FEATURES}")

# ftrain_host_isa(TARGET): the kernels' flags on TARGET's C++ sources, and the
# option's value for the run header and the start-up check.
function(ftrain_host_isa target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${FTRAIN_HOST_ISA_FLAGS}>)
  target_compile_definitions(${target} PRIVATE FTRAIN_HOST_ISA_NAME="${FTRAIN_HOST_ISA}"
                                                FTRAIN_HOST_ISA_FEATURES="${FTRAIN_HOST_ISA_FEATURES}")
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
    set_source_files_properties(${PROJECT_SOURCE_DIR}/src/kernels/host_isa.cpp
                                TARGET_DIRECTORY ${target} PROPERTIES COMPILE_OPTIONS -march=x86-64)
  endif()
endfunction()
