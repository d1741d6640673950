#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Soak test: producers and workers at a steady rate for a
long time, with a worker killed (SIGKILL) and restarted under the same name every so often.

It runs a private redis-server on a free loopback port, one producer process and --workers
worker processes (tests/streamq_test_worker of a build with -DSTREAMQ_BUILD_TESTS=ON), kills
worker 2, 3, ... in turn (worker 1 is never killed: its RSS and open files are the ones that
must stay flat), and prints one row per interval:

  seconds, tasks enqueued (XINFO STREAM entries-added), tasks run (distinct), tasks run again,
  backlog (XLEN), pending, Redis clients and used memory, RSS and open fds of worker 1 and of
  the producer. Needs redis-server >= 7.0 (BITCOUNT ... BIT, XINFO STREAM entries-added).

At the end the producer stops, the workers drain the queue, and it prints lost (enqueued but
never run: must be 0), run again (at-least-once after the kills), and the first and last
figures of what must stay flat. Exit status 1 when a task was lost, or a worker ended without
being killed.

  bench/soak.py [--build build] [--minutes 30] [--rate 500] [--workers 3]
                [--kill-every 60] [--sample-every 60]

(Debian's python3 with python3-redis, which scripts/install-deps.sh installs.)
"""
import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import redis


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def open_fds(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="build directory with tests/streamq_test_worker")
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--rate", type=int, default=500, help="tasks enqueued per second")
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--kill-every", type=float, default=60, help="seconds between worker kills")
    ap.add_argument("--sample-every", type=float, default=60, help="seconds between rows")
    args = ap.parse_args()
    if args.workers < 2:
        ap.error("--workers must be >= 2 (worker 1 is never killed)")
    binary = os.path.join(args.build, "tests", "streamq_test_worker")
    if not os.access(binary, os.X_OK):
        sys.exit(f"soak: no {binary}: build with -DSTREAMQ_BUILD_TESTS=ON (or pass --build)")

    workdir = tempfile.mkdtemp(prefix="streamq-soak-")
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", workdir, "--logfile", os.path.join(workdir, "redis.log")])
    r = redis.Redis(port=port, decode_responses=True)
    for _ in range(200):
        try:
            r.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    url = f"redis://127.0.0.1:{port}"
    stream = "soak"
    # Leases renewed every second, reclaimed after 5 s of silence: a killed worker's tasks are
    # back in others' hands within seconds.
    worker_args = ["concurrency=2", "prefetch=16", "min_idle_ms=5000", "heartbeat_ms=1000", "reclaim_ms=1000"]
    logs = open(os.path.join(workdir, "workers.log"), "ab")

    def start_worker(i):
        return subprocess.Popen([binary, url, stream, f"w{i}", *worker_args], stdout=logs, stderr=logs)

    workers = {i: start_worker(i) for i in range(1, args.workers + 1)}
    seconds = int(args.minutes * 60)
    producer = subprocess.Popen([binary, url, stream, "produce", str(args.rate), str(seconds)],
                                stdout=subprocess.PIPE, stderr=logs, text=True)

    def sample(t):
        info = r.xinfo_stream(stream) if r.exists(stream) else {}
        pending = sum(g["pending"] for g in r.xinfo_groups(stream)) if r.exists(stream) else 0
        clients = r.info("clients")["connected_clients"]
        memory = r.info("memory")["used_memory"]
        return {
            "t": t, "enqueued": info.get("entries-added", 0), "run": r.bitcount(f"{stream}:seen"),
            "again": int(r.get(f"{stream}:again") or 0), "backlog": r.xlen(stream), "pending": pending,
            "clients": clients, "used_memory": memory,
            "w1_rss_kb": rss_kb(workers[1].pid), "w1_fds": open_fds(workers[1].pid),
            "producer_rss_kb": rss_kb(producer.pid), "producer_fds": open_fds(producer.pid),
        }

    columns = ["t", "enqueued", "run", "again", "backlog", "pending", "clients", "used_memory",
               "w1_rss_kb", "w1_fds", "producer_rss_kb", "producer_fds"]
    print(f"soak: {args.minutes:g} min, {args.rate} tasks/s, {args.workers} workers, a kill every "
          f"{args.kill_every:g} s (workers 2..{args.workers}); redis 127.0.0.1:{port}; logs in {workdir}")
    print(" ".join(f"{c:>15}" for c in columns), flush=True)
    rows = []
    kills = 0
    start = time.monotonic()
    next_kill = start + args.kill_every
    next_sample = start
    victim = 2
    exits = []  # workers that ended without being killed
    try:
        while producer.poll() is None:
            now = time.monotonic()
            for i, w in workers.items():  # a worker must never end on its own
                if w.poll() is not None:
                    exits.append(f"w{i} exited with status {w.returncode} at {int(now - start)} s")
                    print(f"soak: {exits[-1]}; restarting it", flush=True)
                    workers[i] = start_worker(i)
            if now >= next_sample:
                row = sample(int(now - start))
                rows.append(row)
                print(" ".join(f"{row[c]:>15}" for c in columns), flush=True)
                next_sample += args.sample_every
            if now >= next_kill:
                workers[victim].kill()
                workers[victim].wait()
                workers[victim] = start_worker(victim)  # same consumer name, at once
                kills += 1
                victim = victim + 1 if victim < args.workers else 2
                next_kill += args.kill_every
            time.sleep(0.2)
        out, _ = producer.communicate()
        if producer.returncode != 0 or not out.split():
            print(f"soak: the producer failed (status {producer.returncode}); see {workdir}")
            return 1
        produced = int(out.split()[-1])
        deadline = time.monotonic() + 120
        while r.bitcount(f"{stream}:seen") < produced and time.monotonic() < deadline:
            time.sleep(0.5)
        row = sample(int(time.monotonic() - start))
        rows.append(row)
        print(" ".join(f"{row[c]:>15}" for c in columns), flush=True)
        # Only tasks 0..produced-1 exist: a bit beyond them would be a task nobody enqueued.
        run = int(r.execute_command("BITCOUNT", f"{stream}:seen", 0, max(produced - 1, 0), "BIT")) if produced else 0
        beyond = r.bitcount(f"{stream}:seen") - run
        lost = produced - run
        print(f"\nsoak: enqueued {produced}, run {run}, lost {lost}, run again {row['again']} "
              f"(after {kills} kills), bits beyond the last task {beyond}, dead letters "
              f"{r.xlen(stream + ':dlq')}")
        settled = rows[1:] if len(rows) > 2 else rows  # the first row is before any work
        for c in ["clients", "used_memory", "w1_rss_kb", "w1_fds", "producer_rss_kb", "producer_fds"]:
            values = [x[c] for x in settled if x[c] >= 0]  # -1: the producer had exited
            if not values:
                continue
            print(f"soak: {c:>16}: first {values[0]}, last {values[-1]}, min {min(values)}, max {max(values)}")
        print(f"soak: workers that ended on their own: {len(exits)}" + "".join(f"\n  {e}" for e in exits))
        ok = lost == 0 and beyond == 0 and not exits
        if ok:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"soak: FAILED; the workers' and the server's logs are in {workdir}")
        return 0 if ok else 1
    finally:
        if producer.poll() is None:
            producer.kill()
        for w in workers.values():
            if w.poll() is None:
                w.send_signal(signal.SIGTERM)
        for w in workers.values():
            try:
                w.wait(timeout=15)
            except subprocess.TimeoutExpired:
                w.kill()
        server.terminate()
        server.wait()


if __name__ == "__main__":
    sys.exit(main())
