# SPDX-License-Identifier: MIT
# streamq.pc, installed to <libdir>/pkgconfig beside the CMake package: `pkg-config --cflags
# --libs streamq` for a shared libstreamq, with --static for the static one (it adds hiredis,
# and hiredis_ssl and OpenSSL in a TLS build: Requires.private; and date-tz, which has no .pc:
# Libs.private). nlohmann_json is public (the headers include it), so it is in Requires.
# hiredis must be of the major version streamq was built with (0.14 and 1.x differ in their
# ABI): Requires.private bounds it.
string(REGEX MATCH "^[0-9]+" _streamq_hiredis_major "${hiredis_VERSION}")
math(EXPR _streamq_hiredis_next "${_streamq_hiredis_major} + 1")
if(_streamq_hiredis_major EQUAL 0)
  set(_streamq_hiredis_min 0.14)
else()
  set(_streamq_hiredis_min ${_streamq_hiredis_major}.0)
endif()
set(STREAMQ_PC_REQUIRES_PRIVATE "hiredis >= ${_streamq_hiredis_min}, hiredis < ${_streamq_hiredis_next}")
if(STREAMQ_HAS_TLS)
  string(APPEND STREAMQ_PC_REQUIRES_PRIVATE ", hiredis_ssl, openssl")
endif()
set(STREAMQ_PC_THREADS "")
if(CMAKE_THREAD_LIBS_INIT)
  set(STREAMQ_PC_THREADS " ${CMAKE_THREAD_LIBS_INIT}")
endif()
foreach(_streamq_dir LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${_streamq_dir}}")
    set(STREAMQ_PC_${_streamq_dir} "${CMAKE_INSTALL_${_streamq_dir}}")
  else()
    set(STREAMQ_PC_${_streamq_dir} "\${prefix}/${CMAKE_INSTALL_${_streamq_dir}}")
  endif()
endforeach()
# The prefix is the one installed to (`cmake --install --prefix` or cpack's), so it is filled in
# at install time: here it stays a placeholder for the second configure_file.
set(STREAMQ_PC_PREFIX "@CMAKE_INSTALL_PREFIX@")
configure_file("${PROJECT_SOURCE_DIR}/cmake/streamq.pc.in" "${PROJECT_BINARY_DIR}/pkgconfig/streamq.pc.in" @ONLY)
install(CODE "configure_file(\"${PROJECT_BINARY_DIR}/pkgconfig/streamq.pc.in\"
  \"${PROJECT_BINARY_DIR}/pkgconfig/streamq.pc\" @ONLY)" COMPONENT dev)
install(FILES "${PROJECT_BINARY_DIR}/pkgconfig/streamq.pc" DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
  COMPONENT dev)
