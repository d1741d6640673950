# SPDX-License-Identifier: MIT
# Fallback for hiredis installs without a usable CMake package (Debian bookworm's 0.14.1 ships
# only a variables-only HiredisConfig.cmake that errors without a version, and a .pc file).
# Call it only after find_package(hiredis CONFIG) failed: a nested find_package() would inherit
# the caller's version request, and hiredis >= 1.2 has a SameMajorVersion version file.
# Defines hiredis::hiredis, hiredis_VERSION and hiredis_INCLUDE_DIR (the directory that
# contains hiredis/, so sources write #include <hiredis/hiredis.h>).
include(FindPackageHandleStandardArgs)
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(PC_hiredis QUIET hiredis)
endif()

# Debian's hiredis.pc points includedir inside include/hiredis: hint its parent as well.
set(_hiredis_hints "")
foreach(_dir IN LISTS PC_hiredis_INCLUDE_DIRS PC_hiredis_INCLUDEDIR)
  get_filename_component(_parent "${_dir}" DIRECTORY)
  list(APPEND _hiredis_hints "${_dir}" "${_parent}")
endforeach()

find_path(hiredis_INCLUDE_DIR NAMES hiredis/hiredis.h HINTS ${_hiredis_hints})
find_library(hiredis_LIBRARY NAMES hiredis HINTS ${PC_hiredis_LIBRARY_DIRS} ${PC_hiredis_LIBDIR})
mark_as_advanced(hiredis_INCLUDE_DIR hiredis_LIBRARY)

if(hiredis_INCLUDE_DIR AND EXISTS "${hiredis_INCLUDE_DIR}/hiredis/hiredis.h")
  file(STRINGS "${hiredis_INCLUDE_DIR}/hiredis/hiredis.h" _hiredis_defines
       REGEX "^#define HIREDIS_(MAJOR|MINOR|PATCH) +[0-9]+")
  foreach(_part MAJOR MINOR PATCH)
    string(REGEX REPLACE ".*HIREDIS_${_part} +([0-9]+).*" "\\1" _hiredis_${_part} "${_hiredis_defines}")
  endforeach()
  set(hiredis_VERSION "${_hiredis_MAJOR}.${_hiredis_MINOR}.${_hiredis_PATCH}")
endif()

find_package_handle_standard_args(hiredis
  REQUIRED_VARS hiredis_LIBRARY hiredis_INCLUDE_DIR
  VERSION_VAR hiredis_VERSION)

if(hiredis_FOUND AND NOT TARGET hiredis::hiredis)
  add_library(hiredis::hiredis UNKNOWN IMPORTED)
  set_target_properties(hiredis::hiredis PROPERTIES
    IMPORTED_LOCATION "${hiredis_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${hiredis_INCLUDE_DIR}")
endif()
