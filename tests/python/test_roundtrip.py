# SPDX-License-Identifier: MIT
"""The Python producer's tasks run by C++ workers (streamq_test_worker, a streamq::Consumer; its
handlers are listed at the top of tests/support/test_worker.cpp) and waited on in Python: every
enqueue option, retries, dead letters, flows whose C++ parents read their children's results,
batches, and the refusals as Python exceptions."""
from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

import pytest

from conftest import wait_for
from streamq import (BatchClosedError, ConfigError, DuplicateTaskError, Inspector, PayloadError, Producer,
                     QueueFullError, Retention, TaskFailedError, WaitTimeoutError, chain, chord, group, group_results)

Worker = Callable[..., Any]


def described(p: Producer, task_id: str) -> dict[str, Any]:
    """What the C++ `describe` handler saw of the task (its result), once it is done."""
    record = p.wait(task_id, timeout=20)
    assert record.state == "done" and record.result is not None
    seen = json.loads(record.result)
    seen["fields"] = dict(seen["fields"])
    seen["record"] = record
    return seen


def waiting_in(r: Any, stream: str, task_id: str) -> str:
    """The key where task ``task_id`` waits, unrun: a level's stream, the delayed set, or a
    tenant's backlog."""
    places = [key for key in (stream, stream + ":p:high", stream + ":p:low")
              if any(f["task_id"] == task_id for _, f in r.xrange(key))]
    if r.zcard(stream + ":delayed"):
        places.append(stream + ":delayed")
    places.extend(r.keys(stream + ":tenant:*"))
    assert len(places) == 1, places
    return str(places[0])


def expected_place(stream: str, options: dict[str, Any]) -> str:
    if "delay" in options:
        return stream + ":delayed"
    if "tenant" in options:
        return stream + ":tenant:" + options["tenant"]
    return stream + {"high": ":p:high", "low": ":p:low"}.get(options.get("priority", ""), "")


@pytest.mark.parametrize("options, fields", [
    ({}, {}),
    ({"task_id": "py-order-1"}, {"task_id": "py-order-1"}),
    ({"max_retries": 7}, {"max_retries": "7"}),
    ({"priority": "high"}, {}),
    ({"priority": "low"}, {}),
    ({"delay": 0.3}, {}),
    ({"delay": timedelta(milliseconds=300)}, {}),
    ({"unique_for": 30}, {}),
    ({"unique_for": 30, "unique_key": "order-2"}, {"unique_key": "order-2"}),
    ({"tenant": "acme"}, {"streamq_tenant": "acme"}),
    ({"extra_fields": {"source": "checkout", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}},
     {"source": "checkout"}),
    ({"retention": Retention(done=120, dead=timedelta(hours=1))}, {"retention": "120000 3600000"}),
])
def test_an_option_round_trips_through_a_cxx_worker(server: str, stream: str, worker: Worker, r: Any,
                                                    options: dict[str, Any], fields: dict[str, str]) -> None:
    payload = {"to": "user@example.com", "template": "order_confirmation", "order_id": 12345, "note": "é"}
    with Producer(url=server, stream=stream, retention=60) as p:
        task_id = p.enqueue("describe", payload, **options)
        assert waiting_in(r, stream, task_id) == expected_place(stream, options)
        worker()
        seen = described(p, task_id)
    assert seen["id"] == task_id and seen["type"] == "describe"
    assert json.loads(seen["payload"]) == payload
    assert seen["max_retries"] == options.get("max_retries", 3) and seen["retry_count"] == 0
    assert abs(seen["created_at_ms"] / 1000 - time.time()) < 30
    for name, value in fields.items():
        assert seen["fields"][name] == value
    if "unique_for" in options:
        assert seen["fields"]["unique_key"] == options.get("unique_key", task_id)
    record = seen["record"]
    assert record.attempts == 1 and record.worker == "py-worker-1"
    if "delay" in options:
        assert record.started_at - record.enqueued_at >= timedelta(milliseconds=300)


