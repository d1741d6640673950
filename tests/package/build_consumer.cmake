# SPDX-License-Identifier: MIT
# Builds a project that consumes streamq, as the package tests need it. Run with cmake -P:
#   -DMODE=installed|subdirectory|fetchcontent|hiredis_mismatch|link_mismatch
#   -DOUT_DIR=<build dir of the consumer>  -DSOURCE_DIR=<tests/package>
#   -DCXX_COMPILER=... -DCXX_FLAGS=... -DBUILD_TYPE=... -DWARNING_FLAGS=<a|b|c>  -DPARENT_PREFIX_PATH=<a|b|c>
#   installed, *_mismatch: -DBUILD_DIR=<streamq build tree> -DPREFIX=<install prefix>
#   installed: -DEXPECT_CLI=0|1 -DBINDIR=<CMAKE_INSTALL_BINDIR, where the streamq command goes>
#              -DWITH_ASIO=0|1 (asio with coroutines is here: the consumer asks for the component)
#   subdirectory, fetchcontent: -DSTREAMQ_SOURCE_DIR=<streamq checkout>
#   *_mismatch: -DHIREDIS_VERSION=<the version streamq was built with>
#   link_mismatch: -DOTHER_HIREDIS=<a libhiredis of another major version>
# Lists come '|'-separated (a ';' would split the test's command line).
foreach(var MODE OUT_DIR SOURCE_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "build_consumer.cmake: ${var} is not set")
  endif()
endforeach()
string(REPLACE "|" ";" parent_prefix_path "${PARENT_PREFIX_PATH}")
string(REPLACE "|" " " warning_flags "${WARNING_FLAGS}")
file(REMOVE_RECURSE "${OUT_DIR}")

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
endfunction()

# Runs a step that must fail, with `expected` in its output.
function(run_refused what expected)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc EQUAL 0)
    message(FATAL_ERROR "${what} succeeded; it must fail with \"${expected}\":\n${out}\n${err}")
  endif()
  string(REPLACE "\n" " " flat "${out} ${err}")
  string(REGEX REPLACE " +" " " flat "${flat}")
  string(FIND "${flat}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${what} failed, but without \"${expected}\":\n${out}\n${err}")
  endif()
  message(STATUS "${what} was refused as it must be: ${expected}")
endfunction()

# The consumer's CMAKE_PREFIX_PATH goes in an initial cache file: a ';' inside a command
# argument would split it.
function(prefix_path_cache out)
  set(file "${OUT_DIR}-init.cmake")
  file(WRITE "${file}" "set(CMAKE_PREFIX_PATH \"${ARGN}\" CACHE STRING \"\")\n")
  set(${out} "-C" "${file}" PARENT_SCOPE)
endfunction()

set(flags "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}" "-DCMAKE_CXX_FLAGS=${CXX_FLAGS} ${warning_flags}"
  "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}")

if(MODE STREQUAL "installed" OR MODE MATCHES "mismatch$")
  file(REMOVE_RECURSE "${PREFIX}")
  run("cmake --install" "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${PREFIX}")
endif()

if(MODE STREQUAL "installed")
  # The streamq command is installed with the library when it was built (EXPECT_CLI=1).
  if(EXPECT_CLI)
    run("${BINDIR}/streamq --help" "${PREFIX}/${BINDIR}/streamq" --help)
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
  # The parent's prefix path comes through, so the consumer finds the hiredis streamq was
  # built with (a hiredis 1.x in a private prefix, say) rather than the system's.
  prefix_path_cache(init "${PREFIX}" ${parent_prefix_path})
  # WITH_ASIO=1 (asio with coroutines is here): find_package(... COMPONENTS asio).
  run("configuring the package consumer" "${CMAKE_COMMAND}" ${init} -S "${SOURCE_DIR}" -B "${OUT_DIR}" ${flags}
    "-DWITH_ASIO=${WITH_ASIO}")
