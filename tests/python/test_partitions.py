# SPDX-License-Identifier: MIT
"""Partitioned queues (ProducerOptions::partitions, docs/cluster.md): a Python task lands in the
partition the C++ producer (the streamq command, `--partitions`) picks for the same task, a C++
worker of the partitioned queue runs it, and the Python waits and Inspector find it there."""
from __future__ import annotations

from typing import Any, Callable

import pytest

from conftest import wait_for
from streamq import ConfigError, Inspector, Producer, chord
from streamq._partitions import crc16, partition_stream

KEYS = ["order-1", "order-2", "customer-42", "é-unicode", "a", "b", "c", "invoice/7", "x" * 300, "{tag}"]
TENANTS = [k for k in KEYS if len(k.encode()) <= 256]


def partition_holding(r: Any, stream: str, partitions: int, task_id: str) -> int:
    """The index of the partition whose normal stream holds task ``task_id``."""
    found = [i for i in range(partitions)
             if any(f.get("task_id") == task_id for _, f in r.xrange(partition_stream(stream, partitions, i)))]
    assert len(found) == 1, found
    return found[0]


def test_crc16_is_xmodem() -> None:
    assert crc16(b"123456789") == 0x31C3  # the XMODEM check value (Redis Cluster's key slots)
    assert crc16(b"") == 0


def test_partition_streams_are_named_as_the_cxx_library_names_them() -> None:
    assert partition_stream("orders", 4, 3) == "{orders:3}"
    assert partition_stream("{orders}", 4, 0) == "{orders:0}"
    assert partition_stream("orders", 1, 0) == "orders"


@pytest.mark.parametrize("option, flag", [("partition_key", "--partition-key"), ("tenant", "--tenant")])
def test_a_keyed_task_lands_where_the_cxx_producer_puts_it(server: str, stream: str, r: Any, cli: Any,
                                                           option: str, flag: str) -> None:
    with Producer(url=server, stream=stream, partitions=8) as p:
        for key in KEYS if option == "partition_key" else TENANTS:
            py_id = p.enqueue("work", {}, **{option: key})
            cxx_id = cli("enqueue", stream, "work", "{}", "--partitions", "8", flag, key).strip()
            if option == "tenant":
                continue  # a tenant's task waits in its tenant's backlog: compared below
            assert partition_holding(r, stream, 8, py_id) == partition_holding(r, stream, 8, cxx_id), key
            assert partition_holding(r, stream, 8, py_id) == crc16(key.encode()) % 8
    assert r.xlen(stream) == 0  # nothing in the base stream
    if option == "tenant":
        for key in TENANTS:
            holding = [i for i in range(8) if r.exists(partition_stream(stream, 8, i) + ":tenant:" + key)]
            assert holding == [crc16(key.encode()) % 8] and r.llen(
                partition_stream(stream, 8, holding[0]) + ":tenant:" + key) == 2, key


def test_a_unique_tasks_key_picks_its_partition(server: str, stream: str, r: Any) -> None:
    with Producer(url=server, stream=stream, partitions=4) as p:
        task_id = p.enqueue("work", {}, unique_for=60, unique_key="invoice-9")
        home = partition_stream(stream, 4, crc16(b"invoice-9") % 4)
        assert r.get(home + ":unique:invoice-9") == task_id
        assert partition_holding(r, stream, 4, task_id) == crc16(b"invoice-9") % 4


def test_tasks_without_a_key_go_to_each_partition_in_turn(server: str, stream: str, r: Any) -> None:
    with Producer(url=server, stream=stream, partitions=4) as p:
        ids = [p.enqueue("work", {}) for _ in range(8)]
    places = [partition_holding(r, stream, 4, i) for i in ids]
    assert places[4:] == places[:4] and sorted(places[:4]) == [0, 1, 2, 3]
    assert all((b - a) % 4 == 1 for a, b in zip(places, places[1:]))


def test_a_cxx_worker_of_the_partitioned_queue_runs_python_tasks(server: str, stream: str, r: Any,
                                                                 worker: Callable[..., Any]) -> None:
    worker("partitions=4", "concurrency=4")
    with Producer(url=server, stream=stream, partitions=4, retention=60) as p:
        single = [p.enqueue("work", {}, partition_key=f"k{i}") for i in range(6)]
        batch = p.enqueue_batch([("work", {"n": i}) for i in range(150)] +
                                [("work", {}, {"partition_key": "k1", "priority": "high"})])
        for task_id in single + batch[:3]:
            assert p.wait(task_id, timeout=20).state == "done"
        b = p.open_batch("py-part-batch")
        members = [p.enqueue("work", {}, batch=b) for _ in range(3)]
        assert p.close_batch(b)
        for task_id in members:
            p.wait(task_id, timeout=20)
    wait_for(lambda: r.hlen(stream + ":done") == len(single) + len(batch) + 3, what="every task done")
    assert r.xlen(stream) == 0
    home = partition_stream(stream, 4, crc16(b"py-part-batch") % 4)
    assert r.hget(home + ":batches:py-part-batch", "total") == "3"
    inspector = Inspector(url=server, stream=stream, partitions=4)
    record = inspector.record(single[0])
    assert record is not None and record.state == "done"
    assert inspector.batch("py-part-batch") is not None


def test_the_inspector_sums_the_partitions(server: str, stream: str) -> None:
    with Producer(url=server, stream=stream, partitions=4) as p:
        for i in range(8):
            p.enqueue("work", {}, partition_key=f"k{i}")
        p.enqueue("work", {}, delay=60)
        p.enqueue("work", {}, tenant="acme")
    stats = Inspector(url=server, stream=stream, partitions=4).stats()
    assert (stats.length, stats.delayed, stats.backlog, stats.backlog_tenants, stats.paused) == (8, 1, 1, 1, False)
    assert stats.partitions == 4
    assert len(Inspector(url=server, stream=stream, partitions=4).entries()) == 8


def test_what_a_partitioned_queue_refuses(server: str, stream: str) -> None:
    for bad in (0, 1025):
        with pytest.raises(ConfigError, match="partitions"):
            Producer(url=server, stream=stream, partitions=bad)
    with pytest.raises(ConfigError, match="nothing but braces"):
        Producer(url=server, stream="{}", partitions=2)
    with Producer(url=server, stream=stream, partitions=4) as p:
        with pytest.raises(ConfigError, match="tenant"):
            p.enqueue("work", {}, tenant="acme", unique_for=60)
        with pytest.raises(ConfigError, match="cannot be unique"):
            p.enqueue("work", {}, batch="b", unique_for=60)
        with pytest.raises(ConfigError, match="one partition"):
            p.open_batch("child", parent="parent")
        with pytest.raises(ConfigError, match="partition"):
            p.enqueue_flow(chord([("work", {})], ("gather", {})))
