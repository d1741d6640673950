# SPDX-License-Identifier: MIT
"""What the Python client's tests share: a private redis-server on a free loopback port (started
and stopped by its pid, never another), a queue name per test, and C++ workers to run the
Python producer's tasks (the build tree's streamq_test_worker, see tests/support/test_worker.cpp).

Paths come from the environment (ctest sets them, tests/CMakeLists.txt), else the build tree
beside the sources: STREAMQ_TEST_WORKER, STREAMQ_CLI (the streamq command, a C++ producer),
STREAMQ_EXAMPLE_WORKER (examples/worker.cpp), STREAMQ_GENERATED_LUA
(build/generated/lua_scripts.cpp), STREAMQ_REDIS_SERVER."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Callable, Iterator

import pytest
import redis

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO / "python"))  # the package from the source tree (src/lua expanded on use)

BUILD = REPO / "build"
SERVER = os.environ.get("STREAMQ_REDIS_SERVER", "redis-server")


def build_file(variable: str, default: Path) -> Path:
    path = Path(os.environ.get(variable, str(default)))
    if not path.exists():
        pytest.fail(f"{path} does not exist: build the project first, or set {variable}")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate: Callable[[], object], timeout: float = 15.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError("timed out waiting for " + what)


@pytest.fixture(scope="session")
def server() -> Iterator[str]:
    """A redis-server of the session's own; yields its URL."""
    directory = tempfile.mkdtemp(prefix="streamq-py-")
    port = free_port()
    process = subprocess.Popen(
        [SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", directory],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(port=port)

    def up() -> bool:
        try:
            return bool(client.ping())
        except redis.exceptions.ConnectionError:
            assert process.poll() is None, "redis-server exited"
            return False
    try:
        wait_for(up, what="redis-server")
        yield f"redis://127.0.0.1:{port}"
    finally:
        client.close()
        process.terminate()
        process.wait(10)
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def r(server: str) -> Iterator["redis.Redis[str]"]:
    client = redis.Redis.from_url(server, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def stream(request: pytest.FixtureRequest) -> str:
    """A queue name of the test's own."""
    return "py:" + request.node.name.replace("[", "-").replace("]", "") + ":" + uuid.uuid4().hex[:8]


@pytest.fixture
def worker(server: str, stream: str) -> Iterator[Callable[..., subprocess.Popen]]:
    """Starts C++ workers (streamq_test_worker) on the test's queue; stops them (by pid) after."""
    binary = build_file("STREAMQ_TEST_WORKER", BUILD / "tests" / "streamq_test_worker")
    started: list[subprocess.Popen] = []

    def start(*settings: str, queue: str | None = None) -> subprocess.Popen:
        name = f"py-worker-{len(started) + 1}"
        p = subprocess.Popen([str(binary), server, queue or stream, name, *settings],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        started.append(p)
        return p

    yield start
    for p in started:
        if p.poll() is None:
            p.terminate()
    for p in started:
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)


@pytest.fixture
def cli(server: str) -> Callable[..., str]:
    """Runs the streamq command (a C++ producer) against the session's server; returns stdout."""
    binary = build_file("STREAMQ_CLI", BUILD / "tools" / "streamq")

    def run(*args: str) -> str:
        env = dict(os.environ, STREAMQ_URL=server)
        p = subprocess.run([str(binary), *args], capture_output=True, text=True, env=env, timeout=60,
                           stdin=subprocess.DEVNULL)
        assert p.returncode == 0, f"streamq {' '.join(args)}: exit {p.returncode}\n{p.stdout}{p.stderr}"
        return p.stdout
    return run
