# oneDNN (Debian's libdnnl-dev) for host BF16 GEMMs (src/kernels/host/gemm.cpp).
# FTRAIN_ONEDNN: AUTO uses it when found, ON makes its absence a configure
# error, OFF never uses it. Sets FTRAIN_HAVE_ONEDNN and FTRAIN_ONEDNN_LIBRARIES
# (oneDNN plus the OpenMP runtime it threads with, whose thread count ftrain
# sets to the rank's share of cores).
set(FTRAIN_HAVE_ONEDNN OFF)
set(FTRAIN_ONEDNN_LIBRARIES "")
if(NOT FTRAIN_ONEDNN STREQUAL "OFF")
  if(FTRAIN_ONEDNN STREQUAL "ON")
    find_package(dnnl CONFIG REQUIRED)
  else()
    # Debian's dnnl-config.cmake does find_package(OpenCL REQUIRED) (its GPU
    # runtime is OCL), which stops configuring even under QUIET: look first,
    # so AUTO without ocl-icd-opencl-dev falls back instead of failing.
    find_package(OpenCL QUIET)
    if(OpenCL_FOUND)
      find_package(dnnl CONFIG QUIET)
    else()
      message(STATUS "ftrain: OpenCL headers missing (apt-get install ocl-icd-opencl-dev), so oneDNN's CMake config cannot load")
    endif()
  endif()
  find_package(OpenMP COMPONENTS CXX)
  if(dnnl_FOUND AND OpenMP_CXX_FOUND)
    set(FTRAIN_HAVE_ONEDNN ON)
    set(FTRAIN_ONEDNN_LIBRARIES DNNL::dnnl ${OpenMP_CXX_LIBRARIES})
    message(STATUS "ftrain: host BF16 GEMMs through oneDNN ${dnnl_VERSION}")
  elseif(FTRAIN_ONEDNN STREQUAL "ON")
    message(FATAL_ERROR "FTRAIN_ONEDNN=ON but oneDNN or OpenMP was not found (apt-get install libdnnl-dev)")
  else()
    message(STATUS "ftrain: oneDNN not found; host BF16 GEMMs widen to f32 on OpenBLAS")
  endif()
endif()
