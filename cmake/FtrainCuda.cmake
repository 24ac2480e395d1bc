# FTRAIN_CUDA=AUTO|ON|OFF. AUTO builds the CUDA backend when a toolkit is
# found; ON makes a missing toolkit a configure error (never a silent
# fallback); OFF skips CUDA. CUDA code compiles without a GPU, so CI (no GPU)
# still compiles every .cu file: a compile error is a red build.
#
# Architectures: CMAKE_CUDA_ARCHITECTURES when given, else
# FTRAIN_CUDA_ARCHITECTURES, by default 90a only (H100/H200: what the lent
# GPUs are, and one device pass keeps CI's 2-core build short). Add 80 (A100)
# and 100a (B200) with -DFTRAIN_CUDA_ARCHITECTURES="80;90a;100a"; entries the
# toolkit does not list are dropped with a message.
set(FTRAIN_HAVE_CUDA OFF)
set(FTRAIN_CUDA_ARCHITECTURES "90a" CACHE STRING "CUDA architectures of libftrain_cuda (e.g. 90a, or 80;90a;100a)")
if(NOT FTRAIN_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      execute_process(COMMAND ${CMAKE_CUDA_COMPILER} --list-gpu-arch OUTPUT_VARIABLE _ftrain_nvcc_archs ERROR_QUIET)
      set(_ftrain_archs "")
      foreach(_arch IN LISTS FTRAIN_CUDA_ARCHITECTURES)
        string(REGEX REPLACE "[af]$" "" _arch_number "${_arch}")
        if(_ftrain_nvcc_archs MATCHES "compute_${_arch_number}")
          list(APPEND _ftrain_archs ${_arch})
        else()
          message(STATUS "ftrain: nvcc does not list compute_${_arch_number}; not building sm_${_arch}")
        endif()
      endforeach()
      if(NOT _ftrain_archs)
        message(FATAL_ERROR "ftrain: none of FTRAIN_CUDA_ARCHITECTURES (${FTRAIN_CUDA_ARCHITECTURES}) is supported by ${CMAKE_CUDA_COMPILER}")
      endif()
      set(CMAKE_CUDA_ARCHITECTURES "${_ftrain_archs}")
    endif()
    enable_language(CUDA)
    # Every target's CUDA dialect is C++17 unless it says otherwise. A target
    # without CUDA_STANDARD takes its CXX_STANDARD (20 here) for CUDA, and
    # CMake 3.25 knows no C++20 flag for nvcc. The Makefile generator writes
    # flags for each language a target's objects come from, so
    # libftrain_cuda (g++ sources plus the kernels' CUDA objects) failed to
    # generate ("requires the language dialect CUDA20"); Ninja asks only per
    # source and never noticed. share/scripts/build-routes-check.sh checks it.
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(FTRAIN_HAVE_CUDA ON)
    message(STATUS "ftrain: CUDA ${CUDAToolkit_VERSION}, libftrain_cuda for architectures ${CMAKE_CUDA_ARCHITECTURES}")
  elseif(FTRAIN_CUDA STREQUAL "ON")
    message(FATAL_ERROR "ftrain: FTRAIN_CUDA=ON but no CUDA compiler was found (set CMAKE_CUDA_COMPILER)")
  else()
    message(STATUS "ftrain: no CUDA toolkit found, building the host backend only")
  endif()
endif()

# libftrain_cuda.so: the CUDA backend as its own library, loaded on demand by
# libftrain (runtime/backend_library.hpp) and never linked by it, so a
# host-only install runs without any CUDA library present. The CUDA runtime
# is linked statically (it finds the driver, libcuda, at run time: a machine
# without one gets cudaErrorInsufficientDriver, which the backend reports);
# cuBLASLt is a shared dependency, found through the RPATH.
function(ftrain_add_cuda_backend)
  # The kernels (.cu) are an object library of their own: they see only
  # src/ and the CUDA headers (never the engine's targets, whose C++20
  # requirement this CMake cannot translate for nvcc); the op table and the
  # runtime pieces (.cpp, g++) link libftrain.
  file(GLOB _kernels CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/kernels/cuda/*.cu)
  # The op kernels and their launch code are src/kernels/cuda/; the backend's
  # machinery (device binding, streams, allocator, the entry point that
  # registers them) is src/backends/cuda/.
  file(GLOB _sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/kernels/cuda/*.cpp
       ${PROJECT_SOURCE_DIR}/src/backends/cuda/*.cpp ${PROJECT_SOURCE_DIR}/src/backends/cuda/device/*.cpp)
  add_library(ftrain_cuda_kernels OBJECT ${_kernels})
  target_include_directories(ftrain_cuda_kernels PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(ftrain_cuda_kernels PRIVATE CUDA::cudart_static)
  # C++17 for the device code: CMake 3.25 cannot pass C++20 to nvcc
  # (CMAKE_CUDA_STANDARD above says so for every target); kernels/math/ and the
  # headers the kernels include are C++17. Warnings are errors, host and device. --fmad=false: kernels/math/ runs
  # the host's exact arithmetic (no contraction into fused multiply-adds).
  target_compile_options(ftrain_cuda_kernels PRIVATE
    --extended-lambda --fmad=false -Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Werror)
  set_target_properties(ftrain_cuda_kernels PROPERTIES CUDA_VISIBILITY_PRESET hidden POSITION_INDEPENDENT_CODE ON
    CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON)

  # cuDNN (graph API) for attention: part of the toolkit here and on CI.
  find_library(FTRAIN_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR})
  find_path(FTRAIN_CUDNN_INCLUDE_DIR cudnn_graph.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  if(FTRAIN_CUDNN_LIBRARY AND FTRAIN_CUDNN_INCLUDE_DIR)
    set(FTRAIN_HAVE_CUDNN ON PARENT_SCOPE)
    set(_cudnn ${FTRAIN_CUDNN_LIBRARY})
  else()
    message(STATUS "ftrain: cuDNN not found; libftrain_cuda is built without the cuDNN attention graphs")
    list(FILTER _sources EXCLUDE REGEX "cudnn_")
    set(_cudnn "")
  endif()
  # NCCL (device collectives, src/comm/nccl/): part of the toolkit here and
  # on CI. The communicator lives in this library so libftrain never links
  # NCCL (share/doc/decisions.md); without NCCL only `device_comm mpi` exists.
  find_library(FTRAIN_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
  find_path(FTRAIN_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  set(_nccl "")
  if(FTRAIN_NCCL_LIBRARY AND FTRAIN_NCCL_INCLUDE_DIR)
    set(FTRAIN_HAVE_NCCL ON PARENT_SCOPE)
    file(GLOB _nccl_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/comm/nccl/*.cpp)
    list(APPEND _sources ${_nccl_sources})
    set(_nccl ${FTRAIN_NCCL_LIBRARY})
  else()
    message(STATUS "ftrain: NCCL not found; libftrain_cuda is built without the NCCL communicator (device_comm mpi only)")
  endif()
  # The host-side sources (.cpp) are an object library too, so that the
  # cuda-api test harness (tests/cuda_api/) links the very same objects
  # against its recording stand-in of the CUDA libraries instead of the real
  # ones: the production library carries no test hook, the seam is the link.
  add_library(ftrain_cuda_sources OBJECT ${_sources})
  target_link_libraries(ftrain_cuda_sources PRIVATE ftrain CUDA::cudart_static CUDA::cublasLt)
  if(_nccl)
    target_compile_definitions(ftrain_cuda_sources PRIVATE FTRAIN_HAVE_NCCL)
    target_include_directories(ftrain_cuda_sources PRIVATE ${FTRAIN_NCCL_INCLUDE_DIR})
  endif()
  if(_cudnn)
    # The op table asks cuDNN whether it takes an attention shape (attention_backend).
    target_compile_definitions(ftrain_cuda_sources PRIVATE FTRAIN_HAVE_CUDNN)
    target_include_directories(ftrain_cuda_sources PRIVATE ${FTRAIN_CUDNN_INCLUDE_DIR})
  endif()
  target_include_directories(ftrain_cuda_sources PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(ftrain_cuda_sources PRIVATE -Wall -Wextra -Werror)
  set_target_properties(ftrain_cuda_sources PROPERTIES CXX_VISIBILITY_PRESET hidden POSITION_INDEPENDENT_CODE ON)

  add_library(ftrain_cuda SHARED $<TARGET_OBJECTS:ftrain_cuda_sources> $<TARGET_OBJECTS:ftrain_cuda_kernels>)
  target_link_libraries(ftrain_cuda PRIVATE ftrain CUDA::cudart_static CUDA::cublasLt ${_cudnn} ${_nccl})
  set_target_properties(ftrain_cuda PROPERTIES
    OUTPUT_NAME ftrain_cuda
    LINKER_LANGUAGE CXX
    CXX_VISIBILITY_PRESET hidden
    LIBRARY_OUTPUT_DIRECTORY $<TARGET_FILE_DIR:ftrain>
    INSTALL_RPATH "$ORIGIN;${CUDAToolkit_LIBRARY_DIR}"
    BUILD_RPATH "${CUDAToolkit_LIBRARY_DIR}")
  install(TARGETS ftrain_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endfunction()
