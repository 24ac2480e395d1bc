# Finds Kokkos and repairs Debian 12's packaging.
#
# Debian's libtrilinos-kokkos-dev (Kokkos 3.4, Serial backend only) exports
# Kokkos::kokkos with INTERFACE_INCLUDE_DIRECTORIES=/usr/lib/include, a path
# that does not exist, so any target linking it fails to generate. The headers
# really live next to KokkosCore_config.h. A site Kokkos (e.g. built with
# OpenMP) has a correct path and is left untouched.
find_package(Kokkos REQUIRED)

if(TARGET Kokkos::kokkos)
  get_target_property(_ft_kokkos_target Kokkos::kokkos ALIASED_TARGET)
  if(NOT _ft_kokkos_target)
    set(_ft_kokkos_target Kokkos::kokkos)
  endif()
  get_target_property(_ft_kokkos_incs ${_ft_kokkos_target} INTERFACE_INCLUDE_DIRECTORIES)
  set(_ft_kokkos_good_incs "")
  set(_ft_kokkos_repaired OFF)
  foreach(_dir IN LISTS _ft_kokkos_incs)
    if(_dir MATCHES "^\\$<" OR EXISTS "${_dir}")
      list(APPEND _ft_kokkos_good_incs "${_dir}")
    else()
      set(_ft_kokkos_repaired ON)
    endif()
  endforeach()
  if(_ft_kokkos_repaired OR NOT _ft_kokkos_incs)
    find_path(FTRAIN_KOKKOS_INCLUDE_DIR KokkosCore_config.h
      HINTS ${Kokkos_INCLUDE_DIRS} PATH_SUFFIXES trilinos REQUIRED)
    list(APPEND _ft_kokkos_good_incs "${FTRAIN_KOKKOS_INCLUDE_DIR}")
    set_target_properties(${_ft_kokkos_target} PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${_ft_kokkos_good_incs}")
    message(STATUS "ftrain: repaired Kokkos include dir -> ${FTRAIN_KOKKOS_INCLUDE_DIR}")
  endif()
else()
  message(FATAL_ERROR "ftrain: find_package(Kokkos) gave no Kokkos::kokkos target")
endif()
message(STATUS "ftrain: Kokkos ${Kokkos_VERSION}, devices: ${Kokkos_DEVICES}")