elseif(MODE STREQUAL "subdirectory" OR MODE STREQUAL "fetchcontent")
  prefix_path_cache(init ${parent_prefix_path})
  # These compile the library again: without optimisation, which takes a third of the time
  # and tests just as well what they are for (that the project embeds, builds and runs).
  # FetchContent's is a unity build (a few source files per compiler run), which halves that
  # again. add_subdirectory's compiles each file of the library on its own, with the warning
  # flags: the test command's one check that every source file compiles with only the headers
  # it includes (its stages compile as unity builds).
  if(MODE STREQUAL "fetchcontent")
    set(unity ON)
  else()
    set(unity OFF)
  endif()
  set(flags "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}" "-DCMAKE_CXX_FLAGS=${CXX_FLAGS} ${warning_flags} -O0"
    "-DCMAKE_BUILD_TYPE=" "-DCMAKE_UNITY_BUILD=${unity}")
  run("configuring the ${MODE} consumer" "${CMAKE_COMMAND}" ${init} -S "${SOURCE_DIR}/${MODE}" -B "${OUT_DIR}"
      "-DSTREAMQ_SOURCE_DIR=${STREAMQ_SOURCE_DIR}" ${flags})
elseif(MODE STREQUAL "hiredis_mismatch")
  # A hiredis package of another major version first on the consumer's prefix path: the
  # package config must refuse it at configure time.
  string(REGEX MATCH "^[0-9]+" major "${HIREDIS_VERSION}")
  if(major STREQUAL "0")
    set(other "1.99.0")
  else()
    set(other "0.14.1")
  endif()
  set(fake "${OUT_DIR}-fake-hiredis/lib/cmake/hiredis")
  file(WRITE "${fake}/hiredis-config.cmake"
    "# A stand-in hiredis ${other} package for the mismatch test.\n"
    "if(NOT TARGET hiredis::hiredis)\n  add_library(hiredis::hiredis INTERFACE IMPORTED)\nendif()\n")
  file(WRITE "${fake}/hiredis-config-version.cmake"
    "set(PACKAGE_VERSION \"${other}\")\nset(PACKAGE_VERSION_COMPATIBLE TRUE)\n")
  prefix_path_cache(init "${OUT_DIR}-fake-hiredis" "${PREFIX}" ${parent_prefix_path})
  run_refused("configuring against hiredis ${other}"
    "streamq was built against hiredis ${HIREDIS_VERSION}"
    "${CMAKE_COMMAND}" ${init} -S "${SOURCE_DIR}" -B "${OUT_DIR}" ${flags})
  file(REMOVE_RECURSE "${OUT_DIR}-fake-hiredis")
  return()
elseif(MODE STREQUAL "link_mismatch")
  # Past the package config (a hand-written link line): a streamq built against hiredis 1.x
  # must not link with 0.14's library at all. The line has everything else libstreamq.a needs
  # (date-tz included), so what is left undefined is hiredis'.
  file(GLOB_RECURSE archive "${PREFIX}/*/libstreamq.a")
  if(NOT archive)
    message(FATAL_ERROR "no libstreamq.a under ${PREFIX} (the link check needs a static streamq)")
  endif()
  file(WRITE "${OUT_DIR}-src/CMakeLists.txt"
    "cmake_minimum_required(VERSION 3.21)\nproject(streamq_link_mismatch LANGUAGES CXX)\n"
    "find_package(nlohmann_json REQUIRED)\nfind_package(Threads REQUIRED)\nfind_package(date 3 CONFIG REQUIRED)\n"
    "add_executable(app \"${SOURCE_DIR}/main.cpp\")\nset_target_properties(app PROPERTIES CXX_STANDARD 20)\n"
    "target_include_directories(app PRIVATE \"${PREFIX}/include\")\n"
    "target_link_libraries(app PRIVATE \"${archive}\" \"${OTHER_HIREDIS}\" "
    "nlohmann_json::nlohmann_json Threads::Threads date::date-tz)\n")
  run("configuring the link-mismatch project" "${CMAKE_COMMAND}" -S "${OUT_DIR}-src" -B "${OUT_DIR}" ${flags})
  run_refused("linking with ${OTHER_HIREDIS}" "undefined reference"
    "${CMAKE_COMMAND}" --build "${OUT_DIR}")
  file(REMOVE_RECURSE "${OUT_DIR}-src")
  return()
else()
  message(FATAL_ERROR "build_consumer.cmake: unknown MODE ${MODE}")
endif()
run("building the ${MODE} consumer" "${CMAKE_COMMAND}" --build "${OUT_DIR}" -j2)
