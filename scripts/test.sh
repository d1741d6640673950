#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The streamq test suite, as CI runs it. First the formatting check (scripts/format.sh
# --check: clang-format with .clang-format), then the stages, in order:
#   werror    a warnings-as-errors build (Debian's hiredis 0.14, redis-server 7.0) with every test
#             (the stages compile as unity builds; package.subdirectory compiles each library
#             file on its own)
#   clang     the whole project (library, tests, examples, tools, benchmarks) built with clang++
#             (Debian's clang 14, warnings as errors, -O0), and the asio component's tests it builds
#             run (clang 14 with libstdc++ gives asio no coroutines: the build must say so and
#             leave the coroutine parts out, not fail)
#   tidy      clang-tidy with the checks of .clang-tidy over each file of the library (in
#             build-tidy), failing on any finding
#   asan      the same tests (but the Inspector's 100,000-entry paging test) under
#             AddressSanitizer + UndefinedBehaviorSanitizer
#   tsan      the same under ThreadSanitizer
#   fuzz      the libFuzzer targets of tests/fuzz built with clang++ (ASan, UBSan), each run for
#             20 s from its seed corpus (scripts/fuzz.sh runs them longer)
#   packages  the Debian packages (cpack -G DEB of a Release build, warnings as errors, with the
#             shared library and its static twin, in build-packages): their metadata and files
#             checked, unpacked into a throwaway root, and a program built against it with
#             find_package and pkg-config, shared and static, run against a private server
#             (tests/package/debs.sh)
#   hiredis14 hiredis 1.4.1 (with hiredis_ssl) built from the vendored sources into
#             build-matrix/prefix, a warnings-as-errors build with TLS (STREAMQ_TLS=ON) of the
#             library and tests against it (the TLS tests run here)
#             (build-hiredis14; the stage fails unless CMake found that hiredis and the test
#             binaries load its libhiredis.so.1), every test but the dashboard's browser test
#   redis62   redis-server 6.2.16 (the oldest docs/compatibility.md promises) built from the vendored
#             sources; the integration tests of build-hiredis14 run on it (STREAMQ_REDIS_SERVER)
#   valkey8   the same with valkey-server 8.0.1
# The last three need the vendored sources: ../shared/vendor from the repository root, or
# STREAMQ_VENDOR_DIR. Without them they are skipped with a message (so this command works on
# any bookworm machine), unless STREAMQ_REQUIRE_VENDOR=1 (CI), which makes that a failure.
# The vendored servers and hiredis are built once into build-matrix/ and reused after that.
# Integration tests start their own redis-server processes; a missing redis-server fails them.
# STREAMQ_SKIP_SANITIZERS=1 skips asan and tsan (quick local runs only).
# STREAMQ_STAGES="hiredis14 redis62" runs only the stages named (dependencies are always
# checked; redis62 and valkey8 build what they need of hiredis14 without running its tests).
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "${BASH_SOURCE[0]}")/.."

export STREAMQ_REQUIRE_REDIS=1
# Any sanitizer report fails the test that triggered it.
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
# (tests/tsan.supp: one report that is ThreadSanitizer not seeing libstdc++'s own synchronisation.)
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp"

all_stages="werror clang tidy asan tsan fuzz packages hiredis14 redis62 valkey8"
stages=" ${STREAMQ_STAGES:-$all_stages} "
for s in $stages; do
  [[ " $all_stages " == *" $s "* ]] || { echo "test.sh: unknown stage \"$s\" (stages: $all_stages)" >&2; exit 2; }
done
if [[ ${STREAMQ_SKIP_SANITIZERS:-0} == 1 ]]; then
  echo "test.sh: STREAMQ_SKIP_SANITIZERS=1: skipping the ASan+UBSan and TSan stages"
  stages=${stages/ asan / }
  stages=${stages/ tsan / }
fi
wanted() { [[ $stages == *" $1 "* ]]; }

stage="dependencies"
passed=()
stage_start=$SECONDS
summary() {
  local status=$?
  if ((status == 0)); then
    echo "test.sh: PASSED: ${passed[*]}"
  else
    echo "test.sh: FAILED in stage \"$stage\" (exit $status); passed before it: ${passed[*]:-nothing}" >&2
  fi
}
trap summary EXIT
# A run stopped by a signal is not a pass: exit with the signal's status, which summary reports.
trap 'exit 130' INT
trap 'exit 143' TERM

# begin NAME [DIR] ... end: a stage, timed.
begin() {
  stage=$1
  stage_start=$SECONDS
  printf '\n==> %s%s\n' "$1" "${2:+ ($2)}"
}
end() {
  local took=$((SECONDS - stage_start))
  printf '==> %s passed in %dm%02ds\n' "$stage" $((took / 60)) $((took % 60))
  passed+=("$stage(${took}s)")
}

