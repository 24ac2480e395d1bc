# ftrain_component(NAME DEPS ... [INCLUDES dir...])
# One engine concern = one folder src/NAME, compiled once as an object library
# ftrain_NAME_objects. Two things are made from those objects:
#  * ftrain_NAME, a static archive that tests link: a half-finished folder
#    cannot break unrelated tests, and a test pulls in only what it uses;
#  * libftrain.so (top-level CMakeLists), made of every component's objects,
#    which the executable and the plugins share.
#
# Which components a component links comes from the layer table
# (cmake/layering.txt), the same table the layering test checks every
# #include against; DEPS names only outside libraries. So the link graph
# cannot drift from the include rules.
set(FTRAIN_COMPONENT_TARGETS "" CACHE INTERNAL "")
set(FTRAIN_LAYERING_TABLE ${CMAKE_CURRENT_LIST_DIR}/layering.txt)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${FTRAIN_LAYERING_TABLE})

# The table: FTRAIN_LAYER_FOLDERS, FTRAIN_LAYER_BUILDS_ON_<folder> (folder
# with / as _), FTRAIN_SDK_FOLDERS, FTRAIN_SDK_FILES.
set(FTRAIN_LAYER_FOLDERS "")
set(FTRAIN_SDK_FOLDERS "")
set(FTRAIN_SDK_FILES "")
file(STRINGS ${FTRAIN_LAYERING_TABLE} _ftrain_layer_lines)
foreach(_line IN LISTS _ftrain_layer_lines)
  string(REGEX REPLACE "#.*" "" _line "${_line}")
  string(STRIP "${_line}" _line)
  if(_line STREQUAL "")
    continue()
  endif()
  string(REGEX REPLACE "[ \t]+" ";" _words "${_line}")
  list(POP_FRONT _words _head)
  if(_head STREQUAL "sdk-folder")
    list(APPEND FTRAIN_SDK_FOLDERS ${_words})
  elseif(_head STREQUAL "sdk-file")
    list(APPEND FTRAIN_SDK_FILES ${_words})
  elseif(_head STREQUAL "crossing")
    # Read by the layering test only.
  else()
    list(APPEND FTRAIN_LAYER_FOLDERS ${_head})
    string(REPLACE "/" "_" _key "${_head}")
    set(FTRAIN_LAYER_BUILDS_ON_${_key} ${_words})
  endif()
endforeach()

function(ftrain_component name)
  cmake_parse_arguments(ARG "" "" "DEPS;INCLUDES" ${ARGN})
  if(NOT name IN_LIST FTRAIN_LAYER_FOLDERS)
    message(FATAL_ERROR "ftrain_component(${name}): src/${name} is not in the layer table "
                        "${FTRAIN_LAYERING_TABLE}; add it with the folders it builds on")
  endif()
  foreach(_dep IN LISTS ARG_DEPS)
    if(_dep MATCHES "^ftrain_")
      message(FATAL_ERROR "ftrain_component(${name}): DEPS names ${_dep}; the components it links come "
                          "from the layer table ${FTRAIN_LAYERING_TABLE}, DEPS names outside libraries only")
    endif()
  endforeach()
  # Nested table folders (backends/cuda) are libraries loaded at run time and
  # built on their own (cmake/FtrainCuda.cmake), not components to link.
  set(_layer_deps "")
  foreach(_below IN LISTS FTRAIN_LAYER_BUILDS_ON_${name})
    if(NOT _below MATCHES "/")
      list(APPEND _layer_deps ftrain_${_below})
    endif()
  endforeach()

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
  target_link_libraries(ftrain_${name}_objects PUBLIC ${_layer_deps} ${ARG_DEPS})
  target_compile_options(ftrain_${name}_objects PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra>)

  add_library(ftrain_${name} STATIC $<TARGET_OBJECTS:ftrain_${name}_objects>)
  target_include_directories(ftrain_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src ${ARG_INCLUDES})
  target_link_libraries(ftrain_${name} PUBLIC ${_layer_deps} ${ARG_DEPS})
  set(FTRAIN_COMPONENT_TARGETS ${FTRAIN_COMPONENT_TARGETS} ftrain_${name} CACHE INTERNAL "")
endfunction()
