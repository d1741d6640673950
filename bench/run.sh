#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs the whole comparison in one go on a private redis-server (loopback, free port, no
# persistence): redis-benchmark's XADD of a streamq-sized task as the physical reference,
# then every streamq scenario, and prints one table with ratios measured in this run.
# Usage: bench/run.sh [build-dir]   (default: build-bench, configured Release here)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-bench}
if [[ ! -x $build/bench/streamq-bench ]]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DSTREAMQ_BUILD_BENCH=ON -DSTREAMQ_BUILD_TESTS=OFF -DSTREAMQ_BUILD_EXAMPLES=OFF >/dev/null
  cmake --build "$build" -j2 --target streamq-bench >/dev/null
fi
bench=$build/bench/streamq-bench

# shellcheck source=bench/private_redis.sh
source bench/private_redis.sh

# The same fields and sizes as a streamq task (see bench/streamq_bench.cpp).
task=(task_id 3f2c1a9e-7b4d-4c8e-9f10-2a3b4c5d6e7f task_type send_email
      payload '{"to":"user@example.com","template":"order_confirmation","order_id":12345}'
      created_at 2026-11-29T18:00:00.123456 max_retries 3 retry_count 0)
ref_cpu=$redis_dir/ref_cpu  # removed with the server's folder
ref() {  # ref <requests> <pipeline> -> requests per second; its CPU per request (µs) in $ref_cpu
  local out times
  out=$({ TIMEFORMAT='%3U %3S'; time redis-benchmark -p "$port" -c 1 -n "$1" -P "$2" -q XADD bench:ref MAXLEN '~' 10000 '*' "${task[@]}" 2>/dev/null; } 2>"$ref_cpu.t")
  times=$(tail -1 "$ref_cpu.t")
  awk -v n="$1" -v t="$times" 'BEGIN { split(t, p, " "); printf "%.2f", (p[1] + p[2]) * 1e6 / n }' >"$ref_cpu"
  tr '\r' '\n' <<<"$out" | sed -n 's/.*: \([0-9.]*\) requests per second.*/\1/p' | tail -1
}
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }
run() { "$bench" "$@" --url "$url"; }
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

# The machine is shared and noisy: each throughput pair (reference, streamq) is measured three
# times, interleaved, and the medians are compared.
p1=() p8=() p64=() p1cpu=() p64cpu=() enq=() trm=() bat=() shr=() per=() asy=() hxl=()
enqcpu=() trmcpu=() batcpu=()
for round in 1 2 3; do
  p1+=("$(ref 100000 1)")
  p1cpu+=("$(cat "$ref_cpu")")
  single=$(run enqueue --stream b:enq --count 100000); cli DEL b:enq
  enq+=("$(field tasks_per_s "$single")")
  enqcpu+=("$(field cpu_us_per_task "$single")")
  # The same with Overflow::trim_oldest: a plain XADD instead of the reject policy's script.
  trimmed=$(run enqueue --stream b:trim --count 100000 --overflow trim_oldest); cli DEL b:trim
  trm+=("$(field tasks_per_s "$trimmed")")
  trmcpu+=("$(field cpu_us_per_task "$trimmed")")
  # The best a blocking hiredis client does: the same XADD in a bare loop (the client's share of
  # the gap to redis-benchmark).
  hxl+=("$(field tasks_per_s "$(run enqueue-raw --stream b:hxl --count 100000)")"); cli DEL b:hxl
  p64+=("$(ref 1000000 64)")
  p64cpu+=("$(cat "$ref_cpu")")
  batch=$(run enqueue-batch --stream b:batch --count 1000000 --batch 1000); cli DEL b:batch
  bat+=("$(field tasks_per_s "$batch")")
  batcpu+=("$(field cpu_us_per_task "$batch")")
  # One Producer shared by 8 threads (merged and pipelined together) against its reference, the
  # same 8 tasks in flight on one connection (XADD -c 1 -P 8), and against 8 Producers, one per
  # thread; then enqueue_async from one thread.
  p8+=("$(ref 400000 8)")
  shared=$(run enqueue-shared --stream b:shr --count 200000 --threads 8); cli DEL b:shr
  shr+=("$(field tasks_per_s "$shared")")
  per_thread=$(run enqueue-per-thread --stream b:per --count 200000 --threads 8); cli DEL b:per
  per+=("$(field tasks_per_s "$per_thread")")
  async=$(run enqueue-async --stream b:asy --count 200000); cli DEL b:asy
  asy+=("$(field tasks_per_s "$async")")