def test_run_at_and_deadline_round_trip(server: str, stream: str, worker: Worker) -> None:
    worker()
    run_at = datetime.now(timezone.utc) + timedelta(milliseconds=400)
    deadline = datetime.now(timezone.utc) + timedelta(minutes=5)
    with Producer(url=server, stream=stream, retention=60) as p:
        task_id = p.enqueue("describe", {}, run_at=run_at, deadline=deadline)
        assert Inspector(url=server, stream=stream).record(task_id).state == "delayed"
        seen = described(p, task_id)
    assert seen["fields"]["deadline"] == str(int(deadline.timestamp() * 1000))
    assert seen["record"].started_at >= run_at - timedelta(milliseconds=50)  # the server's clock is this one


def test_a_retry_and_a_dead_letter(server: str, stream: str, worker: Worker) -> None:
    worker()
    with Producer(url=server, stream=stream, retention=60) as p:
        retried = p.enqueue("describe", {"fail_once": True}, max_retries=1)
        dead = p.enqueue("describe", {"fail_once": True}, max_retries=0)
        seen = described(p, retried)
        assert seen["retry_count"] == 1 and seen["record"].attempts == 2
        with pytest.raises(TaskFailedError, match="failing once, as asked") as failed:
            p.wait(dead, timeout=20)
    assert failed.value.record.state == "dead" and failed.value.record.reason == "retries_exhausted"


def test_a_missed_deadline_fails_the_wait(server: str, stream: str, worker: Worker) -> None:
    with Producer(url=server, stream=stream, retention=60) as p:
        task_id = p.enqueue("work", {}, deadline=datetime.now(timezone.utc) - timedelta(seconds=1))
        worker()
        with pytest.raises(TaskFailedError) as failed:
            p.wait(task_id, timeout=20)
    assert failed.value.record.reason == "deadline"


def test_a_chords_callback_run_by_cxx_reads_its_childrens_results(server: str, stream: str, worker: Worker) -> None:
    worker()
    with Producer(url=server, stream=stream) as p:
        ids = p.enqueue_flow(chord([("describe", {"n": 1}), ("describe", {"n": 2}), ("describe", {"n": 3})],
                                   ("collect", {})))
        assert len(ids.children) == 3 and all(not c.children for c in ids.children)
        record = p.wait(ids.task_id, timeout=20)
    assert record.children == [c.task_id for c in ids.children]
    results = json.loads(record.result)
    assert [c["task_id"] for c in results] == [c.task_id for c in ids.children]
    assert [c["state"] for c in results] == ["done"] * 3
    assert [json.loads(json.loads(c["result"])["payload"])["n"] for c in results] == [1, 2, 3]


def test_a_chord_that_ignores_a_failed_child(server: str, stream: str, worker: Worker) -> None:
    worker()
    with Producer(url=server, stream=stream) as p:
        ids = p.enqueue_flow(chord([("describe", {"n": 1}),
                                    ("describe", {"fail_once": True}, {"max_retries": 0})],
                                   ("collect", {}), on_failure="ignore"))
        results = json.loads(p.wait(ids.task_id, timeout=20).result)
    assert [c["state"] for c in results] == ["done", "dead"]
    assert "failing once" in results[1]["error"]


def test_a_chain_and_a_group(server: str, stream: str, worker: Worker) -> None:
    worker()
    with Producer(url=server, stream=stream) as p:
        ids = p.enqueue_flow(chain([("describe", {"step": 1}), ("collect", {})]))
        first = json.loads(p.wait(ids.task_id, timeout=20).result)[0]
        assert first["task_id"] == ids.children[0].task_id
        assert json.loads(json.loads(first["result"])["payload"]) == {"step": 1}
        g = p.enqueue_flow(group([("describe", {"n": n}) for n in range(3)], task_id="py-group-1"))
        assert g.task_id == "py-group-1"
        record = p.wait(g.task_id, timeout=20)
    assert record.task_type == "streamq:group"
    outcomes = group_results(record)
    assert [o.task_id for o in outcomes] == [c.task_id for c in g.children]
    assert [json.loads(json.loads(o.result)["payload"])["n"] for o in outcomes] == [0, 1, 2]


def test_a_flows_cxx_parent_waits_for_every_child(server: str, stream: str, worker: Worker, r: Any) -> None:
    with Producer(url=server, stream=stream) as p:
        ids = p.enqueue_flow(chord([("work", {}) for _ in range(3)], ("gather", {})))
        assert Inspector(url=server, stream=stream).record(ids.task_id).state == "waiting"
        worker()
        p.wait(ids.task_id, timeout=20)
    assert r.hget(stream + ":children", ids.task_id) == "3"


