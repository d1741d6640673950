# SPDX-License-Identifier: MIT
"""Debounced tasks from Python (``enqueue(..., debounce=Debounce(...))``, the C++
EnqueueOptions::debounce on the same script): a replace_latest burst runs once, with its last
payload, through a C++ worker; Python and C++ calls under one key join one cycle; and what the
C++ Producer refuses, this client refuses too."""
from __future__ import annotations

import json
import subprocess
from typing import Any, Callable

import pytest

from conftest import BUILD, build_file
from streamq import ConfigError, Debounce, FlowNode, Producer, TaskSpec

Worker = Callable[..., Any]


def test_a_replace_latest_burst_runs_once_with_its_last_payload_through_a_cxx_worker(
        server: str, stream: str, worker: Worker, r: Any) -> None:
    with Producer(url=server, stream=stream, retention=60) as p:
        burst = Debounce("doc-7", 2, "replace_latest")
        ids = {p.enqueue("describe", {"version": n}, debounce=burst) for n in range(20)}
        assert len(ids) == 1, ids
        (task_id,) = ids
        assert r.zcard(stream + ":delayed") == 1
        assert r.hget(stream + ":debounce:doc-7", "id") == task_id
        # keep_first under the same key: dropped, the waiting task's id.
        assert p.enqueue("describe", {"version": 99}, debounce=Debounce("doc-7", 2)) == task_id
        worker()
        record = p.wait(task_id, timeout=20)
        assert record.state == "done"
        seen = json.loads(record.result or "null")
        assert seen["id"] == task_id
        assert json.loads(seen["payload"]) == {"version": 19}
        # Once it ran, a new call is a new cycle (a new task).
        again = p.enqueue("describe", {"version": 20}, debounce=burst)
        assert again != task_id
        assert p.wait(again, timeout=20).state == "done"
    assert r.xlen(stream) == 0 and r.zcard(stream + ":delayed") == 0


def test_python_and_cxx_calls_under_one_key_join_one_cycle(server: str, stream: str, r: Any) -> None:
    binary = build_file("STREAMQ_TEST_WORKER", BUILD / "tests" / "streamq_test_worker")

    def cxx(payload: str, mode: str) -> str:
        options = {"type": "t", "payload": payload, "debounce": {"key": "k", "window_ms": 60000, "mode": mode}}
        done = subprocess.run([str(binary), server, stream, "enqueue-json", json.dumps(options)],
                              capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout.strip()

    with Producer(url=server, stream=stream) as p:
        first = p.enqueue("t", {"from": "python"}, debounce=Debounce("k", 60, "replace_latest"))
        assert cxx('{"from":"c++"}', "replace_latest") == first
        assert cxx('{"from":"c++ dropped"}', "keep_first") == first
        assert p.enqueue("t", {"from": "python again"}, debounce=Debounce("k", 60, "keep_first")) == first
    assert r.zcard(stream + ":delayed") == 1
    fields = r.eval("return cmsgpack.unpack(redis.call('ZRANGE', KEYS[1], 0, 0)[1])", 1, stream + ":delayed")[3:]
    written = dict(zip(fields[::2], fields[1::2]))
    assert written["task_id"] == first
    assert written["payload"] == '{"from":"c++"}'  # the last replace_latest call's


@pytest.mark.parametrize("options, names", [
    ({"debounce": Debounce("", 1)}, "debounce.key"),
    ({"debounce": Debounce("k", 0)}, "debounce.window"),
    ({"debounce": Debounce("k", -1)}, "debounce.window"),
    ({"debounce": Debounce("k", 1, "latest")}, "debounce.mode"),
    ({"debounce": ("k", 1)}, "streamq.Debounce"),
    ({"debounce": Debounce("k", 1), "run_at": 2_000_000_000}, "run_at"),
    ({"debounce": Debounce("k", 1), "unique_for": 1}, "unique_for"),
    ({"debounce": Debounce("k", 1), "partition_key": "x"}, "partition_key"),
    ({"debounce": Debounce("k", 1), "batch": "b"}, "batch"),
])
def test_what_the_cxx_producer_refuses_is_refused_before_anything_is_sent(server: str, stream: str, r: Any,
                                                                          options: dict[str, Any],
                                                                          names: str) -> None:
    with Producer(url=server, stream=stream) as p:
        with pytest.raises(ConfigError, match=names.replace(".", r"\.")):
            p.enqueue("t", {}, **options)
    assert not r.keys(stream + "*")


def test_debounce_is_refused_where_a_dropped_call_has_no_id_to_return(server: str, stream: str, r: Any) -> None:
    with Producer(url=server, stream=stream) as p:
        with pytest.raises(ConfigError, match="enqueue_batch"):
            p.enqueue_batch([TaskSpec("t", {}, options={"debounce": Debounce("k", 1)})])
        with pytest.raises(ConfigError, match="enqueue_flow"):
            p.enqueue_flow(FlowNode("parent", {}, children=[FlowNode("t", {}, options={"debounce": Debounce("k", 1)})]))
    with Producer(url=server, stream=stream, partitions=2) as p:
        with pytest.raises(ConfigError, match="debounced"):
            p.enqueue("t", {}, tenant="acme", debounce=Debounce("k", 1))
    assert not r.keys(stream + "*")
