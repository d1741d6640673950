#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Before/after: two streamq-bench binaries (e.g. a base commit's build and this one's) on one
# private redis-server, every scenario both have run by each in turn, interleaved, for R
# rounds; prints the medians and after/before. The machine is shared and noisy: only ratios
# from one run of this script mean something.
# Usage: bench/compare.sh <before/streamq-bench> <after/streamq-bench> [rounds (default 3)]
# e.g.   git worktree add /tmp/base <commit> && cmake -S /tmp/base -B /tmp/base/build-bench \
#          -DCMAKE_BUILD_TYPE=Release -DSTREAMQ_BUILD_BENCH=ON -DSTREAMQ_BUILD_TESTS=OFF \
#          -DSTREAMQ_BUILD_EXAMPLES=OFF && cmake --build /tmp/base/build-bench --target streamq-bench
#        bench/compare.sh /tmp/base/build-bench/bench/streamq-bench build-bench/bench/streamq-bench
set -euo pipefail
if (($# < 2)); then
  echo "usage: bench/compare.sh <before/streamq-bench> <after/streamq-bench> [rounds]" >&2
  exit 2
fi
before=$1 after=$2 rounds=${3:-3}
for b in "$before" "$after"; do
  [[ -x $b ]] || { echo "compare.sh: $b is not an executable" >&2; exit 2; }
done

# shellcheck source=bench/private_redis.sh
source "$(dirname "$0")/private_redis.sh"
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

# name | arguments | preload count (0 = none) | the fields to compare
scenarios=(
  "enqueue|enqueue --count 50000|0|tasks_per_s"
  "enqueue-batch|enqueue-batch --count 500000 --batch 1000|0|tasks_per_s"
  "drain|drain --count 200000|200000|tasks_per_s"
  "drain-raw|drain-raw --count 200000|200000|tasks_per_s"
  "latency@5k/s|latency --count 25000 --rate 5000|0|p50_us p99_us"
  "retry|retry --count 50000|0|tasks_per_s"
)
declare -A got
for round in $(seq "$rounds"); do
  for s in "${scenarios[@]}"; do
    IFS='|' read -r name args preload fields <<<"$s"
    sides="before after"
    ((round % 2 == 0)) && sides="after before"  # neither side always runs first
    for side in $sides; do
      bin=${!side}
      cli FLUSHALL
      if ((preload > 0)); then "$bin" preload --url "$url" --stream b:x --count "$preload" >/dev/null; fi
      # shellcheck disable=SC2086  # args is a word list
      if ! out=$("$bin" $args --url "$url" --stream b:x 2>"$redis_dir/stderr"); then
        echo "compare.sh: $bin $args failed:" >&2
        cat "$redis_dir/stderr" >&2
        exit 1
      fi
      for f in $fields; do got[$name/$f/$side]+="$(field "$f" "$out") "; done
    done
  done
done
cli FLUSHALL

echo "machine: $(nproc) cores, $(redis-server --version | awk '{print $3}'), loopback, no persistence; $rounds interleaved rounds, medians"
printf '%-14s %-11s %9s %9s %6s %7s   %s\n' scenario value before after ratio paired "rounds (before | after)"
for s in "${scenarios[@]}"; do
  IFS='|' read -r name _ _ fields <<<"$s"
  for f in $fields; do
    read -ra bs <<<"${got[$name/$f/before]}"
    read -ra as <<<"${got[$name/$f/after]}"
    pairs=()
    for i in "${!bs[@]}"; do pairs+=("$(awk -v a="${as[$i]}" -v b="${bs[$i]}" 'BEGIN { printf "%.3f", a / b }')"); done
    b=$(median "${bs[@]}") a=$(median "${as[@]}")
    printf '%-14s %-11s %9s %9s %6s %7.2f   %s| %s\n' "$name" "$f" "$b" "$a" \
      "$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", a / b }')" "$(median "${pairs[@]}")" \
      "${got[$name/$f/before]}" "${got[$name/$f/after]}"
  done
done
echo "ratio: after / before of the medians; paired: the median of each round's after / before (the two"
echo "ran back to back, so a slow spell of the machine mostly hits both). For latencies lower is better."