def test_a_batch_runs_whole(server: str, stream: str, worker: Worker, r: Any) -> None:
    with Producer(url=server, stream=stream) as p:
        ids = p.enqueue_batch([("work", {"n": i}) for i in range(150)] + [("work", {}, {"priority": "high"})])
    assert len(set(ids)) == 151
    worker()
    wait_for(lambda: r.hlen(stream + ":done") == 151, what="151 tasks done")
    assert set(r.hkeys(stream + ":done")) == set(ids)


def test_a_batch_that_tasks_join(server: str, stream: str, worker: Worker) -> None:
    worker()
    with Producer(url=server, stream=stream) as p:
        batch = p.open_batch()
        ids = [p.enqueue("work", {}, batch=batch) for _ in range(3)]
        assert p.close_batch(batch) and not p.close_batch(batch)
        for task_id in ids:
            p.wait(task_id, timeout=20)  # a batch's task is tracked
    counts = Inspector(url=server, stream=stream).batch(batch)
    assert counts is not None and counts["total"] == "3"
    wait_for(lambda: Inspector(url=server, stream=stream).batch(batch).get("done") == "3", what="batch counted")


def test_a_cxx_producers_task_waited_on_in_python(server: str, stream: str, worker: Worker, cli: Any) -> None:
    task_id = cli("enqueue", stream, "describe", '{"from":"c++"}', "--retention-ms", "60000").strip()
    worker()
    with Producer(url=server, stream=stream) as p:
        seen = described(p, task_id)
    assert json.loads(seen["payload"]) == {"from": "c++"}


def test_a_full_queue_refuses(server: str, stream: str, r: Any) -> None:
    with Producer(url=server, stream=stream, max_len=2) as p:
        p.enqueue("work", {})
        p.enqueue("work", {}, delay=60)
        with pytest.raises(QueueFullError, match="would exceed max_len 2"):
            p.enqueue("work", {}, retention=60)
    assert r.xlen(stream) + r.zcard(stream + ":delayed") == 2


def test_a_batch_refused_part_way_wrote_a_prefix(server: str, stream: str, r: Any) -> None:
    with Producer(url=server, stream=stream, max_len=100) as p:
        with pytest.raises(QueueFullError) as refused:
            p.enqueue_batch([("work", {"n": i}) for i in range(150)])
    e = refused.value
    assert e.accepted == 64 and len(e.batch_ids) == 150
    assert all(e.batch_ids[:64]) and not any(e.batch_ids[64:])
    assert [f["task_id"] for _, f in r.xrange(stream)] == e.batch_ids[:64]


def test_a_duplicate_is_refused_until_the_task_finished(server: str, stream: str, worker: Worker, r: Any) -> None:
    with Producer(url=server, stream=stream, retention=60) as p:
        first = p.enqueue("work", {}, unique_for=60, unique_key="invoice-7")
        with pytest.raises(DuplicateTaskError) as duplicate:
            p.enqueue("work", {}, unique_for=60, unique_key="invoice-7")
        assert duplicate.value.existing_task_id == first and duplicate.value.index == 0
        with pytest.raises(DuplicateTaskError) as in_batch:
            p.enqueue_batch([("work", {}), ("work", {}, {"unique_for": 60, "unique_key": "invoice-7"})])
        assert in_batch.value.index == 1 and in_batch.value.batch_ids == ["", ""]
        assert r.xlen(stream) == 1
        worker()
        p.wait(first, timeout=20)
        assert r.get(stream + ":unique:invoice-7") is None  # released by the C++ worker's ack
        p.enqueue("work", {}, unique_for=60, unique_key="invoice-7")


def test_a_closed_batch_refuses(server: str, stream: str) -> None:
    with Producer(url=server, stream=stream) as p:
        with pytest.raises(BatchClosedError, match="no such batch"):
            p.enqueue("work", {}, batch="never-opened")
        batch = p.open_batch("b-1")
        with pytest.raises(ConfigError, match="BATCHEXISTS"):
            p.open_batch("b-1")
        p.close_batch(batch)
        with pytest.raises(BatchClosedError, match="b-1 is fired"):  # (closed empty: fired at once)
            p.enqueue("work", {}, batch=batch)


