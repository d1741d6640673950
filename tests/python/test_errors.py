# SPDX-License-Identifier: MIT
"""Redis's error replies as streamq's ReplyError, its ``prefix`` the server's code as the C++
ReplyError::prefix() keeps it, also for the codes redis-py takes off the message (ERR, NOSCRIPT,
NOPERM, ...); and streamq's connection errors are Python's own too."""
from __future__ import annotations

import builtins
import uuid
from typing import Any, Iterator

import pytest

from conftest import free_port
from streamq import ConnectionError, Producer, ReplyError, TimeoutError, _redis


@pytest.fixture
def client(server: str) -> Iterator[Any]:
    c = _redis.connect(server, None, 5.0, 2.0)
    yield c
    c.close()


@pytest.mark.parametrize("command, code, text", [
    (("NOSUCHCOMMAND", "x"), "ERR", "ERR unknown command 'NOSUCHCOMMAND'"),
    (("EVALSHA", "0" * 40, 0), "NOSCRIPT", "NOSCRIPT No matching script"),
    (("GET", "a", "b"), "ERR", "ERR wrong number of arguments"),
])
def test_a_reply_errors_prefix_is_the_servers_code(client: Any, command: tuple[Any, ...], code: str,
                                                   text: str) -> None:
    with pytest.raises(ReplyError) as e:
        with _redis.translated():
            client.execute_command(*command)
    assert e.value.prefix == code
    assert str(e.value).startswith(text)


def test_an_acl_users_refusal_is_noperm(server: str, stream: str, r: Any) -> None:
    user, password = "py-noperm-" + uuid.uuid4().hex[:8], uuid.uuid4().hex
    r.execute_command("ACL", "SETUSER", user, "on", ">" + password, "~*", "&*", "+@all", "-evalsha", "-eval")
    try:
        url = server.replace("redis://", f"redis://{user}:{password}@")
        with Producer(url=url, stream=stream) as p:
            with pytest.raises(ReplyError) as refused:
                p.enqueue("work", {})
        assert refused.value.prefix == "NOPERM"
        assert str(refused.value).startswith("NOPERM")
    finally:
        r.execute_command("ACL", "DELUSER", user)


def test_connection_errors_are_pythons_own_too() -> None:
    assert issubclass(ConnectionError, builtins.ConnectionError)
    assert issubclass(TimeoutError, builtins.TimeoutError) and issubclass(TimeoutError, ConnectionError)
    with pytest.raises(builtins.ConnectionError):
        Producer(url=f"redis://127.0.0.1:{free_port()}", stream="nowhere").enqueue("work", {})
