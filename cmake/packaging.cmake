# SPDX-License-Identifier: MIT
# Debian packages: `cpack -G DEB` in a build configured with -DCMAKE_INSTALL_PREFIX=/usr (the
# multiarch library folder) and -DBUILD_SHARED_LIBS=ON (the shared library and its static twin
# from one build) makes two, one per install component:
#   libstreamq-dev  (dev)    the headers, libstreamq.so and libstreamq.a, the CMake package and
#                            streamq.pc
#   streamq-tools   (tools)  the streamq command, which loads the libstreamq.so.<major>.<minor>
#                            of libstreamq-dev of the same version
# Their library dependencies come from dpkg-shlibdeps (dpkg-dev); the -dev package also depends
# on what building against it needs: Debian's hiredis of the major version streamq was built
# with, nlohmann-json3-dev and libhowardhinnant-date-dev (and libssl-dev in a TLS build). The
# time-zone database comes with libdate-tz3 (which depends on tzdata).
set(STREAMQ_PACKAGE_MAINTAINER "The streamq authors <maintainers@users.noreply.a-seed-945b9d7f.example>"
  CACHE STRING "The Maintainer of the Debian packages (cpack -G DEB)")

set(CPACK_PACKAGE_NAME streamq)
set(CPACK_PACKAGE_VENDOR "The streamq authors")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
# The synopsis of both packages; each one's description follows it.
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_RESOURCE_FILE_LICENSE "${PROJECT_SOURCE_DIR}/LICENSE")
set(CPACK_GENERATOR DEB)
set(CPACK_COMPONENTS_ALL dev tools)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${STREAMQ_PACKAGE_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# The streamq command needs libstreamq.so.<major>.<minor>, which no installed package has yet:
# dpkg-shlibdeps finds it in the build tree (the dependency on it is libstreamq-dev's, below).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS "${PROJECT_BINARY_DIR}")

set(CPACK_COMPONENT_DEV_DISPLAY_NAME "streamq development files")
set(CPACK_COMPONENT_DEV_DESCRIPTION
  "The streamq C++20 library: headers, shared and static library. Producer, Consumer,\n\
Inspector, Scheduler and StatsReader for a task queue on Redis Streams (retries, delays,\n\
dead letters, priorities, workflows, tenants). With the CMake package (find_package(streamq))\n\
and streamq.pc for pkg-config.")
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libstreamq-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
string(REGEX MATCH "^[0-9]+" _streamq_hiredis_major "${hiredis_VERSION}")
math(EXPR _streamq_hiredis_next "${_streamq_hiredis_major} + 1")
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
  "libhiredis-dev (>= ${hiredis_VERSION}), libhiredis-dev (<< ${_streamq_hiredis_next}), nlohmann-json3-dev (>= 3.9), libhowardhinnant-date-dev")
if(STREAMQ_HAS_TLS)
  string(APPEND CPACK_DEBIAN_DEV_PACKAGE_DEPENDS ", libssl-dev")
endif()

set(CPACK_COMPONENT_TOOLS_DISPLAY_NAME "the streamq command")
set(CPACK_COMPONENT_TOOLS_DESCRIPTION
  "The streamq command: lists and inspects queues, tasks and dead letters, replays, cancels,\n\
pauses and enqueues, and serves a Prometheus exporter and a web dashboard.")
set(CPACK_COMPONENT_TOOLS_DEPENDS dev)
set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME streamq-tools)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)

include(CPack)
