# SPDX-License-Identifier: MIT
"""The Redis side: a redis-py client for a URL, the scripts run by EVALSHA with an EVAL
fallback, and redis-py's exceptions turned into streamq's."""
from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Any, Iterator, Optional, Sequence

import redis
import redis.exceptions as rx
from redis.connection import DefaultParser

from . import _lua
from .errors import ConfigError, ConnectionError, ReplyError, TimeoutError

# Redis 6.2 wraps an error raised inside a script; Redis 7 reports it as it is.
_WRAPPED = re.compile(r"^(?:ERR )?Error running script \(call to f_[0-9a-f]+\): @\w+:\d+: (.*)$", re.S)


def unwrap(message: str) -> str:
    m = _WRAPPED.match(message)
    return m.group(1) if m else message


class _KeepsServerMessage(DefaultParser):  # type: ignore[misc]
    """redis-py's parser, each error reply keeping the server's whole message: redis-py takes the
    code off some (ERR, NOSCRIPT, NOPERM, READONLY, NOAUTH, LOADING, EXECABORT)."""

    def parse_error(self, response: str) -> rx.ResponseError:
        error: rx.ResponseError = super().parse_error(response)
        error.streamq_server_message = response
        return error


def connect(url: str, client_name: Optional[str], socket_timeout: float, connect_timeout: float) -> "redis.Redis[str]":
    """A client for ``url`` (redis://, rediss://, unix://) answering text: Redis's bytes decoded
    as UTF-8, any that are not kept as surrogates, so they round-trip unchanged. Connects within
    ``connect_timeout`` and waits ``socket_timeout`` at most for an answer (seconds, as C++
    ConnectionOptions::connect_timeout and socket_timeout)."""
    return redis.Redis.from_url(url, decode_responses=True, encoding_errors="surrogateescape",
                                client_name=client_name, socket_timeout=socket_timeout,
                                socket_connect_timeout=connect_timeout, parser_class=_KeepsServerMessage)


def check_timeouts(socket_timeout: float, connect_timeout: float) -> None:
    """ConfigError unless both are a positive number of seconds."""
    for name, value in (("socket_timeout", socket_timeout), ("connect_timeout", connect_timeout)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ConfigError(f"{name} must be a positive number of seconds")


@contextmanager
def translated() -> Iterator[None]:
    """redis-py's exceptions as streamq's (ConnectionError, TimeoutError, ReplyError)."""
    try:
        yield
    except rx.TimeoutError as e:
        raise TimeoutError(str(e)) from e
    except rx.ConnectionError as e:
        raise ConnectionError(str(e)) from e
    except rx.ResponseError as e:
        raise ReplyError(server_message(e)) from e


def run_script(client: "redis.Redis[str]", name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
    """Runs script ``name`` of src/lua: EVALSHA, then EVAL when the server does not have it.
    Raises redis-py's exceptions (see ``translated``)."""
    s = _lua.script(name)
    try:
        return client.evalsha(s.sha1, len(keys), *keys, *args)
    except rx.NoScriptError:
        return client.eval(s.source, len(keys), *keys, *args)


def xinfo_groups_or_none(client: "redis.Redis[str]", stream: str) -> Optional[list[dict[str, Any]]]:
    """XINFO GROUPS of ``stream``, or None when the stream does not exist."""
    try:
        groups: list[dict[str, Any]] = client.xinfo_groups(stream)
        return groups
    except rx.ResponseError as e:
        if "no such key" in server_message(e):  # ERR no such key; any other error is one
            return None
        raise


def server_message(error: rx.ResponseError) -> str:
    """The server's message of an error reply, code and all (a Redis 6.2 script error
    unwrapped): what the parser kept, else redis-py's message with the code it took off put back."""
    kept = getattr(error, "streamq_server_message", None)
    if isinstance(kept, str):
        return unwrap(kept)
    message = str(error)
    for error_class, code in _CODES_TAKEN_OFF:
        if isinstance(error, error_class):
            return code + " " + message
    return unwrap(message)


# redis-py's classes for the codes it takes off a message, most specific first (a reply's
# exception made without our parser: a plain ResponseError may still be an ERR's or another
# code's, which it keeps).
_CODES_TAKEN_OFF: tuple[tuple[type, str], ...] = (
    (rx.NoScriptError, "NOSCRIPT"), (rx.NoPermissionError, "NOPERM"), (rx.ReadOnlyError, "READONLY"),
    (rx.ExecAbortError, "EXECABORT"), (rx.ModuleError, "ERR"))
