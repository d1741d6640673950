#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A partitioned queue on Redis Cluster, on 1, 2 and 3 masters, in one run.

For each master count N it starts a private cluster of N masters (loopback, free ports, no
persistence, no replicas), gives partition i of the queue `bench` (the slot of `{bench:i}`) to
master i mod N and the other slots evenly, and runs streamq-bench against it:
  enqueue-batch  --count C --batch 1000 --partitions P    (one producer, one connection per master)
  drain          --count C --partitions P --prefetch 64*P (one consumer: a reader per partition)
Three interleaved rounds; it prints the medians and each one's ratio to the 1-master figure.
Every server it started is stopped by pid at the end.

Usage: bench/cluster.py [build-dir]   (default build-bench, configured Release if missing)
Environment: STREAMQ_BENCH_PARTITIONS (default 6), STREAMQ_BENCH_COUNT (default 300000).
"""
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import redis

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SLOTS = 16384


def build(build_dir):
    bench = os.path.join(build_dir, "bench", "streamq-bench")
    if not os.access(bench, os.X_OK):
        subprocess.run(["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release", "-DSTREAMQ_BUILD_BENCH=ON",
                        "-DSTREAMQ_BUILD_TESTS=OFF", "-DSTREAMQ_BUILD_EXAMPLES=OFF"], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run(["cmake", "--build", build_dir, "-j2", "--target", "streamq-bench"], check=True,
                       stdout=subprocess.DEVNULL)
    return bench


def free(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def cluster_port():
    """A free port whose cluster bus port (+10000) is a port, and free."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + 10000 <= 65535 and free(port + 10000):
            return port
    raise RuntimeError("no free port pair for a cluster node")


class Cluster:
    def __init__(self, masters, partition_slots):
        self.procs, self.dirs, self.ports = [], [], []
        for _ in range(masters):
            port = cluster_port()
            d = tempfile.mkdtemp(prefix="streamq-bench-cluster-")
            self.procs.append(subprocess.Popen(
                ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 "--dir", d, "--cluster-enabled", "yes", "--daemonize", "no", "--loglevel", "warning",
                 "--logfile", os.path.join(d, "redis.log")]))
            self.dirs.append(d)
            self.ports.append(port)
        clients = [redis.Redis(port=p) for p in self.ports]
        for c in clients:
            self.wait(lambda c=c: c.ping())
        owner = [s * masters // SLOTS for s in range(SLOTS)]
        for i, slot in enumerate(partition_slots):
            owner[slot] = i % masters
        for m, c in enumerate(clients):
            c.execute_command("CLUSTER", "ADDSLOTS", *[s for s in range(SLOTS) if owner[s] == m])
        for p in self.ports[1:]:
            clients[0].execute_command("CLUSTER", "MEET", "127.0.0.1", p)
        self.wait(lambda: all(c.execute_command("CLUSTER", "INFO").decode().find("cluster_state:ok") >= 0
                              for c in clients))
        self.url = "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports)

    @staticmethod
    def wait(predicate, seconds=20):
        deadline = time.time() + seconds
        while time.time() < deadline:
            try:
                if predicate():
                    return
            except redis.exceptions.ConnectionError:
                pass
            time.sleep(0.05)
        raise RuntimeError("the cluster did not come up")

    def flush(self):
        for p in self.ports:
            redis.Redis(port=p).flushall()

    def stop(self):
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            proc.wait()
        for d in self.dirs:
            subprocess.run(["rm", "-rf", d], check=False)


def run(bench, *args):
    """Runs one scenario; its tasks/s (None for preload, which measures nothing)."""
    out = subprocess.run([bench, *args], check=True, capture_output=True, text=True).stdout
    fields = dict(item.split("=", 1) for item in out.split() if "=" in item)
    return float(fields["tasks_per_s"]) if "tasks_per_s" in fields else None


def main():
    bench = build(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build-bench"))
    partitions = int(os.environ.get("STREAMQ_BENCH_PARTITIONS", "6"))
    count = os.environ.get("STREAMQ_BENCH_COUNT", "300000")
    # The slot of each partition (any cluster-enabled node computes it; a throwaway one here).
    probe = Cluster(1, [])
    slots = [redis.Redis(port=probe.ports[0]).execute_command("CLUSTER", "KEYSLOT", f"{{bench:{i}}}")
             for i in range(partitions)]
    probe.stop()
    clusters = {}
    results = {n: {"enqueue-batch": [], "drain": []} for n in (1, 2, 3)}
    try:
        for n in (1, 2, 3):
            clusters[n] = Cluster(n, slots)
        common = ["--stream", "bench", "--count", count, "--partitions", str(partitions)]
        for _ in range(3):  # interleaved rounds: the machine is shared and noisy
            for n in (1, 2, 3):
                url = clusters[n].url
                results[n]["enqueue-batch"].append(run(bench, "enqueue-batch", "--url", url, "--batch", "1000", *common))
                clusters[n].flush()
                run(bench, "preload", "--url", url, *common)
                results[n]["drain"].append(run(bench, "drain", "--url", url, "--prefetch", str(64 * partitions), *common))
                clusters[n].flush()
    finally:
        for c in clusters.values():
            c.stop()
    print(f"machine: {os.cpu_count()} cores; redis-server "
          f"{subprocess.run(['redis-server', '--version'], capture_output=True, text=True).stdout.split()[2].removeprefix('v=')}"
          f"; one queue of {partitions} partitions, partition i on master i mod N; {count} tasks per run")
    print(f"{'masters':<8} {'enqueue-batch/s':>16} {'ratio':>6} {'drain/s':>10} {'ratio':>6}")
    base = {k: statistics.median(results[1][k]) for k in ("enqueue-batch", "drain")}
    for n in (1, 2, 3):
        e = statistics.median(results[n]["enqueue-batch"])
        d = statistics.median(results[n]["drain"])
        print(f"{n:<8} {e:>16.0f} {e / base['enqueue-batch']:>6.2f} {d:>10.0f} {d / base['drain']:>6.2f}")
    print("rounds: " + "; ".join(f"{n} masters: enqueue-batch {[round(x) for x in results[n]['enqueue-batch']]}, "
                                 f"drain {[round(x) for x in results[n]['drain']]}" for n in (1, 2, 3)))


if __name__ == "__main__":
    main()