done
cli DEL bench:ref
ref_p1=$(median "${p1[@]}")
ref_hiredis=$(median "${hxl[@]}")
ref_p64=$(median "${p64[@]}")
ref_p8=$(median "${p8[@]}")
enqueue=" tasks_per_s=$(median "${enq[@]}") peak_rss_mb=$(field peak_rss_mb "$single")"
trimmed=" tasks_per_s=$(median "${trm[@]}") peak_rss_mb=$(field peak_rss_mb "$trimmed")"
batch=" tasks_per_s=$(median "${bat[@]}") peak_rss_mb=$(field peak_rss_mb "$batch")"
shared_connections=$(field connections "$shared")
shared=" tasks_per_s=$(median "${shr[@]}") peak_rss_mb=$(field peak_rss_mb "$shared")"
per_thread=" tasks_per_s=$(median "${per[@]}") peak_rss_mb=$(field peak_rss_mb "$per_thread")"
async=" tasks_per_s=$(median "${asy[@]}") peak_rss_mb=$(field peak_rss_mb "$async")"
# Drain against its reference, a bare hiredis loop doing the same Redis work per task
# (XREADGROUP COUNT 64, XACK + XDEL pipelined with the next read): five interleaved rounds, as
# both are bound by wake-up latencies that vary more on this machine than throughput does.
dr=() raw=() lv=() tr=() pr=() pf=() cold=() tk=() t1=()
for round in 1 2 3 4 5; do
  run preload --stream b:drain --count 200000 >/dev/null
  drain=$(run drain --stream b:drain --count 200000); cli DEL b:drain
  dr+=("$(field tasks_per_s "$drain")")
  if ((round <= 3)); then
    # Tracked tasks (EnqueueOptions::retention): a record and events per task. The records
    # expire a minute after the run: deleted here by pattern, with the events stream.
    run preload --stream b:tr --count 100000 --tracked 1 >/dev/null
    tracked=$(run drain --stream b:tr --count 100000 --tracked 1)
    tr+=("$(field tasks_per_s "$tracked")")
    redis-cli -p "$port" --scan --pattern 'b:tr:task:*' | xargs -r -n 500 redis-cli -p "$port" DEL >/dev/null
    cli DEL b:tr b:tr:events
    # The process executor (HandlerExecutor::process): its pool warm (the rate after the first
    # task), and every task in a new child (tasks_per_child 1: what a replacement costs).
    run preload --stream b:pr --count 50000 >/dev/null
    processed=$(run drain --stream b:pr --count 50000 --executor process)
    pr+=("$(field tasks_per_s "$processed")")
    cli DEL b:pr
    run preload --stream b:pf --count 3000 >/dev/null
    fresh=$(run drain --stream b:pf --count 3000 --executor process --tasks-per-child 1)
    pf+=("$(field tasks_per_s "$fresh")")
    cold+=("$(field cold_start_ms "$processed")")
    cli DEL b:pf
  fi
  run preload --stream b:raw --count 200000 >/dev/null
  raw+=("$(field tasks_per_s "$(run drain-raw --stream b:raw --count 200000)")"); cli DEL b:raw
  if ((round <= 3)); then
    levels=$(run drain-levels --stream b:lv --count 198000); cli DEL b:lv b:lv:p:high b:lv:p:low
    lv+=("$(field tasks_per_s "$levels")")
    # Fair queues (EnqueueOptions::tenant): the same 200,000 tasks over 1,000 tenants, and all
    # in one tenant's backlog (a drained tenant leaves no keys: the stream and pass stay).
    run preload --stream b:tk --count 200000 --tenants 1000 >/dev/null
    tenants_1000=$(run drain --stream b:tk --count 200000)
    tk+=("$(field tasks_per_s "$tenants_1000")")
    redis-cli -p "$port" --scan --pattern 'b:tk*' | xargs -r -n 500 redis-cli -p "$port" DEL >/dev/null
    run preload --stream b:t1 --count 200000 --tenants 1 >/dev/null
    tenants_1=$(run drain --stream b:t1 --count 200000)
    t1+=("$(field tasks_per_s "$tenants_1")")
    redis-cli -p "$port" --scan --pattern 'b:t1*' | xargs -r -n 500 redis-cli -p "$port" DEL >/dev/null
  fi