# stage NAME BUILD_DIR CTEST_JOBS [cmake arguments...]: configure, build, run every test (but
# those matching $ctest_exclude, when set).
stage() {
  local name=$1 dir=$2 jobs=$3
  shift 3
  begin "$name" "$dir"
  cmake -S . -B "$dir" -DSTREAMQ_BUILD_TESTS=ON "$@"
  cmake --build "$dir" -j2
  "${ctest_prefix[@]}" ctest --test-dir "$dir" --output-on-failure --no-tests=error \
    -j"$jobs" --timeout 300 ${ctest_exclude:+-E "$ctest_exclude"}
  end
}

bash scripts/install-deps.sh --test
passed+=("dependencies")

# Every compilation, the nested CMake projects of the package tests' included, goes through
# ccache (CMake reads CMAKE_CXX_COMPILER_LAUNCHER from the environment): a rerun in the same
# folder compiles only what changed. (Paths under the checkout are hashed relative to it, but a
# unity build's sources name the files they include by absolute path: a clone in another folder
# measured 6% hits.)
if [[ -z ${CMAKE_CXX_COMPILER_LAUNCHER:-} ]] && command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache
  export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
fi

stage="format"
bash scripts/format.sh --check
passed+=("format")

# The stages compile as unity builds (CMAKE_UNITY_BUILD: a few source files per compiler run),
# in about half the time. The werror stage's package.subdirectory test compiles each source
# file of the library on its own, so that each still compiles with only the headers it includes.
unity=(-DCMAKE_UNITY_BUILD=ON)
# Tests in parallel: most of an integration test's time is spent waiting (for a server, a
# block, a lease), so more tests than cores run at once. Measured here, the integration tests
# of a plain build use 0.6 of a core at -j2 and 1.1 at -j4 (94 s and 57 s); ASan's all tests
# 1.4 cores at -j2 and 1.9 at -j4 (194 s, 154 s; it stays at -j2); TSan's 1.2 cores at -j2
# (148 s, against 267 s at -j1). hiredis14, redis62 and valkey8 stay at -j2: at -j4 two cluster
# topologies started at once on valkey8 collided on ports. Each stage runs at the most that
# leaves the two cores some room:
# the tests' deadlines must not compete for CPU. (The package tests that compile the library
# count as two tests.)

ctest_prefix=()
if wanted werror; then
  stage "build+tests" build 4 -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTREAMQ_WERROR=ON -DSTREAMQ_BUILD_BENCH=ON "${unity[@]}"
fi

if wanted clang; then
  begin "clang" build-clang
  cmake -S . -B build-clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-O0 -g0" \
    -DSTREAMQ_BUILD_TESTS=ON -DSTREAMQ_BUILD_BENCH=ON -DSTREAMQ_WERROR=ON "${unity[@]}"
  cmake --build build-clang -j2
  ctest --test-dir build-clang --output-on-failure --no-tests=error -R '^AsioTokensTest[.]'
  end
fi

# clang-tidy over each source file of the library, with the compile commands of a tree of its
# own (not a unity build: a unity source would hide the checks that look at the main file
# only, and one file's use of a name would count for another; no -Werror, so only the checks
# of .clang-tidy decide). It builds only the generated script sources. WarningsAsErrors in
# .clang-tidy makes any finding an error.
if wanted tidy; then
  begin "tidy" build-tidy
  cmake -S . -B build-tidy -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
    -DCMAKE_UNITY_BUILD=OFF -DSTREAMQ_BUILD_EXAMPLES=OFF -DSTREAMQ_BUILD_TOOLS=OFF >/dev/null
  cmake --build build-tidy --target streamq_generated
  if ! run-clang-tidy -quiet -j 2 -p build-tidy "$PWD/src/" >build-tidy/clang-tidy.log 2>&1; then
    cat build-tidy/clang-tidy.log
    echo "test.sh: clang-tidy found the problems above (checks: .clang-tidy)" >&2
    exit 1
  fi
  end
fi

# The sanitizer builds use -O1 -g1 (line tables): they compile in about half the time of
# -O2 -g, the tests run no slower, and the reports keep file and line. GCC 12 warns falsely
# about libstdc++'s <regex> at -O1 (maybe-uninitialized); the werror stage, at -O2, still
# checks that warning for our code.
sanitizer_opt=("-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG -Wno-maybe-uninitialized")

