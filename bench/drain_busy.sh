#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The drain on a machine where thread wake-ups are dear: drain (with 1, 2 and 4 handler
# threads) and drain-raw, each 200,000 tasks, while B busy loops of this script's own keep
# cores taken. Interleaved rounds on one private redis-server; prints each round's rates, the
# draining process's voluntary context switches and CPU time (user + system) per task, and the
# medians against drain-raw. Only ratios from one run of this script mean something.
# Usage: bench/drain_busy.sh [build-dir (default build-bench)] [rounds (default 3)] [busy loops (default 1)]
set -euo pipefail
build=${1:-build-bench} rounds=${2:-3} busy=${3:-1}
bin=$build/bench/streamq-bench
[[ -x $bin ]] || { echo "drain_busy.sh: $bin is not built (cmake --build $build --target streamq-bench)" >&2; exit 2; }
[[ -x /usr/bin/time ]] || { echo "drain_busy.sh: needs /usr/bin/time (apt-get install time)" >&2; exit 2; }

# shellcheck source=bench/private_redis.sh
source "$(dirname "$0")/private_redis.sh"
busy_pids=()
for _ in $(seq "$busy"); do
  (while :; do :; done) &
  busy_pids+=($!)
done
# Stops the busy loops and the private server, by pid (replaces private_redis.sh's own trap;
# each step may fail without skipping the next).
cleanup() {
  if ((${#busy_pids[@]} > 0)); then kill "${busy_pids[@]}" 2>/dev/null || true; fi
  private_redis_stop
}
trap cleanup EXIT
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

count=200000
runs=("drain-raw" "drain 1" "drain 2" "drain 4")
declare -A rate switches cpu
for round in $(seq "$rounds"); do
  line="round $round:"
  for r in "${runs[@]}"; do
    read -r scenario threads <<<"$r"
    cli FLUSHALL
    "$bin" preload --url "$url" --stream b:x --count "$count" >/dev/null
    args=("$scenario" --count "$count" --url "$url" --stream b:x)
    [[ -n ${threads:-} ]] && args+=(--concurrency "$threads")
    out=$(/usr/bin/time -f "voluntary=%w cpu=%U %S" "$bin" "${args[@]}" 2>&1)
    tps=$(field tasks_per_s "$out")
    per_task=$(awk -v w="$(sed -n 's/^voluntary=\([0-9]*\).*/\1/p' <<<"$out")" -v n="$count" 'BEGIN { printf "%.3f", w / n }')
    cpu_us=$(sed -n 's/.* cpu=\([0-9.]*\) \([0-9.]*\)$/\1 \2/p' <<<"$out" |
      awk -v n="$count" '{ printf "%.2f", ($1 + $2) * 1e6 / n }')
    rate[$r]+="$tps " switches[$r]+="$per_task " cpu[$r]+="$cpu_us "
    line+=" $r=$tps/s"
  done
  echo "$line"
done
cli FLUSHALL

echo "machine: $(nproc) cores, $busy busy loops, $(redis-server --version | awk '{print $3}'); $rounds interleaved rounds, medians"
# shellcheck disable=SC2086  # a word list
raw=$(median ${rate[drain-raw]})
printf '%-10s %10s %8s %18s %16s   %s\n' run tasks/s vs-raw "switches per task" "CPU us per task" rounds
for r in "${runs[@]}"; do
  # shellcheck disable=SC2086  # word lists
  m=$(median ${rate[$r]})
  # shellcheck disable=SC2086
  printf '%-10s %10s %8s %18s %16s   %s\n' "$r" "$m" "$(awk -v a="$m" -v b="$raw" 'BEGIN { printf "%.2fx", a / b }')" \
    "$(median ${switches[$r]})" "$(median ${cpu[$r]})" "${rate[$r]}"
done