done
ref_drain=$(median "${raw[@]}")
drain=" tasks_per_s=$(median "${dr[@]}") peak_rss_mb=$(field peak_rss_mb "$drain")"
drain_levels=" tasks_per_s=$(median "${lv[@]}") peak_rss_mb=$(field peak_rss_mb "$levels")"
drain_tracked=" tasks_per_s=$(median "${tr[@]}") peak_rss_mb=$(field peak_rss_mb "$tracked")"
drain_tenants_1000=" tasks_per_s=$(median "${tk[@]}") peak_rss_mb=$(field peak_rss_mb "$tenants_1000")"
drain_tenants_1=" tasks_per_s=$(median "${t1[@]}") peak_rss_mb=$(field peak_rss_mb "$tenants_1")"
drain_process=" tasks_per_s=$(median "${pr[@]}") peak_rss_mb=$(field tree_rss_mb "$processed")"
process_fresh=" tasks_per_s=$(median "${pf[@]}") peak_rss_mb=$(field tree_rss_mb "$fresh")"
wait_rt=$(run wait --stream b:wait --count 2000 --tracked 1); cli DEL b:wait b:wait:events
progress=$(run progress --stream b:prog --count 1000000); cli DEL b:prog b:prog:events
# A chord of 1,000 tasks against the same 1,000 tasks tracked (three interleaved rounds inside).
chord=$(run chord --stream b:chord --count 1000)
redis-cli -p "$port" --scan --pattern 'b:chord:*' | xargs -r -n 500 redis-cli -p "$port" DEL >/dev/null
# The same with 4 partitions: the callback in one, the children in all four (their ends carried
# to the callback's partition by the courier), against the same tasks tracked in 4 partitions.
chord_p4=$(run chord --stream b:chp --count 1000 --partitions 4)
redis-cli -p "$port" --scan --pattern '{b:chp:*' | xargs -r -n 500 redis-cli -p "$port" DEL >/dev/null
# The same with the children in another queue (FlowNode::queue), run by that queue's consumer
# (their ends carried to the callback's queue by its courier).
chord_away=$(run chord --stream b:cha --count 1000 --away 1)
redis-cli -p "$port" --scan --pattern 'b:cha:*' | xargs -r -n 500 redis-cli -p "$port" DEL >/dev/null
latency=$(run latency --stream b:lat --count 25000 --rate 5000); cli DEL b:lat
retry=$(run retry --stream b:retry --count 50000); cli DEL b:retry
retry_backoff=$(run retry-backoff --stream b:retryb --count 50000); cli DEL b:retryb b:retryb:delayed
forward=$(run forward --stream b:fwd --count 200000); cli DEL b:fwd b:fwd:delayed
# Fairness: tenant A's 100,000 tasks ahead of 9 tenants' 100 each (a FIFO queue: the same tasks
# without tenants; weights: the 9 others at weight 3); then 100,000 tenants with a task each.
fair_fifo=$(run fairness --stream b:ff --count 100000 --tenants 0)
fair=$(run fairness --stream b:fa --count 100000 --tenants 1)
fair_weights=$(run fairness --stream b:fw --count 100000 --tenants 1 --weight 3)
tenants_memory=$(run tenants-memory --stream b:tm --count 100000)
for pattern in 'b:f*' 'b:tm*'; do
  redis-cli -p "$port" --scan --pattern "$pattern" | xargs -r -n 500 redis-cli -p "$port" DEL >/dev/null
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
echo
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(redis-server --version | awk '{print $3}'), loopback, no persistence"
printf '%-16s %12s %8s %28s %10s\n' scenario tasks/s ratio latency_us_p50/p90/p99/max peak_rss_mb
printf '%-16s %12.0f %8s %28s %10s\n' "ref XADD -P 1" "$ref_p1" 1.00 - -
printf '%-16s %12.0f %8s %28s %10s\n' "ref hiredis loop" "$ref_hiredis" "$(ratio "$ref_hiredis" "$ref_p1")" - -
printf '%-16s %12.0f %8s %28s %10s\n' "ref XADD -P 8" "$ref_p8" 1.00 - -
printf '%-16s %12.0f %8s %28s %10s\n' "ref XADD -P 64" "$ref_p64" 1.00 - -
printf '%-16s %12.0f %8s %28s %10s\n' "ref drain-raw" "$ref_drain" 1.00 - -
line() {  # line <name> <result> <reference>
  local lat=-
  [[ -n $(field p50_us "$2") ]] && lat="$(field p50_us "$2")/$(field p90_us "$2")/$(field p99_us "$2")/$(field max_us "$2")"
  local r=-
  [[ -n $3 ]] && r=$(ratio "$(field tasks_per_s "$2")" "$3")
  printf '%-16s %12s %8s %28s %10s\n' "$1" "$(field tasks_per_s "$2")" "$r" "$lat" "$(field peak_rss_mb "$2")"
}
line enqueue "$enqueue" "$ref_p1"
line enqueue-trim "$trimmed" "$ref_p1"
line enqueue-batch "$batch" "$ref_p64"
line enqueue-shared "$shared" "$ref_p8"
line enqueue-per-thread "$per_thread" "$ref_p8"
line enqueue-async "$async" "$ref_p64"
line drain "$drain" "$ref_drain"
line drain-3-levels "$drain_levels" "$ref_drain"
line drain-tracked "$drain_tracked" "$ref_drain"
line drain-tenants-1000 "$drain_tenants_1000" "$ref_drain"
line drain-tenants-1 "$drain_tenants_1" "$ref_drain"
line tenants-100k "$tenants_memory" "$ref_drain"
line drain-process "$drain_process" "$ref_drain"
line process-fresh "$process_fresh" "$ref_drain"
line wait-round-trip "$wait_rt" ""
line set_progress "$progress" ""
line chord-1000 "$chord" ""
line chord-1000-p4 "$chord_p4" ""
line chord-1000-away "$chord_away" ""
line "latency@5k/s" "$latency" ""
line retry "$retry" ""
line retry-backoff "$retry_backoff" ""
line forward "$forward" ""
echo
echo "ratios: enqueue and enqueue-trim (Overflow::trim_oldest: a plain XADD, no script) vs XADD -c 1 -P 1 (vs the bare hiredis loop of the same XADD, 'ref hiredis loop': enqueue $(ratio "$(median "${enq[@]}")" "$ref_hiredis"), enqueue-trim $(ratio "$(median "${trm[@]}")" "$ref_hiredis")); enqueue-shared and enqueue-per-thread vs XADD -c 1 -P 8 (enqueue-shared vs enqueue-per-thread: $(ratio "$(median "${shr[@]}")" "$(median "${per[@]}")")); enqueue-batch (batch 1000) and enqueue-async vs XADD -c 1 -P 64; drain, drain-3-levels, drain-tracked, drain-process and process-fresh vs drain-raw;"
echo "fairness (1 ms handlers, two consumers of concurrency 8; tenant A's 100,000 tasks queued, 9 tenants' 100 each 0.5 s later): tasks started from those 900 enqueued to the last of them started: served in turn $(field between "$fair"), the 9 at weight 3 $(field between "$fair_weights"), FIFO (no tenants) $(field between "$fair_fifo");"
echo "drain-tenants-1000: 200,000 tasks over 1,000 tenants; drain-tenants-1: in one tenant; tenants-100k: 100,000 tenants with a task each, drained; server memory per tenant: $(field with_work_bytes "$tenants_memory") bytes with its task waiting, $(field drained_bytes "$tenants_memory") once drained, $(field settings_bytes "$tenants_memory") with settings of its own (Inspector::set_tenant);"
echo "drain-process vs drain (the thread executor): $(ratio "$(median "${pr[@]}")" "$(median "${dr[@]}")"); process-fresh vs drain: $(ratio "$(median "${pf[@]}")" "$(median "${dr[@]}")")"
echo "drain-process: the process executor, 4 children, after the first task (cold start, run() to the first task's end: ${cold[*]} ms);"
echo "process-fresh: a new child for every task (tasks_per_child 1, what a replacement after a kill costs); their peak_rss_mb is the worker's, the fork server's"
echo "and the children's resident sets summed (shared pages counted in each; PSS: $(field tree_pss_mb "$processed") MB for drain-process)"
echo "client CPU per task (user + system, µs, medians; the kernel's wake-ups included, so load on the machine moves it too): XADD -P 1 $(median "${p1cpu[@]}"), enqueue $(median "${enqcpu[@]}"), enqueue-trim $(median "${trmcpu[@]}"); XADD -P 64 $(median "${p64cpu[@]}"), enqueue-batch $(median "${batcpu[@]}")"
echo "enqueue-shared: 8 threads calling enqueue on one Producer, over ${shared_connections} connection(s); enqueue-per-thread: the same 8 threads, a Producer each; enqueue-async: enqueue_async from one thread, at most 4096 unanswered;"
echo "wait-round-trip: enqueue_and_wait one after another (2,000), tasks/s = round trips/s; set_progress: one handler's calls in a tight loop (1,000,000), tasks/s = calls/s, $(field writes "$progress") writes (coalesced: at most one per 100 ms);"
echo "chord-1000: enqueue_flow of a chord of 1,000 tasks and its callback, run to the callback's end (tasks/s: the 1,000 over that time); $(field chord_overhead "$chord")x the time of the same 1,000 tasks tracked, enqueued with enqueue_batch; the callback started $(field parent_start_ms "$chord") ms after the last child's handler returned (medians of three);"
echo "chord-1000-p4: the same in a queue of 4 partitions (children in all four, the callback in one): $(field chord_overhead "$chord_p4")x the same tasks tracked in 4 partitions; the callback started $(field parent_start_ms "$chord_p4") ms after the last child's handler returned;"
echo "chord-1000-away: the children in another queue, run by a consumer of their own: $(field chord_overhead "$chord_away")x the same tasks tracked in one queue; the callback started $(field parent_start_ms "$chord_away") ms after the last child's handler returned;"
echo "throughput pairs are medians of interleaved rounds, three (five for drain) (raw: P1 ${p1[*]} | hiredis loop ${hxl[*]} | enqueue ${enq[*]} | enqueue-trim ${trm[*]} | P64 ${p64[*]} | batch ${bat[*]} | P8 ${p8[*]} | shared ${shr[*]} | per-thread ${per[*]} | async ${asy[*]} | drain-raw ${raw[*]} | drain ${dr[*]} | drain-3-levels ${lv[*]} | drain-tracked ${tr[*]} | drain-tenants-1000 ${tk[*]} | drain-tenants-1 ${t1[*]} | drain-process ${pr[*]} | process-fresh ${pf[*]})"
