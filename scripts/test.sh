#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The streamq test suite, as CI runs it: the formatting check (clang-format, .clang-format),
# a warnings-as-errors build with every test, then the same tests under AddressSanitizer +
# UndefinedBehaviorSanitizer and under ThreadSanitizer.
# Integration tests start their own redis-server processes; a missing redis-server fails them.
# STREAMQ_SKIP_SANITIZERS=1 skips the two sanitizer stages (quick local runs only).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

export STREAMQ_REQUIRE_REDIS=1
# Any sanitizer report fails the test that triggered it.
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"

stage="dependencies"
passed=()
summary() {
  local status=$?
  if ((status == 0)); then
    echo "test.sh: PASSED: ${passed[*]}"
  else
    echo "test.sh: FAILED in stage \"$stage\" (exit $status); passed before it: ${passed[*]:-nothing}" >&2
  fi
}
trap summary EXIT

# stage NAME BUILD_DIR CTEST_JOBS [cmake arguments...]: configure, build, run every test.
stage() {
  local name=$1 dir=$2 jobs=$3
  shift 3
  stage=$name
  printf '\n==> %s (%s)\n' "$name" "$dir"
  cmake -S . -B "$dir" -DSTREAMQ_BUILD_TESTS=ON "$@"
  cmake --build "$dir" -j2
  "${ctest_prefix[@]}" ctest --test-dir "$dir" --output-on-failure --no-tests=error \
    -j"$jobs" --timeout 300
  passed+=("$name")
}

bash scripts/install-deps.sh --test
passed+=("dependencies")

stage="format"
bash scripts/format.sh --check
passed+=("format")

ctest_prefix=()
stage "build+tests" build 2 -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTREAMQ_WERROR=ON -DSTREAMQ_BUILD_BENCH=ON

if [[ ${STREAMQ_SKIP_SANITIZERS:-0} == 1 ]]; then
  echo "test.sh: STREAMQ_SKIP_SANITIZERS=1: skipping the ASan+UBSan and TSan stages"
  passed+=("(sanitizers skipped)")
  exit 0
fi

stage "asan+ubsan" build-asan 2 -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSTREAMQ_BUILD_EXAMPLES=OFF -DSTREAMQ_BUILD_BENCH=OFF -DSTREAMQ_TEST_BUILDS=OFF \
  "-DCMAKE_CXX_FLAGS=-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"

# GCC 12's TSan cannot place its shadow memory when the kernel randomises mmap addresses with
# more than 28 bits; run without address randomisation there.
if (($(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo 28) > 28)); then
  ctest_prefix=(setarch "$(uname -m)" -R)
fi
# One test at a time: TSan slows the code several-fold, and the tests' deadlines should not
# compete with a second test for this machine's two cores.
stage "tsan" build-tsan 1 -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSTREAMQ_BUILD_EXAMPLES=OFF -DSTREAMQ_BUILD_BENCH=OFF -DSTREAMQ_TEST_BUILDS=OFF \
  "-DCMAKE_CXX_FLAGS=-fsanitize=thread -fno-omit-frame-pointer"
