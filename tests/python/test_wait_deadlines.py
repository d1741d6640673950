# SPDX-License-Identifier: MIT
"""Producer.wait ends by its timeout whatever Redis does (as the C++ Producer::wait promises):
a socket timeout shorter than the wait, a server frozen (SIGSTOP) or gone mid-wait end in
WaitTimeoutError at the wait's timeout, not in a TimeoutError or ConnectionError before it nor
a hang after it. The servers frozen or killed here are started by the test itself, by pid."""
from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import threading
import time
from typing import Any, Iterator

import pytest
import redis

from conftest import SERVER, free_port, wait_for
from streamq import Producer, WaitTimeoutError


@pytest.fixture
def private_server() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A redis-server of this test's own (to freeze or kill): its URL and its process."""
    directory = tempfile.mkdtemp(prefix="streamq-py-wait-")
    port = free_port()
    process = subprocess.Popen([SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                                "no", "--dir", directory], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(port=port)

    def up() -> bool:
        try:
            return bool(client.ping())
        except redis.exceptions.ConnectionError:
            return False
    try:
        wait_for(up, what="the private redis-server")
        yield f"redis://127.0.0.1:{port}", process
    finally:
        client.close()
        if process.poll() is None:
            os.kill(process.pid, signal.SIGCONT)
            process.terminate()
        process.wait(10)


def timed_wait(p: Producer, task_id: str, timeout: float) -> tuple[BaseException | None, float]:
    started = time.monotonic()
    try:
        p.wait(task_id, timeout=timeout)
    except BaseException as e:  # noqa: B902 (what it raised is the test's subject)
        return e, time.monotonic() - started
    return None, time.monotonic() - started


def test_the_defaults_are_the_cxx_connection_options(server: str, stream: str) -> None:
    with Producer(url=server, stream=stream) as p:
        kwargs: dict[str, Any] = p._client.connection_pool.connection_kwargs
    assert (kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (5.0, 2.0)


def test_a_wait_longer_than_the_socket_timeout_ends_at_its_timeout(server: str, stream: str) -> None:
    with Producer(url=server, stream=stream, retention=60, socket_timeout=0.3) as p:
        task_id = p.enqueue("work", {})
        error, took = timed_wait(p, task_id, 2.0)
    assert isinstance(error, WaitTimeoutError), repr(error)
    assert "did not finish in time (it is queued)" in str(error)
    assert 2.0 <= took < 3.5


def test_a_wait_on_a_frozen_server_ends_near_its_timeout(private_server: tuple[str, Any]) -> None:
    url, process = private_server
    with Producer(url=url, stream="frozen", retention=60) as p:
        task_id = p.enqueue("work", {})
        threading.Timer(0.5, os.kill, (process.pid, signal.SIGSTOP)).start()
        outcome: list[tuple[BaseException | None, float]] = []
        waiter = threading.Thread(target=lambda: outcome.append(timed_wait(p, task_id, 2.0)))
        waiter.start()
        waiter.join(15)
        os.kill(process.pid, signal.SIGCONT)
        waiter.join(15)
    error, took = outcome[0]
    assert isinstance(error, WaitTimeoutError), repr(error)
    assert 2.0 <= took < 2.0 + 3


def test_a_wait_whose_server_goes_away_ends_at_its_timeout_saying_why(private_server: tuple[str, Any]) -> None:
    url, process = private_server
    with Producer(url=url, stream="gone", retention=60) as p:
        task_id = p.enqueue("work", {})
        threading.Timer(0.5, process.kill).start()
        error, took = timed_wait(p, task_id, 2.0)
    assert isinstance(error, WaitTimeoutError), repr(error)
    assert "could not be read" in str(error)
    assert 2.0 <= took < 2.0 + 3