# The sanitizer stages leave out the tests that are about volume, not memory or threads: the
# Inspector paging over 100,000 entries and 100,000 tenants draining (werror and hiredis14 run
# them; smaller paging and tenants' tests run here).
ctest_exclude='^InspectorTest[.]PagesOverOneHundredThousandEntries|^TenantsTest[.]AHundredThousandTenantsWithATaskEachDrain'
if wanted asan; then
  stage "asan+ubsan" build-asan 2 -DCMAKE_BUILD_TYPE=RelWithDebInfo "${sanitizer_opt[@]}" "${unity[@]}" \
    -DSTREAMQ_BUILD_EXAMPLES=OFF -DSTREAMQ_BUILD_TOOLS=OFF -DSTREAMQ_BUILD_BENCH=OFF -DSTREAMQ_TEST_BUILDS=OFF \
    "-DCMAKE_CXX_FLAGS=-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
fi

if wanted tsan; then
  # GCC 12's TSan cannot place its shadow memory when the kernel randomises mmap addresses
  # with more than 28 bits; run without address randomisation there.
  if (($(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo 28) > 28)); then
    ctest_prefix=(setarch "$(uname -m)" -R)
  fi
  # Two tests at a time: TSan slows the code several-fold.
  stage "tsan" build-tsan 2 -DCMAKE_BUILD_TYPE=RelWithDebInfo "${sanitizer_opt[@]}" "${unity[@]}" \
    -DSTREAMQ_BUILD_EXAMPLES=OFF -DSTREAMQ_BUILD_TOOLS=OFF -DSTREAMQ_BUILD_BENCH=OFF -DSTREAMQ_TEST_BUILDS=OFF \
    "-DCMAKE_CXX_FLAGS=-fsanitize=thread -fno-omit-frame-pointer"
  ctest_prefix=()
fi
ctest_exclude=

if wanted fuzz; then
  begin "fuzz" build-fuzz
  cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTREAMQ_BUILD_FUZZERS=ON "${unity[@]}" \
    -DSTREAMQ_BUILD_EXAMPLES=OFF -DSTREAMQ_BUILD_TOOLS=OFF -DSTREAMQ_INSTALL=OFF -DSTREAMQ_WERROR=ON
  cmake --build build-fuzz -j2
  ctest --test-dir build-fuzz --output-on-failure --no-tests=error -j2 -L fuzz
  end
fi

if wanted packages; then
  begin "packages" build-packages
  bash tests/package/debs.sh build-packages
  end
fi

if ! wanted hiredis14 && ! wanted redis62 && ! wanted valkey8; then exit 0; fi

# ---- The compatibility matrix: vendored hiredis 1.4.1, Redis 6.2.16, Valkey 8.0.1 ----------
vendor=${STREAMQ_VENDOR_DIR:-../shared/vendor}
if [[ ! -d $vendor ]]; then
  if [[ ${STREAMQ_REQUIRE_VENDOR:-0} == 1 ]]; then
    stage="matrix"
    echo "test.sh: no vendored sources in $vendor (STREAMQ_REQUIRE_VENDOR=1)" >&2
    exit 1
  fi
  echo "test.sh: no vendored sources in $vendor (set STREAMQ_VENDOR_DIR): skipping the hiredis 1.4.1, Redis 6.2.16 and Valkey 8.0.1 stages"
  passed+=("(matrix skipped: no $vendor)")
  exit 0
fi
vendor=$(cd "$vendor" && pwd)
matrix=$PWD/build-matrix
prefix=$matrix/prefix
mkdir -p "$matrix"

# unpack TARBALL: extracts $vendor/TARBALL into build-matrix/ once, after checking its sha256
# against the vendor README's table. Prints the directory.
unpack() {
  local tarball=$1 dir=$matrix/${1%.tar.gz} want have
  if [[ ! -e $dir/.unpacked ]]; then
    want=$(grep -F "| $tarball |" "$vendor/README.md" | grep -oE '\b[0-9a-f]{64}\b' || true)
    have=$(sha256sum "$vendor/$tarball" | cut -d' ' -f1)
    if [[ -z $want || $want != "$have" ]]; then
      echo "test.sh: $vendor/$tarball: sha256 $have, the vendor README says ${want:-nothing}" >&2
      return 1
    fi
    rm -rf "$dir"
    tar -xzf "$vendor/$tarball" -C "$matrix"
    touch "$dir/.unpacked"
  fi
  echo "$dir"
}

# build_server TARBALL PROGRAM: builds PROGRAM (redis-server, valkey-server) without jemalloc,
# TLS or systemd, at -O2 (Valkey's default -O3 -flto takes several times longer to link).
build_server() {
  local dir
  dir=$(unpack "$1")
  make -C "$dir/src" -j2 "$2" MALLOC=libc BUILD_TLS=no USE_SYSTEMD=no OPTIMIZATION=-O2 >"$matrix/$2.log" 2>&1 ||
    { tail -n 30 "$matrix/$2.log" >&2; return 1; }
  server_binary=$dir/src/$2
}

