# SPDX-License-Identifier: MIT
"""A Python producer's task is a C++ producer's task: the same fields in the same order, in the
same keys, for every option; both as docs/wire-format.md describes them. The C++ producer is
the streamq command (`streamq enqueue`, which enqueues through streamq::Producer) and, for the
options the command does not offer, streamq_test_worker's enqueue-json."""
from __future__ import annotations

import json
import re
import subprocess
from datetime import datetime, timezone
from typing import Any, Callable

import pytest

from conftest import BUILD, REPO, build_file
from streamq import Debounce, Inspector, Producer, Retention, TaskFailedError

DOC = (REPO / "docs" / "wire-format.md").read_text(encoding="utf-8")
UUID4 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def doc_fields() -> list[str]:
    """The fields of the doc's first table (a task's), in order."""
    table = DOC.split("| field | meaning |", 1)[1].split("\n\n", 1)[0]
    return re.findall(r"^\| `([a-z_]+)` \|", table, re.M)


def doc_timestamp() -> re.Pattern[str]:
    """created_at's form, from the doc's example (every digit a digit)."""
    example = re.search(r"e\.g\. `(\d{4}-\d\d-\d\dT[\d:.]+)`", DOC).group(1)
    return re.compile("^" + re.sub(r"\d", r"\\d", re.escape(example)) + "$")


def doc_key(start: str, **values: str) -> str:
    """The doc's key that starts with ``start`` (e.g. ``<stream>:tenant:``), its placeholders
    (``<stream>``, ``<tenant>``, ...) filled in with ``values``; a trailing "…" (more suffixes) cut."""
    found = re.search("`(" + re.escape(start) + "[^`]*)`", DOC)
    assert found, f"the doc names no key {start}..."
    key = found.group(1).rstrip("…")
    for name, value in values.items():
        key = key.replace(f"<{name}>", value)
    assert "<" not in key and "…" not in key, key
    return key


def unpacked(r: Any, command: str, key: str) -> list[str]:
    """The first msgpack'd value of a list (a tenant's backlog) or sorted set (the delayed set),
    unpacked by the server's own cmsgpack, as the scripts read it."""
    read = "redis.call('LINDEX', KEYS[1], 0)" if command == "list" else "redis.call('ZRANGE', KEYS[1], 0, 0)[1]"
    return [str(v) for v in r.eval(f"return cmsgpack.unpack({read})", 1, key)]


def pairs(strings: list[str]) -> list[tuple[str, str]]:
    return list(zip(strings[0::2], strings[1::2]))


def only_entry(r: Any, key: str) -> list[tuple[str, str]]:
    entries = r.xrange(key)
    assert len(entries) == 1, f"{key}: {entries}"
    return list(entries[0][1].items())


