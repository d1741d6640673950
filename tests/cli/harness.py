# SPDX-License-Identifier: MIT
"""What the tests of the streamq command share: free loopback ports, waiting for a condition,
and a private redis-server on a free port that only its own test class starts and stops."""
import os
import shutil
import socket
import subprocess
import tempfile
import time
import unittest

import redis

CLI = os.environ["STREAMQ_CLI"]
SERVER = os.environ.get("STREAMQ_REDIS_SERVER", "redis-server")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout=15.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


class RedisTestCase(unittest.TestCase):
    """A test class with its own redis-server (cls.url, cls.r), stopped by its pid afterwards."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="streamq-cli-")
        cls.port = free_port()
        cls.server = subprocess.Popen(
            [SERVER, "--port", str(cls.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", cls.dir], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        cls.url = "redis://127.0.0.1:%d" % cls.port
        cls.r = redis.Redis(port=cls.port)

        def up():
            try:
                return cls.r.ping()
            except redis.exceptions.ConnectionError:
                return False
        wait_for(up, what="redis-server")

    @classmethod
    def tearDownClass(cls):
        cls.server.terminate()
        cls.server.wait(10)
        shutil.rmtree(cls.dir, ignore_errors=True)

    def cli(self, *args, stdin=None, check=True):
        """Runs streamq with STREAMQ_URL pointing at this class's server."""
        env = dict(os.environ, STREAMQ_URL=self.url)
        p = subprocess.run([CLI, *args], input=stdin, capture_output=True, text=True, env=env, timeout=60,
                           stdin=None if stdin is not None else subprocess.DEVNULL)
        if check and p.returncode != 0:
            self.fail("streamq %s: exit %d\n%s%s" % (" ".join(args), p.returncode, p.stdout, p.stderr))
        return p

    def add_dead(self, queue, n, task_type="send_email", payload=None):
        """n dead letters as a worker writes them (max_retries), task ids <type>-<i>."""
        for i in range(n):
            self.r.xadd(queue + ":dlq", {
                "task_id": "%s-%d" % (task_type, i), "task_type": task_type,
                "payload": payload if payload is not None else '{"to":"user%d@example.com"}' % i,
                "created_at": "2026-12-01T00:00:00.000000", "max_retries": "3", "retry_count": "3",
                "error": "smtp down", "failed_at": "2026-12-01T00:00:01.000000", "original_id": "1-1",
                "consumer": "w1", "reason": "max_retries"})