def test_waits_that_time_out(server: str, stream: str) -> None:
    with Producer(url=server, stream=stream) as p:
        task_id = p.enqueue("work", {}, retention=60)
        started = time.monotonic()
        with pytest.raises(WaitTimeoutError, match="did not finish in time") as late:
            p.wait(task_id, timeout=0.5)
        assert late.value.record.state == "queued"
        with pytest.raises(WaitTimeoutError, match="no record of task") as untracked:
            p.wait(p.enqueue("work", {}), timeout=30)
        assert untracked.value.record is None
        assert time.monotonic() - started < 5


def test_a_record_kept_for_no_time_answers_a_wait_begun_before_its_end(server: str, stream: str,
                                                                      worker: Worker) -> None:
    # (A record of Retention 0 that goes with its task's end before a wait reads it is gone, as
    # for the C++ Producer::wait: a wait begun before the end is answered, watch.lua keeping it.)
    import threading
    with Producer(url=server, stream=stream) as p:
        ids = [p.enqueue("work", {"ms": 100}, retention=0) for _ in range(3)]
        start = threading.Timer(0.5, worker)
        start.start()
        try:
            assert [p.wait(i, timeout=20).state for i in ids] == ["done"] * 3
        finally:
            start.join()


def test_wait_for_enqueue_waits_for_a_task_enqueued_later(server: str, stream: str, worker: Worker) -> None:
    worker()
    with Producer(url=server, stream=stream, retention=60) as p:
        import threading
        later = threading.Timer(1.5, lambda: p.enqueue("work", {}, task_id="later-1"))
        later.start()
        try:
            assert p.wait("later-1", timeout=20, wait_for_enqueue=True).state == "done"
        finally:
            later.join()


def test_refusals_before_anything_is_sent(server: str, stream: str, r: Any) -> None:
    with Producer(url=server, stream=stream, max_payload_bytes=64, max_payload_depth=3) as p:
        with pytest.raises(PayloadError, match="not valid JSON"):
            p.enqueue("work", "{not json")
        with pytest.raises(PayloadError, match="over the cap"):
            p.enqueue("work", {"x": "y" * 100})
        with pytest.raises(PayloadError, match="deeper than 3"):
            p.enqueue("work", [[[[1]]]])
        p.enqueue("work", [[[1]]])
        for bad in ({"delay": -1}, {"delay": 1, "run_at": time.time()}, {"priority": "urgent"},
                    {"unique_key": "k"}, {"max_retries": -1}, {"tenant": "x" * 257}, {"tenant": "a\0b"},
                    {"extra_fields": {"task_id": "x"}}, {"retention": -5}):
            with pytest.raises(ConfigError):
                p.enqueue("work", {}, **bad)
        with pytest.raises(ConfigError, match="cannot have a delay"):
            p.enqueue_flow(chord([("work", {})], ("gather", {}, {"delay": 5})))
        with pytest.raises(ConfigError, match="given twice"):
            p.enqueue_flow(chord([("work", {}, {"task_id": "a"}), ("work", {}, {"task_id": "a"})], ("gather", {})))
        # An empty tenant is no tenant, as EnqueueOptions::tenant's default (not a refusal).
        no_tenant = p.enqueue("work", {}, tenant="")
    assert [f for _, f in r.xrange(stream)][-1]["task_id"] == no_tenant
    assert "streamq_tenant" not in [f for _, f in r.xrange(stream)][-1]
    assert r.xlen(stream) == 2
    with pytest.raises(ConfigError):
        Producer(url=server, stream=stream, max_len=0)


def test_redis_errors_as_streamq_exceptions(server: str, stream: str, r: Any) -> None:
    from conftest import free_port
    from streamq import ConnectionError, ReplyError
    with pytest.raises(ConnectionError):
        Producer(url=f"redis://127.0.0.1:{free_port()}", stream=stream).enqueue("work", {})
    r.hset(stream + ":unique:held-by-a-hash", "x", "1")
    with Producer(url=server, stream=stream) as p:
        with pytest.raises(ReplyError) as wrong:
            p.enqueue("work", {}, unique_for=60, unique_key="held-by-a-hash")
    assert wrong.value.prefix == "WRONGTYPE"
    assert r.xlen(stream) == 0
