#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The long fuzz run: builds tests/fuzz with clang++ (build-fuzz/, as the test command's fuzz
# stage does), runs each target for SECONDS (default 600), two at a time on this machine's two
# cores, from its seed corpus plus what earlier runs found (build-fuzz/tests/fuzz/corpus/), and
# prints per target: executions, executions per second, coverage (edges, features), corpus
# size, peak memory, and the crashes it left (crash-*, leak-*, timeout-*, oom-* in
# build-fuzz/tests/fuzz/). Exits 1 when any target found something.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]   (targets: url resp json task stats)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
seconds=${1:-600}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(url resp json task stats)

cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTREAMQ_BUILD_FUZZERS=ON \
  -DSTREAMQ_BUILD_EXAMPLES=OFF -DSTREAMQ_BUILD_TOOLS=OFF -DSTREAMQ_INSTALL=OFF >/dev/null
cmake --build build-fuzz -j2 >/dev/null
dir=build-fuzz/tests/fuzz
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

run() {
  local t=$1
  mkdir -p "$dir/corpus/$t"
  "$dir/fuzz_$t" -max_total_time="$seconds" -max_len=4096 -print_final_stats=1 -artifact_prefix="$dir/$t-" \
    "$dir/corpus/$t" "tests/fuzz/corpus/$t" >"$logs/$t" 2>&1 || true
}
running=0
for t in "${targets[@]}"; do
  run "$t" &
  if ((++running == 2)); then
    wait -n
    running=$((running - 1))
  fi
done
wait

found=0
printf '%-6s %12s %8s %8s %8s %8s %8s %s\n' target executions exec/s edges features corpus rss_mb findings
for t in "${targets[@]}"; do
  stat() { sed -n "s/^stat::$1: *//p" "$logs/$t" | tail -1; }
  last=$(grep -E '^#[0-9]+' "$logs/$t" | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  corp=$(sed -n 's/.* corp: \([0-9]*\)\/.*/\1/p' <<<"$last")
  shopt -s nullglob
  findings=("$dir/$t"-crash-* "$dir/$t"-leak-* "$dir/$t"-timeout-* "$dir/$t"-oom-*)
  shopt -u nullglob
  printf '%-6s %12s %8s %8s %8s %8s %8s %s\n' "$t" "$(stat number_of_executed_units)" \
    "$(stat average_exec_per_sec)" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$(stat peak_rss_mb)" \
    "${#findings[@]}${findings:+ (${findings[*]})}"
  if ((${#findings[@]})); then
    found=1
    grep -E 'ERROR|SUMMARY|runtime error' "$logs/$t" | head -5
  fi
done
exit "$found"
