#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The streamq demo: builds the examples, starts a private redis-server on a free loopback
# port, enqueues tasks of the seed's three types plus one that always fails, runs a worker
# until the queue is drained, and shows the statistics and the dead-letter stream; then, from
# the installed prefix, `streamq doctor` on that server, `streamq dlq replay` of its dead letter,
# and `streamq dashboard` answering with the queue's numbers.
# Exits non-zero if any step fails or the queue does not end as expected.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() { printf '\n==> %s\n' "$*"; }

step "Dependencies"
bash scripts/install-deps.sh

# Only what the demo runs (three example programs and the streamq command), as a unity build
# (a few source files per compiler run): a third of the compiler time of building everything
# file by file (docs/getting-started.md#build-time).
step "Build (Release, build-demo)"
cmake -S . -B build-demo -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD=ON \
  -DSTREAMQ_BUILD_EXAMPLES=ON -DSTREAMQ_BUILD_TESTS=OFF -DSTREAMQ_BUILD_BENCH=OFF >/dev/null
cmake --build build-demo -j"$(nproc)" --target streamq-producer streamq-stats streamq-worker streamq-cli
bin=build-demo/examples

step "Private redis-server"
# shellcheck source=scripts/private_redis.sh
source scripts/private_redis.sh
dashboard_pid=
cleanup() {
  local status=$?
  # Only the processes this script started, by their pids.
  if [[ -n $dashboard_pid ]]; then
    kill "$dashboard_pid" 2>/dev/null || true
    wait "$dashboard_pid" 2>/dev/null || true
  fi
  private_redis_stop
  exit "$status"
}
trap cleanup EXIT
private_redis_start
stream=demo_tasks
echo "redis-server pid $redis_pid listening on $url"

step "Enqueue 20 send_email, 5 generate_pdf, 5 reindex, 1 always_fail (max 2 retries), 1 remind delayed by 1 s, a backlog of 100 reindex, then 1 high-priority send_email"
enqueue() {
  local type=$1 count=$2 payload=$3
  shift 3
  local ids
  ids=$("$bin/streamq-producer" --url "$url" --stream "$stream" --type "$type" \
        --count "$count" --payload "$payload" "$@")
  printf '%-13s %2d task(s), first id %s\n' "$type" "$count" "$(head -n 1 <<<"$ids")"
}
enqueue send_email 20 '{"to":"user@example.com","template":"order_confirmation","order_id":12345}'
enqueue generate_pdf 5 '{"report_type":"monthly","period":"2025-12"}'
enqueue reindex 5 '{"index":"catalog","document":{"sku":"TB-205-55-R16"}}'
enqueue always_fail 1 '{"note":"fails on every attempt"}' --max-retries 2
enqueue remind 1 '{"what":"call the customer back"}' --delay-ms 1000
enqueue reindex 100 '{"index":"archive","document":{"sku":"backlog"}}'
enqueue send_email 1 '{"to":"vip@example.com","template":"urgent"}' --priority high

step "Stats before the worker runs"
"$bin/streamq-stats" --url "$url" --stream "$stream"

step "Worker (retry backoff up to 200 ms x 2^n; stops after 1.5 s without a task)"
"$bin/streamq-worker" --url "$url" --stream "$stream" --consumer demo-worker-1 \
  --concurrency 4 --exit-when-idle 1500 --retry-base-ms 200 | tee "$redis_dir/worker.out"

step "Stats after the worker drained the queue (JSON)"
"$bin/streamq-stats" --url "$url" --stream "$stream"

step "Stats after the worker drained the queue (Prometheus)"
"$bin/streamq-stats" --url "$url" --stream "$stream" --format prometheus

step "Dead-letter stream $stream:dlq"
redis-cli -p "$port" XRANGE "$stream:dlq" - +

