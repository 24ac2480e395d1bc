# Installs bin/ftrain, lib/libftrain.so, lib/ftrain/plugins/*.so, the SDK
# headers (include/ftrain/...) and the CMake package (find_package(ftrain)).
include(CMakePackageConfigHelpers)

install(TARGETS ftrain_exe ftrain_prep ftrain_convert RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The include dir (<prefix>/include/ftrain, so that "core/tensor.hpp"
# resolves) comes from the target's $<INSTALL_INTERFACE:...>.
install(TARGETS ftrain EXPORT ftrainTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})

# The public SDK: what a plugin may include, as the layer table
# (cmake/layering.txt) lists it: whole folders without their backend code
# (host/, cuda/), and single files of folders that are not SDK otherwise.
# Nothing else under src/. tests/layering checks that plugins include
# nothing else and that these headers include only each other.
foreach(_dir IN LISTS FTRAIN_SDK_FOLDERS)
  install(DIRECTORY src/${_dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ftrain/${_dir}
    FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h" PATTERN "host" EXCLUDE PATTERN "cuda" EXCLUDE)
endforeach()
foreach(_file IN LISTS FTRAIN_SDK_FILES)
  get_filename_component(_file_dir ${_file} DIRECTORY)
  install(FILES src/${_file} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ftrain/${_file_dir})
endforeach()

install(EXPORT ftrainTargets NAMESPACE ftrain:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ftrain)
configure_package_config_file(cmake/ftrainConfig.cmake.in ${CMAKE_BINARY_DIR}/ftrainConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ftrain)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/ftrainConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/ftrainConfig.cmake ${CMAKE_BINARY_DIR}/ftrainConfigVersion.cmake
  cmake/FtrainKokkos.cmake cmake/FtrainPlugin.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ftrain)
