#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The Debian packages, checked as a user gets them (the packages stage of scripts/test.sh):
#   1. a Release build (warnings as errors) with the shared library and its static twin,
#      installed to /usr, in BUILD_DIR
#      (default build-packages); `cpack -G DEB` makes libstreamq-dev and streamq-tools;
#   2. their metadata (dpkg-deb -I: name, version, section, dependencies) and file lists
#      (dpkg-deb -c) are what cmake/packaging.cmake says;
#   3. both are unpacked (dpkg -x) into a throwaway root: nothing on the machine changes;
#   4. tests/package/main.cpp is built against that root four ways: find_package(streamq) with
#      streamq::streamq (shared) and streamq::streamq_static, and `pkg-config --cflags --libs
#      streamq` (prefix moved with --define-variable) shared and `--static`;
#   5. each program enqueues to a private redis-server on a free loopback port and catches the
#      server's WRONGTYPE as a streamq::ReplyError (a type thrown out of the shared library);
#      the unpacked streamq command lists the queue they made.
# Any failed step fails the script.
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=${1:-build-packages}

fail() {
  echo "debs.sh: $*" >&2
  exit 1
}

work=$(mktemp -d)
# shellcheck source=scripts/private_redis.sh
source scripts/private_redis.sh
cleanup() {
  local status=$?
  private_redis_stop  # only the server this script started, by its pid
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT

version=$(sed -nE 's/^project\(streamq VERSION ([0-9.]+) .*/\1/p' CMakeLists.txt)
[[ -n $version ]] || fail "no project version in CMakeLists.txt"
arch=$(dpkg --print-architecture)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)

echo "--- build ($build) and cpack -G DEB"
# Release (-O3) with warnings as errors, the examples included: the demo's build (a unity
# Release build of the library, the examples and the command) has no warnings, GCC 12's
# -Wrestrict false positives among them (docs/getting-started.md#build-time).
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_INSTALL_PREFIX=/usr -DBUILD_SHARED_LIBS=ON -DCMAKE_UNITY_BUILD=ON -DSTREAMQ_WERROR=ON \
  -DSTREAMQ_BUILD_EXAMPLES=ON -DSTREAMQ_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" -j2