# The hiredis 1.4 build of streamq, with its tests; checks that it really uses that hiredis.
hiredis14_build() {
  [[ -n ${hiredis14_built:-} ]] && return 0
  local src
  src=$(unpack hiredis-1.4.1.tar.gz)
  # With hiredis_ssl (ENABLE_SSL, OpenSSL from libssl-dev): this stage is where TLS is tested.
  if [[ ! -e $prefix/lib/cmake/hiredis_ssl/hiredis_ssl-config.cmake ]]; then
    cmake -S "$src" -B "$matrix/hiredis-build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_INSTALL_PREFIX="$prefix" -DBUILD_SHARED_LIBS=ON -DDISABLE_TESTS=ON -DENABLE_SSL=ON >/dev/null
    cmake --build "$matrix/hiredis-build" -j2 >/dev/null
    cmake --install "$matrix/hiredis-build" >/dev/null
  fi
  mkdir -p build-hiredis14
  # The examples use only the public API, which hides hiredis: built once, in werror, is enough.
  # So is the benchmark (its raw hiredis loop uses calls 0.14 and 1.x share). -O1 -g1 as in the
  # sanitizer stages: what differs here is the hiredis, not the optimiser, and it compiles in
  # about half the time of -O2 -g.
  cmake -S . -B build-hiredis14 -DSTREAMQ_BUILD_TESTS=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo "${sanitizer_opt[@]}" \
    -DSTREAMQ_WERROR=ON -DSTREAMQ_BUILD_EXAMPLES=OFF -DSTREAMQ_BUILD_BENCH=OFF -DSTREAMQ_TEST_BUILDS=OFF \
    -DSTREAMQ_TLS=ON -DCMAKE_PREFIX_PATH="$prefix" "${unity[@]}" |
    tee build-hiredis14/configure.log
  if ! grep -qF "streamq: hiredis 1.4." build-hiredis14/configure.log ||
     ! grep -qF "($prefix/" build-hiredis14/configure.log; then
    echo "test.sh: build-hiredis14 did not find hiredis 1.4 in $prefix (see the configure output)" >&2
    return 1
  fi
  cmake --build build-hiredis14 -j2
  loads_hiredis14 build-hiredis14/tests/streamq_unit_tests build-hiredis14/tests/streamq_integration_tests \
    build-hiredis14/tests/streamq_test_worker
  hiredis14_built=1
}

# loads_hiredis14 BINARY...: fails unless each binary loads the vendored libhiredis.so.1 (and
# no other libhiredis).
loads_hiredis14() {
  local bin libs
  for bin in "$@"; do
    libs=$(ldd "$bin" | awk '/libhiredis[.]so/ {print $3}' | tr '\n' ' ')
    if [[ $libs != "$prefix/lib/libhiredis.so.1 " ]]; then
      echo "test.sh: $bin loads ${libs:-no libhiredis}instead of $prefix/lib/libhiredis.so.1 alone" >&2
      return 1
    fi
  done
}

# integration_on NAME TARBALL PROGRAM: the integration tests of build-hiredis14 on that server.
integration_on() {
  begin "$1"
  hiredis14_build
  build_server "$2" "$3"
  "$server_binary" --version
  # (Not the package tests: they test the build, not the server, and hiredis14 ran them; nor
  # the tests of the streamq command, which need package.installed's prefix (ctest would run
  # it again) and test the command: the Inspector calls behind it, doctor's included, are
  # tested on this server by the integration tests. Nor the TLS tests: this server is built
  # without TLS; hiredis14 ran them on Debian's.)
  STREAMQ_REDIS_SERVER=$server_binary ctest --test-dir build-hiredis14 -L integration \
    -E '^package[.]|Package[.]|^cli[.]|^Tls[.]' \
    --output-on-failure --no-tests=error -j2 --timeout 300
  end
}

if wanted hiredis14; then
  begin hiredis14 build-hiredis14
  hiredis14_build
  # (Not the dashboard's browser test: what the browser sees does not depend on hiredis, and the
  # werror stage ran it; the streamq command's other tests run here, on the installed binary.)
  ctest --test-dir build-hiredis14 --output-on-failure --no-tests=error -j2 --timeout 300 -E '^cli[.]dashboard$'
  loads_hiredis14 build-hiredis14/tests/package-installed/streamq_package_app  # built by the package test
  end
fi
if wanted redis62; then
  integration_on redis62 redis-6.2.16.tar.gz redis-server
fi
if wanted valkey8; then
  integration_on valkey8 valkey-8.0.1.tar.gz valkey-server
fi
