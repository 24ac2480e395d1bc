# Test helpers (after Cabana's cmake/test_harness).
#
# ftrain_unit_test(NAME SOURCE LIBS...)         gtest executable, label unit
# add_mpi_test(NAME TARGET NP n1 n2 ... [ARGS ...] [LABELS ...])
#   registers NAME_np_<n> running TARGET under mpirun --oversubscribe -np n.
set(FTRAIN_MPIRUN_FLAGS --oversubscribe)
execute_process(COMMAND id -u OUTPUT_VARIABLE _ftrain_uid OUTPUT_STRIP_TRAILING_WHITESPACE)
if(_ftrain_uid STREQUAL "0")
  list(APPEND FTRAIN_MPIRUN_FLAGS --allow-run-as-root)
endif()

function(ftrain_unit_test name source)
  add_executable(${name} ${source})
  target_link_libraries(${name} PRIVATE ${ARGN} ftrain_test_main)
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS unit ENVIRONMENT "OMPI_MCA_rmaps_base_oversubscribe=1")
endfunction()

function(add_mpi_test name target)
  cmake_parse_arguments(ARG "" "" "NP;ARGS;LABELS" ${ARGN})
  if(NOT ARG_LABELS)
    set(ARG_LABELS mpi)
  endif()
  foreach(np IN LISTS ARG_NP)
    add_test(NAME ${name}_np_${np}
      COMMAND ${MPIEXEC_EXECUTABLE} ${FTRAIN_MPIRUN_FLAGS} ${MPIEXEC_NUMPROC_FLAG} ${np}
              $<TARGET_FILE:${target}> ${ARG_ARGS})
    set_tests_properties(${name}_np_${np} PROPERTIES LABELS "${ARG_LABELS}" PROCESSORS ${np})
  endforeach()
endfunction()
