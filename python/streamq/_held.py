# SPDX-License-Identifier: MIT
"""A pooled connection held by one wait (each waiting thread holds its own), whose every
command ends by the wait's deadline whatever the server does: a (re)connect within the connect
timeout and what is left, each answer awaited at most the socket timeout and what is left.
A server frozen mid-answer past the deadline makes the command raise Late, not hang."""
from __future__ import annotations

import time
from typing import Any

import redis
import redis.exceptions as rx


class Late(Exception):
    """The deadline came before the answer."""


class HeldConnection:
    def __init__(self, client: "redis.Redis[str]", socket_timeout: float, connect_timeout: float) -> None:
        self._pool = client.connection_pool
        self._conn = self._pool.get_connection("XREAD")
        self._socket_timeout = socket_timeout
        self._connect_timeout = connect_timeout
        self._shortened = False  # connected with timeouts cut to a deadline: not to be pooled so

    def close(self) -> None:
        """Gives the connection back to the pool (dropped first when it was connected with timeouts
        cut short, which its socket would keep)."""
        conn = self._conn
        if self._shortened:
            conn.disconnect()
            conn.socket_timeout = self._socket_timeout
            conn.socket_connect_timeout = self._connect_timeout
        self._pool.release(conn)

    def __enter__(self) -> "HeldConnection":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def command(self, deadline: float, *args: Any) -> Any:
        """Runs one command, answered by ``deadline`` (time.monotonic()) or Late. Raises redis-py's
        exceptions (ConnectionError, TimeoutError after the socket timeout, ResponseError)."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise Late()
        conn = self._conn
        if getattr(conn, "_sock", None) is None:  # (re)connects in send_command: within the deadline
            self._shortened = True
            conn.socket_connect_timeout = min(self._connect_timeout, remaining)
            conn.socket_timeout = min(self._socket_timeout, remaining)
        try:
            conn.send_command(*args)
            if not conn.can_read(timeout=min(remaining, self._socket_timeout)):
                conn.disconnect()  # the answer may still come: this connection is out of step
                if time.monotonic() >= deadline:
                    raise Late()
                raise rx.TimeoutError("Timeout reading from socket")
            return conn.read_response()
        except rx.ConnectionError:
            conn.disconnect()
            raise
