# SPDX-License-Identifier: MIT
"""enqueue_batch's outcomes as the C++ Producer's (src/producer/batch.cpp): a chunk counts as
written only when its script answered a count > 0, overflow="trim_oldest" writes (XADD or the
enqueue script's 'trim' mode) and reports a failure part-way with C++'s message, and the script
is loaded only when the server does not have it."""
from __future__ import annotations

from typing import Any

import pytest

from streamq import ConfigError, Producer, QueueFullError, ReplyError, chord
from streamq import _redis
from streamq._partitions import partition_stream


class _UnrunPipeline:
    """A pipeline whose every EVALSHA answers -1: "not run, an earlier chunk was not"."""

    def __init__(self) -> None:
        self.calls = 0

    def evalsha(self, *args: Any) -> None:
        self.calls += 1

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        return [-1] * self.calls


def test_a_chunk_run_again_that_answers_minus_one_is_not_written(server: str, stream: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    with Producer(url=server, stream=stream) as p:
        monkeypatch.setattr(p._client, "pipeline", lambda transaction=False: _UnrunPipeline())
        monkeypatch.setattr(_redis, "run_script", lambda *args: -1)
        with pytest.raises(ReplyError, match="was not run") as refused:
            p.enqueue_batch([("work", {"n": i}) for i in range(3)])
    assert refused.value.prefix == "ERR"


def test_trim_oldest_batches_by_xadd_and_by_the_script(server: str, stream: str, r: Any) -> None:
    with Producer(url=server, stream=stream, max_len=10, overflow="trim_oldest") as p:
        plain = p.enqueue_batch([("work", {"n": i}) for i in range(250)])
        scripted = p.enqueue_batch([("work", {"n": i}, {"priority": "high"}) for i in range(250)])
    assert len(set(plain)) == len(set(scripted)) == 250
    for key, ids in ((stream, plain), (stream + ":p:high", scripted)):
        kept = [f["task_id"] for _, f in r.xrange(key)]
        assert 10 <= len(kept) < 250, key  # trimmed, oldest first (MAXLEN ~)
        assert kept == ids[-len(kept):]


def test_a_trim_oldest_batch_failing_part_way_says_what_it_wrote(server: str, stream: str, r: Any) -> None:
    r.hset(partition_stream(stream, 2, 1), "not", "a stream")  # partition 1: every XADD fails
    with Producer(url=server, stream=stream, overflow="trim_oldest", partitions=2) as p:
        with pytest.raises(ReplyError) as failed:
            p.enqueue_batch([("work", {}, {"partition_key": key}) for key in ("a", "b", "c", "d")])
    from streamq._partitions import crc16
    written = [i for i, key in enumerate("abcd") if crc16(key.encode()) % 2 == 0]
    refused = [i for i in range(4) if i not in written]
    assert written and refused
    assert failed.value.prefix == "WRONGTYPE"
    assert f"(enqueue_batch wrote {len(written)} of 4 tasks" in str(failed.value)
    assert r.xlen(partition_stream(stream, 2, 0)) == len(written)


def test_a_trim_oldest_batch_failing_whole_is_the_servers_error(server: str, stream: str, r: Any) -> None:
    r.hset(stream, "not", "a stream")
    with Producer(url=server, stream=stream, overflow="trim_oldest") as p:
        with pytest.raises(ReplyError, match="^WRONGTYPE") as failed:
            p.enqueue_batch([("work", {}), ("work", {})])
    assert "enqueue_batch" not in str(failed.value)


def test_trim_oldest_refuses_batches_and_flows(server: str, stream: str) -> None:
    with Producer(url=server, stream=stream, overflow="trim_oldest") as p:
        with pytest.raises(ConfigError, match="overflow='reject'"):
            p.enqueue("work", {}, batch="b")
        with pytest.raises(ConfigError, match="overflow='reject'"):
            p.enqueue_flow(chord([("work", {})], ("gather", {})))


def test_a_refused_batch_says_what_it_wrote_as_cxx_does(server: str, stream: str) -> None:
    with Producer(url=server, stream=stream, max_len=100) as p:
        with pytest.raises(QueueFullError) as refused:
            p.enqueue_batch([("work", {"n": i}) for i in range(150)])
    assert str(refused.value).startswith(
        "queue full: wrote 64 of 150 tasks (indices 0-63); refused 86 (indices 64-149) and wrote nothing "
        "after the first refused one: QUEUEFULL")


def script_loads(r: Any) -> int:
    return int(r.info("commandstats").get("cmdstat_script|load", {}).get("calls", 0))


def test_the_script_is_loaded_only_when_the_server_lacks_it(server: str, stream: str, r: Any) -> None:
    with Producer(url=server, stream=stream) as p:
        p.enqueue_batch([("work", {})])
        before = script_loads(r)
        p.enqueue_batch([("work", {}) for _ in range(100)])
        p.enqueue_batch([("work", {})])
        assert script_loads(r) == before
        r.script_flush()
        ids = p.enqueue_batch([("work", {}) for _ in range(100)])
    assert len(ids) == 100 and r.xlen(stream) == 202