def comparable(fields: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Fields with the values that differ between two tasks (id, time) left out."""
    return [(k, "" if k in ("task_id", "created_at") else v) for k, v in fields]


def test_a_plain_task_has_the_documented_fields_in_order(server: str, stream: str, r: Any, cli: Any) -> None:
    assert doc_fields() == ["task_id", "task_type", "payload", "created_at", "max_retries", "retry_count"]
    stamp = doc_timestamp()
    with Producer(url=server, stream=stream) as p:
        py_id = p.enqueue("send_email", {"to": "user@example.com", "order_id": 12345})
    cxx_id = cli("enqueue", stream, "send_email", '{"to":"user@example.com","order_id":12345}').strip()
    entries = r.xrange(stream)
    assert [e[1]["task_id"] for e in entries] == [py_id, cxx_id]
    for _, fields in entries:
        assert list(fields) == doc_fields()
        assert UUID4.match(fields["task_id"])
        assert stamp.match(fields["created_at"]), fields["created_at"]
        assert json.loads(fields["payload"]) == {"to": "user@example.com", "order_id": 12345}
        assert (fields["max_retries"], fields["retry_count"]) == ("3", "0")
    assert comparable(list(entries[0][1].items())) == comparable(list(entries[1][1].items()))
    assert entries[0][1]["payload"] == entries[1][1]["payload"]


@pytest.mark.parametrize("python, command_line", [
    ({"priority": "high"}, ["--priority", "high"]),
    ({"priority": "low"}, ["--priority", "low"]),
    ({"retention": 60}, ["--retention-ms", "60000"]),
    ({"retention": 60, "priority": "high"}, ["--retention-ms", "60000", "--priority", "high"]),
    ({"task_id": "order-12345-confirmation"}, ["--task-id", "order-12345-confirmation"]),
])
def test_an_option_writes_the_fields_and_keys_of_the_cxx_producer(server: str, stream: str, r: Any, cli: Any,
                                                                  python: dict[str, Any],
                                                                  command_line: list[str]) -> None:
    level = {"high": ":p:high", "low": ":p:low"}.get(python.get("priority", ""), "")
    with Producer(url=server, stream=stream) as p:
        p.enqueue("send_email", '{"to":"a"}', **python)
    py = only_entry(r, stream + level)
    r.delete(stream + level)
    cli("enqueue", stream, "send_email", '{"to":"a"}', *command_line)
    cxx = only_entry(r, stream + level)
    assert comparable(py) == comparable(cxx)
    if "task_id" in python:
        assert dict(py)["task_id"] == dict(cxx)["task_id"] == python["task_id"]
    if "retention" in python:
        assert dict(py)["retention"] == "60000 -1"
        record = Inspector(url=server, stream=stream).record(dict(py)["task_id"])
        assert record is not None and record.state == "queued" and record.task_type == "send_email"


def test_a_tenants_task_waits_in_its_backlog_as_the_cxx_producers_does(server: str, stream: str, r: Any,
                                                                       cli: Any) -> None:
    backlog = doc_key("<stream>:tenant:", stream=stream, tenant="acme") + doc_key("<stream>:p:high", stream="")
    assert backlog == stream + ":tenant:acme:p:high"  # (what the doc says, spelled out)
    with Producer(url=server, stream=stream) as p:
        p.enqueue("send_email", '{"to":"a"}', tenant="acme", priority="high")
    py = pairs(unpacked(r, "list", backlog))
    r.delete(backlog)
    cli("enqueue", stream, "send_email", '{"to":"a"}', "--tenant", "acme", "--priority", "high")
    cxx = pairs(unpacked(r, "list", backlog))
    assert comparable(py) == comparable(cxx)
    assert ("streamq_tenant", "acme") in py
    assert r.zscore(stream + ":tenants:ready", "acme") is not None


def test_a_delayed_task_waits_in_the_delayed_set_as_the_cxx_producers_does(server: str, stream: str, r: Any,
                                                                           cli: Any) -> None:
    delayed = doc_key("<stream>:delayed", stream=stream)
    with Producer(url=server, stream=stream) as p:
        p.enqueue("send_email", '{"to":"a"}', delay=60)
    py = unpacked(r, "zset", delayed)
    r.delete(delayed)
    cli("enqueue", stream, "send_email", '{"to":"a"}', "--delay-ms", "60000")
    cxx = unpacked(r, "zset", delayed)
    # 'sq1', a nonce, the destination stream, then the task's strings (src/lua/lib/delayed.lua)
    assert py[0] == cxx[0] == "sq1" and py[2] == cxx[2] == stream
    assert UUID4.match(py[1]) and py[1] != cxx[1]
    assert comparable(pairs(py[3:])) == comparable(pairs(cxx[3:]))


def test_the_documented_keys_of_a_tracked_unique_task(server: str, stream: str, r: Any) -> None:
    with Producer(url=server, stream=stream) as p:
        task_id = p.enqueue("send_email", {}, retention=60, unique_for=60, unique_key="order-1")
    fields = dict(only_entry(r, stream))
    assert fields["unique_key"] == "order-1" and fields["retention"] == "60000 -1"
    assert r.get(doc_key("<stream>:unique:", stream=stream, key="order-1")) == task_id
    assert r.hget(doc_key("<stream>:task:", stream=stream, task_id=task_id), "state") == "queued"
    assert r.xrange(doc_key("<stream>:events", stream=stream))[-1][1]["task_id"] == task_id


def test_a_cxx_producers_task_read_back_in_python(server: str, stream: str, cli: Any) -> None:
    task_id = cli("enqueue", stream, "send_email", '{"to":"b"}', "--retention-ms", "60000",
                  "--delay-ms", "60000").strip()
    record = Inspector(url=server, stream=stream).record(task_id)
    assert record is not None
    assert (record.task_id, record.task_type, record.state) == (task_id, "send_email", "delayed")
    assert record.enqueued_at is not None and record.due_at is not None
    assert 59 <= (record.due_at - record.enqueued_at).total_seconds() <= 60
    stats = Inspector(url=server, stream=stream).stats()
    assert (stats.delayed, stats.length) == (1, 0)


def doc_dead_letter_fields() -> list[str]:
    """The fields the doc's dead-letter table adds to a task's."""
    table = DOC.split("## Extra fields and dead letters", 1)[1].split("| field | meaning |", 1)[1].split("\n\n", 1)[0]
    return re.findall(r"^\| `([a-z_]+)` \|", table, re.M)


def test_a_python_tasks_dead_letter_and_retry_copy_as_the_doc_says(server: str, stream: str, r: Any,
                                                                   worker: Any) -> None:
    assert doc_dead_letter_fields() == ["error", "failed_at", "original_id", "consumer", "reason"]
    with Producer(url=server, stream=stream, retention=60) as p:
        task_id = p.enqueue("fail_once", {"ms": 0}, max_retries=0, extra_fields={"source": "checkout"})
        worker()
        with pytest.raises(TaskFailedError) as failed:
            p.wait(task_id, timeout=20)
    record = failed.value.record
    assert record.state == "dead"
    dead = r.xrange(stream + ":dlq")
    assert len(dead) == 1
    fields = dead[0][1]
    assert list(fields)[:6] == doc_fields()
    assert fields["task_id"] == task_id and fields["source"] == "checkout"
    for name in doc_dead_letter_fields():
        assert fields[name], name
    assert doc_timestamp().match(fields["failed_at"])
    assert fields["consumer"] == "py-worker-1" and fields["reason"] == record.reason


def doc_reserved_fields() -> set[str]:
    """The field names the doc reserves: the task table's, the optional ones of the paragraph
    that ends "These names are reserved." (less the option and the application field it
    mentions, `unique_for` and `tenant`), a retry copy's `last_error`, the dead-letter table's."""
    paragraph = DOC.split("| `retry_count` |", 1)[1].split("These names are reserved.", 1)[0].split("\n\n", 1)[1]
    mentioned = set(re.findall(r"`([a-z_]+)`", paragraph))
    assert {"unique_for", "tenant"} <= mentioned
    retry_copy = re.search(r"A retry copy also carries\s+`([a-z_]+)`", DOC).group(1)
    return set(doc_fields()) | (mentioned - {"unique_for", "tenant"}) | {retry_copy} | set(doc_dead_letter_fields())


def cxx_reserved_fields() -> set[str]:
    """The names src/wire/codec.cpp's is_reserved_field reserves (task_fields, dead_letter_fields
    and the field:: names it lists), resolved through the field:: constants of the headers."""
    constants = dict(re.findall(r'inline constexpr std::string_view (\w+) = "([^"]+)";',
                                (REPO / "include" / "streamq" / "task.hpp").read_text()))
    header = (REPO / "src" / "wire" / "codec.hpp").read_text()
    source = (REPO / "src" / "wire" / "codec.cpp").read_text()
    parts = [re.search(r"task_fields\[\] = \{(.*?)\};", header, re.S).group(1),
             re.search(r"dead_letter_fields\[\] = \{(.*?)\};", header, re.S).group(1),
             re.search(r"bool is_reserved_field\(.*?\n\}", source, re.S).group(0)]
    names = re.findall(r"field::(\w+)", " ".join(parts))
    assert len(names) > 15 and all(n in constants for n in names), [n for n in names if n not in constants]
    return {constants[n] for n in names}


def test_the_reserved_field_names_are_the_docs_and_the_cxx_librarys() -> None:
    from streamq import _wire
    assert set(_wire.RESERVED_FIELDS) == doc_reserved_fields() == cxx_reserved_fields()


@pytest.fixture
def cxx_enqueue(server: str) -> Callable[[str, dict[str, Any]], str]:
    """Enqueues one task through the C++ Producer (streamq_test_worker's enqueue-json: the
    options a JSON object gives, as EnqueueOptions); returns its id."""
    binary = build_file("STREAMQ_TEST_WORKER", BUILD / "tests" / "streamq_test_worker")

    def run(queue: str, options: dict[str, Any]) -> str:
        p = subprocess.run([str(binary), server, queue, "enqueue-json", json.dumps(options)], capture_output=True,
                           text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert p.returncode == 0, p.stdout + p.stderr
        return p.stdout.strip()
    return run


DEADLINE = datetime(2031, 3, 4, 5, 6, 7, 890000, tzinfo=timezone.utc)
RUN_AT = datetime(2030, 1, 2, 3, 4, 5, 600000, tzinfo=timezone.utc)


@pytest.mark.parametrize("python, cxx, where", [
    ({"max_retries": 7}, {"max_retries": 7}, "stream"),
    ({"max_retries": 0, "extra_fields": {"source": "checkout", "region": "eu"}},
     {"max_retries": 0, "extra_fields": [["source", "checkout"], ["region", "eu"]]}, "stream"),
    ({"deadline": DEADLINE}, {"deadline_ms": int(DEADLINE.timestamp() * 1000)}, "stream"),
    ({"unique_for": 60, "unique_key": "order-1"}, {"unique_for_ms": 60000, "unique_key": "order-1"}, "stream"),
    ({"unique_for": 60}, {"unique_for_ms": 60000}, "stream"),
    ({"retention": Retention(done=60, dead=120)}, {"retention": {"done_ms": 60000, "dead_ms": 120000}}, "stream"),
    ({"retention": Retention(done=0)}, {"retention": {"done_ms": 0}}, "stream"),
    ({"batch": "b-1"}, {"batch": "b-1"}, "stream"),
    ({"priority": "low", "max_retries": 1, "extra_fields": {"x": "1"}},
     {"priority": "low", "max_retries": 1, "extra_fields": [["x", "1"]]}, "stream:p:low"),
    ({"run_at": RUN_AT}, {"run_at_ms": int(RUN_AT.timestamp() * 1000)}, "delayed"),
    ({"delay": 3600, "priority": "high", "deadline": DEADLINE},
     {"delay_ms": 3600000, "priority": "high", "deadline_ms": int(DEADLINE.timestamp() * 1000)}, "delayed"),
    ({"tenant": "acme", "max_retries": 2, "retention": 60},
     {"tenant": "acme", "max_retries": 2, "retention": {"done_ms": 60000}}, "backlog"),
    ({"debounce": Debounce("k", 3600, "replace_latest"), "max_retries": 2},
     {"debounce": {"key": "k", "window_ms": 3600000, "mode": "replace_latest"}, "max_retries": 2}, "delayed"),
])
def test_every_option_writes_what_the_cxx_producer_writes(server: str, stream: str, r: Any, cxx_enqueue: Any,
                                                          python: dict[str, Any], cxx: dict[str, Any],
                                                          where: str) -> None:
    # The same task through each producer, each into a queue of its own: the same fields, in the
    # same order, with the same values (less the task id and the time), in the same place.
    queues = {"py": stream + "-py", "cxx": stream + "-cxx"}
    payload = '{"to":"a"}'
    with Producer(url=server, stream=queues["py"]) as p:
        if "batch" in python:
            p.open_batch(python["batch"])
            with Producer(url=server, stream=queues["cxx"]) as other:
                other.open_batch(cxx["batch"])
        p.enqueue("send_email", payload, **python)
    cxx_enqueue(queues["cxx"], dict(cxx, type="send_email", payload=payload))

    def written(queue: str) -> list[tuple[str, str]]:
        if where.startswith("stream"):
            fields = only_entry(r, queue + where.removeprefix("stream"))
        elif where == "delayed":
            member = unpacked(r, "zset", doc_key("<stream>:delayed", stream=queue))
            assert member[2] == queue + {"high": ":p:high"}.get(python.get("priority", ""), "")
            fields = pairs(member[3:])
        else:
            fields = pairs(unpacked(r, "list", doc_key("<stream>:tenant:", stream=queue, tenant="acme")))
        # A value that is the task's own id (a unique task's key when none was given) as such.
        task_id = dict(fields)["task_id"]
        return [(k, "<task id>" if v == task_id and k != "task_id" else v) for k, v in fields]
    py, other = written(queues["py"]), written(queues["cxx"])
    assert comparable(py) == comparable(other)
    if where == "delayed":  # the time is the member's score
        due = [float(r.eval("return redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2]", 1,
                            doc_key("<stream>:delayed", stream=q))) for q in queues.values()]
        if "run_at" in python:
            assert due == [RUN_AT.timestamp() * 1000] * 2
        else:
            assert abs(due[0] - due[1]) < 60_000 and due[0] > (datetime.now(timezone.utc).timestamp() + 3000) * 1000
        return
    plain = [("task_id", ""), ("task_type", "send_email"), ("payload", payload), ("created_at", ""),
             ("max_retries", "3"), ("retry_count", "0")]
    assert comparable(py) != plain  # (the option is written)
