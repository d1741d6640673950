# SPDX-License-Identifier: MIT
# Installs the build tree into PREFIX, then configures and builds SOURCE_DIR against it (and
# PREFIX_PATH, where the build found its dependencies).
file(REMOVE_RECURSE "${PREFIX}" "${OUT_DIR}")
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${PREFIX}"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed: ${rc}")
endif()
if(EXISTS "${PREFIX}/include/hiredis" OR EXISTS "${PREFIX}/include/streamq/hiredis_compat.hpp")
  message(FATAL_ERROR "private headers were installed")
endif()
file(GLOB_RECURSE public_headers "${PREFIX}/include/streamq/*.hpp")
foreach(header IN LISTS public_headers)
  file(STRINGS "${header}" hits REGEX "hiredis")
  if(hits)
    message(FATAL_ERROR "${header} mentions hiredis")
  endif()
endforeach()
# PREFIX_PATH: the streamq build's CMAKE_PREFIX_PATH, '|'-separated.
string(REPLACE "|" ";" prefix_path "${PREFIX_PATH}")
execute_process(COMMAND "${CMAKE_COMMAND}" -S "${SOURCE_DIR}" -B "${OUT_DIR}"
                "-DCMAKE_PREFIX_PATH=${PREFIX};${prefix_path}" "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
                "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring the package consumer failed: ${rc}")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" --build "${OUT_DIR}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the package consumer failed: ${rc}")
endif()
