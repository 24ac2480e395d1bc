# ftrain_component(NAME DEPS ... [INCLUDES dir...])
# One engine concern = one folder src/NAME, compiled once as an object library
# ftrain_NAME_objects. Two things are made from those objects:
#  * ftrain_NAME, a static archive that tests link: a half-finished folder
#    cannot break unrelated tests, and a test pulls in only what it uses;
#  * libftrain.so (top-level CMakeLists), made of every component's objects,
#    which the executable and the plugins share.
set(FTRAIN_COMPONENT_TARGETS "" CACHE INTERNAL "")
function(ftrain_component name)
  cmake_parse_arguments(ARG "" "" "DEPS;INCLUDES" ${ARGN})
  file(GLOB _sources CONFIGURE_DEPENDS
    ${PROJECT_SOURCE_DIR}/src/${name}/*.cpp
    ${PROJECT_SOURCE_DIR}/src/${name}/host/*.cpp)
  if(NOT _sources)
    # A folder with headers only still gets a library, so dependents link
    # the same way whatever the folder holds.
    set(_empty ${CMAKE_BINARY_DIR}/generated/empty_${name}.cpp)
    file(WRITE ${_empty} "// ftrain_${name} has no compiled sources yet\n")
    set(_sources ${_empty})
  endif()
  add_library(ftrain_${name}_objects OBJECT ${_sources})
  target_include_directories(ftrain_${name}_objects PUBLIC ${PROJECT_SOURCE_DIR}/src ${ARG_INCLUDES})
  target_link_libraries(ftrain_${name}_objects PUBLIC ${ARG_DEPS})
  target_compile_options(ftrain_${name}_objects PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra>)

  add_library(ftrain_${name} STATIC $<TARGET_OBJECTS:ftrain_${name}_objects>)
  target_include_directories(ftrain_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src ${ARG_INCLUDES})
  target_link_libraries(ftrain_${name} PUBLIC ${ARG_DEPS})
  set(FTRAIN_COMPONENT_TARGETS ${FTRAIN_COMPONENT_TARGETS} ftrain_${name} CACHE INTERNAL "")
endfunction()