step "Check"
length=$(redis-cli -p "$port" XLEN "$stream")
pending=$(redis-cli -p "$port" XPENDING "$stream" workers | head -n 1)
dlq=$(redis-cli -p "$port" XLEN "$stream:dlq")
dlq_type=$(redis-cli -p "$port" --raw XRANGE "$stream:dlq" - + | awk 'prev == "task_type" { print; exit } { prev = $0 }')
delayed=$(redis-cli -p "$port" ZCARD "$stream:delayed")
done=$(sed -n 's/^metrics: done=\([0-9]*\).*/\1/p' "$redis_dir/worker.out")
retried=$(sed -n 's/^metrics: .* retried=\([0-9]*\).*/\1/p' "$redis_dir/worker.out")
# The reminder ran after its delay, not before: due times are whole milliseconds of the
# server's clock (the enqueue's millisecond, floored, plus the delay), and the worker prints
# whole milliseconds since created_at, so 999 is on time; less would be early.
remind_ms=$(sed -n 's/^done   remind .*, ran \([0-9]*\) ms after it was enqueued.*/\1/p' "$redis_dir/worker.out")
# The high-priority task, enqueued last, was among the first tasks the worker ran.
vip_rank=$(grep '^done ' "$redis_dir/worker.out" | grep -n 'email to vip@example.com' | cut -d: -f1)
if [[ $done != 132 || $retried != 2 || $length != 0 || $pending != 0 || $delayed != 0 || $dlq != 1 ||
      $dlq_type != always_fail || -z $remind_ms || -z $vip_rank ]] || ((remind_ms < 999 || vip_rank > 8)); then
  echo "demo: FAILED: done ${done:-?}, retried ${retried:-?}, stream length $length, pending $pending," \
       "delayed $delayed, dead letters $dlq (${dlq_type:-none}), reminder after ${remind_ms:-?} ms," \
       "high-priority task done as number ${vip_rank:-?}; expected 132, 2, 0, 0, 0, 1 (always_fail)," \
       ">= 999 ms, <= 8" >&2
  exit 1
fi
step "Operate from the installed prefix (build-demo/prefix/bin/streamq)"
cmake --install build-demo --prefix build-demo/prefix >/dev/null
sq() { build-demo/prefix/bin/streamq --url "$url" "$@"; }
# This demo's server runs without AOF on purpose: doctor must say so and exit 4.
doctor_status=0
sq doctor --queue "$stream" | tee "$redis_dir/doctor.out" || doctor_status=$?
sq queues
sq dlq list "$stream"
sq dlq replay "$stream" --yes
"$bin/streamq-worker" --url "$url" --stream "$stream" --consumer demo-worker-2 \
  --concurrency 4 --exit-when-idle 1500 --retry-base-ms 200 | tee "$redis_dir/worker2.out"
replayed=$(sq dlq list "$stream" --format json | python3 -c \
  'import json, sys; t = json.load(sys.stdin)["tasks"]; print(t[0]["fields"].get("replay_count", "") if len(t) == 1 else "")')
if ((doctor_status != 4)) || ! grep -q 'appendonly is off' "$redis_dir/doctor.out" ||
   ! grep -q '^failed always_fail' "$redis_dir/worker2.out" || [[ $replayed != 1 ]]; then
  echo "demo: FAILED: doctor exit $doctor_status (expected 4, explaining appendonly), or the replayed" \
       "always_fail did not run again and come back with replay_count 1 (got '${replayed}')" >&2
  exit 1
fi
# The dashboard, on a free loopback port, asked for the queue's numbers as its page is, with the
# token it made up and printed (in the URL that logs a browser in).
board_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
# Started directly (not through the sq function, whose subshell would get the pid), and with
# its output away from this script's, so nothing keeps a pipe of the caller open.
build-demo/prefix/bin/streamq --url "$url" dashboard --listen "127.0.0.1:$board_port" \
  >/dev/null 2>"$redis_dir/dashboard.err" &
dashboard_pid=$!
board_dead=$(python3 - "$board_port" "$stream" "$redis_dir/dashboard.err" <<'PY'
import json, sys, time, urllib.parse, urllib.request
port, queue, log = sys.argv[1], sys.argv[2], sys.argv[3]
for _ in range(100):
    try:
        with open(log) as f:
            token = f.read().split("?token=", 1)[1].split()[0]
        url = "http://127.0.0.1:%s/api/queue?name=%s" % (port, urllib.parse.quote(queue))
        req = urllib.request.Request(url, headers={"Authorization": "Bearer " + token})
        with urllib.request.urlopen(req, timeout=5) as r:
            print(json.load(r)["stats"]["dlq_length"])
            break
    except (OSError, IndexError):
        time.sleep(0.1)
PY
)
echo "streamq dashboard on http://127.0.0.1:$board_port/ reports $board_dead dead letter(s) for $stream"
if [[ $board_dead != 1 ]]; then
  echo "demo: FAILED: the dashboard reported '${board_dead}' dead letters, expected 1; its stderr:" >&2
  cat "$redis_dir/dashboard.err" >&2
  exit 1
fi

echo "demo OK: 132 tasks done; the high-priority task, enqueued behind 132 others, ran as number" \
     "${vip_rank}; the reminder ran ${remind_ms} ms after its enqueue (delay 1000 ms); always_fail" \
     "was dead-lettered after 2 retries with backoff; nothing left pending or delayed; streamq doctor" \
     "flagged the missing AOF, and streamq dlq replay put always_fail back, where a worker ran it again" \
     "and it came back dead-lettered with replay_count 1; streamq dashboard served its numbers"