rm -f "$build"/*.deb
(cd "$build" && cpack -G DEB >cpack.log 2>&1) || { cat "$build/cpack.log" >&2; fail "cpack failed"; }
dev=$build/libstreamq-dev_${version}_${arch}.deb
tools=$build/streamq-tools_${version}_${arch}.deb
for deb in "$dev" "$tools"; do [[ -f $deb ]] || fail "cpack made no $deb: $(ls "$build"/*.deb)"; done

echo "--- package metadata"
# field DEB NAME: the control field NAME of DEB.
field() { dpkg-deb -f "$1" "$2"; }
# expect_in WHAT TEXT PATTERN...: each extended regular expression matches TEXT.
expect_in() {
  local what=$1 text=$2 pattern
  shift 2
  for pattern in "$@"; do
    grep -qE -- "$pattern" <<<"$text" || fail "$what: no match for '$pattern' in: $text"
  done
}
dpkg-deb -I "$dev"
dpkg-deb -I "$tools"
[[ $(field "$dev" Package) == libstreamq-dev && $(field "$tools" Package) == streamq-tools ]] ||
  fail "package names: $(field "$dev" Package), $(field "$tools" Package)"
[[ $(field "$dev" Version) == "$version" && $(field "$tools" Version) == "$version" ]] ||
  fail "versions $(field "$dev" Version), $(field "$tools" Version); the project's is $version"
[[ $(field "$dev" Section) == libdevel && $(field "$tools" Section) == utils ]] ||
  fail "sections: $(field "$dev" Section), $(field "$tools" Section)"
[[ -n $(field "$dev" Maintainer) ]] || fail "$dev has no Maintainer"
# The -dev package: Debian's hiredis 0.14 (the build's; the library loads it, a static link and
# the CMake package need its -dev), nlohmann_json, date-tz (the same: libdate-tz3 from
# dpkg-shlibdeps, the -dev by name), and what else dpkg-shlibdeps found.
expect_in "$dev Depends" "$(field "$dev" Depends)" \
  '(^|, )libhiredis0\.14 ' '(^|, )libhiredis-dev \(>= 0\.14' 'libhiredis-dev \(<< 1\)' \
  '(^|, )nlohmann-json3-dev \(>= 3\.9\)' '(^|, )libdate-tz3 ' '(^|, )libhowardhinnant-date-dev(,|$)' \
  '(^|, )libstdc\+\+6 ' '(^|, )libc6 '
# The command: the -dev package of its version (its libstreamq.so) and the C++ runtime.
expect_in "$tools Depends" "$(field "$tools" Depends)" \
  "(^|, )libstreamq-dev \\(= $version\\)" '(^|, )libstdc\+\+6 ' '(^|, )libc6 '

# files DEB: the regular files and symlinks of DEB, one path a line without the leading '.'.
files() { dpkg-deb -c "$1" | awk '$1 !~ /^d/ { print $6 }' | sed 's/^\.//'; }
dev_files=$(files "$dev")
tools_files=$(files "$tools")
printf '%s\n' "$dev_files" "$tools_files"
lib=/usr/lib/$multiarch
expect_in "$dev files" "$dev_files" \
  '^/usr/include/streamq/streamq\.hpp$' '^/usr/include/streamq/export\.hpp$' '^/usr/include/streamq/version\.hpp$' \
  "^$lib/libstreamq\\.a$" "^$lib/libstreamq\\.so$" "^$lib/libstreamq\\.so\\.[0-9]+\\.[0-9]+$" \
  "^$lib/libstreamq\\.so\\.$version$" "^$lib/cmake/streamq/streamqConfig\\.cmake$" \
  "^$lib/cmake/streamq/streamqTargets\\.cmake$" "^$lib/cmake/streamq/Findhiredis\\.cmake$" \
  "^$lib/pkgconfig/streamq\\.pc$"
if grep -vE '^(/usr/include/streamq/[a-z_]+\.hpp|'"$lib"'/(libstreamq\.(a|so[0-9.]*)|cmake/streamq/[A-Za-z_-]+\.cmake|pkgconfig/streamq\.pc)|/usr/share/doc/.*)$' \
  <<<"$dev_files"; then
  fail "$dev has the files above, which are none of its own (headers, libraries, CMake package, streamq.pc)"
fi
[[ $tools_files == /usr/bin/streamq ]] || fail "$tools must hold /usr/bin/streamq alone, not: $tools_files"

echo "--- unpacked into a throwaway root"
root=$work/root
dpkg -x "$dev" "$root"
dpkg -x "$tools" "$root"
pc_dir=$root$lib/pkgconfig
[[ $(grep '^prefix=' "$pc_dir/streamq.pc") == prefix=/usr ]] || fail "streamq.pc: $(grep '^prefix=' "$pc_dir/streamq.pc")"
export PKG_CONFIG_PATH=$pc_dir
pc=(pkg-config "--define-variable=prefix=$root/usr")
[[ $("${pc[@]}" --modversion streamq) == "$version" ]] || fail "pkg-config --modversion streamq: not $version"
echo "pkg-config --cflags --libs streamq: $("${pc[@]}" --cflags --libs streamq)"
echo "pkg-config --static --libs streamq: $("${pc[@]}" --static --libs streamq)"

# The programs, each built into $work/app-<how>.
cmake_app() {
  local how=$1 target=$2
  cmake -S tests/package -B "$work/cmake-$how" -DCMAKE_BUILD_TYPE=Release \
    "-Dstreamq_DIR=$root$lib/cmake/streamq" "-DSTREAMQ_PACKAGE_LIBRARY=$target" >/dev/null
  cmake --build "$work/cmake-$how" -j2 >/dev/null
  cp "$work/cmake-$how/streamq_package_app" "$work/app-$how"
}
cmake_app cmake-shared streamq::streamq
cmake_app cmake-static streamq::streamq_static
read -ra cflags <<<"$("${pc[@]}" --cflags streamq)"
read -ra libs <<<"$("${pc[@]}" --libs streamq)"
read -ra static_libs <<<"$("${pc[@]}" --static --libs streamq)"
g++ -std=c++20 -O1 "${cflags[@]}" tests/package/main.cpp "${libs[@]}" -o "$work/app-pkgconfig-shared"
# -Bstatic: from the same folders, the archives (libstreamq.a and, through Requires.private,
# libhiredis.a), so the link needs every library --static names; but -ldate-tz (Libs.private)
# after -Bdynamic: Debian ships libdate-tz shared only.
[[ " ${static_libs[*]} " == *" -ldate-tz "* ]] || fail "pkg-config --static --libs streamq has no -ldate-tz"
archives=()
for lib_flag in "${static_libs[@]}"; do [[ $lib_flag == -ldate-tz ]] || archives+=("$lib_flag"); done
g++ -std=c++20 -O1 "${cflags[@]}" tests/package/main.cpp -Wl,-Bstatic "${archives[@]}" -Wl,-Bdynamic -ldate-tz \
  -o "$work/app-pkgconfig-static"

echo "--- run against a private redis-server"
private_redis_start || fail "no private redis-server"
redis-cli -p "$port" SET debs_string_key x >/dev/null

# The shared programs must load the unpacked libstreamq (the CMake one through the RPATH CMake
# gives it, the pkg-config one and the command, installed for /usr, through LD_LIBRARY_PATH), the
# static ones none.
unpacked=(env "LD_LIBRARY_PATH=$root$lib")
for how in cmake-shared cmake-static pkgconfig-shared pkgconfig-static; do
  app=$work/app-$how
  run=()
  [[ $how == pkgconfig-shared ]] && run=("${unpacked[@]}")
  loaded=$("${run[@]}" ldd "$app" | awk '/libstreamq/ { print $3 }')
  if [[ $how == *-shared ]]; then
    [[ $loaded == "$root$lib/libstreamq.so."* ]] || fail "$how loads '${loaded:-no libstreamq}', not the unpacked one"
  else
    [[ -z $loaded ]] || fail "$how, linked statically, loads $loaded"
  fi
  out=$("${run[@]}" "$app" "$url" "debs_$how" debs_string_key) || fail "$how failed: $out"
  mapfile -t lines <<<"$out"
  [[ -n ${lines[0]} && ${lines[1]:-} == WRONGTYPE ]] || fail "$how printed: $out"
  [[ $(redis-cli -p "$port" XLEN "debs_$how") == 1 ]] || fail "$how enqueued no task into debs_$how"
  echo "$how: enqueued ${lines[0]}, then caught ReplyError ${lines[1]} (libstreamq: ${loaded:-static})"
done

# The command of streamq-tools, from the root: its libstreamq is the unpacked one.
loaded=$("${unpacked[@]}" ldd "$root/usr/bin/streamq" | awk '/libstreamq/ { print $3 }')
[[ $loaded == "$root$lib/libstreamq.so."* ]] || fail "streamq loads '${loaded:-no libstreamq}', not the unpacked one"
queues=$("${unpacked[@]}" "$root/usr/bin/streamq" --url "$url" queues)
grep -q debs_cmake-shared <<<"$queues" || fail "streamq queues does not list debs_cmake-shared: $queues"
echo "streamq queues lists the programs' queues"
echo "debs.sh: libstreamq-dev and streamq-tools $version checked"
