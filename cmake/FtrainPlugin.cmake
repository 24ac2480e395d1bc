# ftrain_add_plugin(NAME SOURCES...): a model plugin as a MODULE library
# ftrain_NAME.so exporting only the C entry point (linker version script).
# The same function ships in the installed package for out-of-tree plugins.
function(ftrain_add_plugin name)
  add_library(ftrain_plugin_${name} MODULE ${ARGN})
  if(TARGET ftrain::ftrain)
    target_link_libraries(ftrain_plugin_${name} PRIVATE ftrain::ftrain)
  else()
    target_link_libraries(ftrain_plugin_${name} PRIVATE ftrain)
  endif()
  set(_script ${CMAKE_CURRENT_BINARY_DIR}/ftrain_plugin_${name}.map)
  file(WRITE ${_script} "{ global: ftrain_plugin_entry; local: *; };\n")
  target_link_options(ftrain_plugin_${name} PRIVATE "LINKER:--version-script=${_script}")
  set_target_properties(ftrain_plugin_${name} PROPERTIES
    OUTPUT_NAME ftrain_${name} PREFIX ""
    CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  if(DEFINED FTRAIN_BUILD_PLUGIN_DIR)
    set_target_properties(ftrain_plugin_${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${FTRAIN_BUILD_PLUGIN_DIR})
    install(TARGETS ftrain_plugin_${name} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/ftrain/plugins)
  endif()
endfunction()
