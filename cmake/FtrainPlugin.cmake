# ftrain_add_plugin(NAME SOURCES...): a model plugin as a MODULE library
# ftrain_NAME.so exporting only the C entry point (linker version script).
# The same function ships in the installed package for out-of-tree plugins
# (share/doc/plugin-sdk.md):
#  * in the ftrain tree (FTRAIN_BUILD_PLUGIN_DIR set) the plugin lands in the
#    build tree's plugin directory and installs to <libdir>/ftrain/plugins;
#  * out of tree (FTRAIN_BUILD_PLUGIN_DIR unset) it stays in the caller's
#    binary directory (point FTRAIN_PLUGIN_PATH there) and gets no install
#    rule: the caller decides where it goes (the loader also searches
#    ${ftrain_PLUGIN_INSTALL_DIR}, the installed ftrain's plugin directory).
#    The plugin loader tests rely on this to keep their plugins out of the
#    install.

function(ftrain_add_plugin name)
  add_library(ftrain_plugin_${name} MODULE ${ARGN})
  if(TARGET ftrain::ftrain)
    target_link_libraries(ftrain_plugin_${name} PRIVATE ftrain::ftrain)
  else()
    target_link_libraries(ftrain_plugin_${name} PRIVATE ftrain)
  endif()
  # The SDK headers are C++20, and Debian's Kokkos refuses GNU extensions;
  # set here so an out-of-tree project need not know either.
  target_compile_features(ftrain_plugin_${name} PRIVATE cxx_std_20)
  set(_script ${CMAKE_CURRENT_BINARY_DIR}/ftrain_plugin_${name}.map)
  file(WRITE ${_script} "{ global: ftrain_plugin_entry; local: *; };\n")
  target_link_options(ftrain_plugin_${name} PRIVATE "LINKER:--version-script=${_script}")
  set_target_properties(ftrain_plugin_${name} PROPERTIES
    OUTPUT_NAME ftrain_${name} PREFIX ""
    CXX_EXTENSIONS OFF
    CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
    # <libdir>/ftrain/plugins -> <libdir>: libftrain.so resolves even when
    # the plugin is dlopened by a host other than bin/ftrain.
    INSTALL_RPATH "$ORIGIN/../..")
  if(DEFINED FTRAIN_BUILD_PLUGIN_DIR)
    set_target_properties(ftrain_plugin_${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${FTRAIN_BUILD_PLUGIN_DIR})
    install(TARGETS ftrain_plugin_${name} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/ftrain/plugins)
  endif()
endfunction()
