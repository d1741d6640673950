# SPDX-License-Identifier: MIT
"""The wire format (docs/wire-format.md): field names, timestamps, ids, durations, payload
checks and the keys of a queue, as src/wire/ writes them."""
from __future__ import annotations

import json
import math
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any, Union

from ._json_check import JsonCheck, check_json
from .errors import ConfigError, PayloadError

Duration = Union[int, float, timedelta]

#: The fields of a task entry, in the seed's order, then the reserved ones (codec.cpp).
TASK_FIELDS = ("task_id", "task_type", "payload", "created_at", "max_retries", "retry_count", "last_error")
DEAD_LETTER_FIELDS = ("error", "failed_at", "original_id", "consumer", "reason")
RESERVED_FIELDS = frozenset(TASK_FIELDS + DEAD_LETTER_FIELDS + (
    "unique_key", "retention", "deadline", "retry_of_span", "flow_parent", "flow_on_failure", "flow_home",
    "flow_children", "batch_id", "streamq_tenant"))
TENANT_FIELD = "streamq_tenant"

MAX_FIELDS = 1000  # kMaxFields: most fields an entry may have
MAX_DURATION_MS = 24 * 365 * 10 * 3600 * 1000  # kMaxDuration: ten years
MAX_TENANT_BYTES = 256


def format_timestamp(t: datetime | None = None) -> str:
    """``2026-11-29T18:00:00.123456``: UTC, microseconds, no zone (created_at)."""
    t = datetime.now(timezone.utc) if t is None else t.astimezone(timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%f")


def new_task_id() -> str:
    """A random UUID v4 in its 36-character text form."""
    return str(uuid.uuid4())


def duration_ms(value: Duration, name: str, least_ms: int = 0) -> int:
    """A duration given as seconds (int or float) or a timedelta, in whole milliseconds (as C++
    std::chrono::milliseconds): seconds rounded to the nearest millisecond (1.005 is 1005 ms, the
    value a C++ caller writes, though 1.005 * 1000 is 1004.999...), a timedelta's microseconds
    cut to whole milliseconds as duration_cast does. ConfigError when negative (below
    ``least_ms``) or over ten years."""
    if isinstance(value, bool) or not isinstance(value, (int, float, timedelta)):
        raise ConfigError(f"{name} must be seconds (int or float) or a timedelta, not {type(value).__name__}")
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if math.isnan(seconds):
        raise ConfigError(f"{name} must be a number of seconds, not NaN")
    if seconds * 1000 < least_ms:
        raise ConfigError(f"{name} must be >= {least_ms} ms")
    if seconds * 1000 > MAX_DURATION_MS:
        raise ConfigError(f"{name} must be <= {MAX_DURATION_MS} ms")
    if isinstance(value, timedelta):
        return value // timedelta(milliseconds=1)
    return round(seconds * 1000)


def epoch_ms(when: datetime | int | float, name: str) -> int:
    """A point in time (an aware datetime, or seconds since the Unix epoch, rounded to the nearest
    millisecond) in ms since the epoch, at least 1 (1 ms after the epoch stands for "already
    past"). A naive datetime is a ConfigError: which zone it means is not known."""
    if isinstance(when, datetime):
        if when.tzinfo is None or when.utcoffset() is None:
            raise ConfigError(f"{name} must be a datetime with a time zone (e.g. datetime.now(timezone.utc)), "
                              "not a naive one")
        ms = (when - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(milliseconds=1)
    elif isinstance(when, (int, float)) and not isinstance(when, bool):
        ms = round(when * 1000)
    else:
        raise ConfigError(f"{name} must be a datetime or seconds since the Unix epoch")
    return max(1, ms)


def payload_text(payload: Any, max_bytes: int, max_depth: int) -> str:
    """The payload's JSON text: a ``str`` or ``bytes`` is JSON text already, anything else is
    serialised compactly. Checked as the C++ producer checks it (src/wire/codec.cpp,
    payload_problem: the size cap, then ``_json_check``): PayloadError when too large, not JSON
    the C++ side accepts, or too deep."""
    raw = _payload_bytes(payload)
    if len(raw) > max_bytes:
        raise PayloadError(f"payload is {len(raw)} bytes, over the cap of {max_bytes}")
    verdict = check_json(raw, max_depth)
    if verdict is JsonCheck.TOO_DEEP:
        raise PayloadError(f"payload is nested deeper than {max_depth} levels")
    if verdict is JsonCheck.INVALID:
        raise PayloadError("payload is not valid JSON")
    return raw.decode("utf-8")


def _payload_bytes(payload: Any) -> bytes:
    """The bytes that would be sent: JSON text as given (a ``str`` as redis-py encodes it, a
    character it cannot encode, such as a lone surrogate, refused), or a value serialised."""
    if isinstance(payload, (bytes, bytearray)):
        return bytes(payload)
    if isinstance(payload, str):
        text = payload
    else:
        try:
            text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise PayloadError(f"payload is not JSON-serialisable: {e}") from None
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raise PayloadError("payload is not valid JSON (a lone surrogate is not UTF-8)") from None


def check_tenant(tenant: str) -> None:
    raw = tenant.encode("utf-8", "surrogateescape")
    if not raw or len(raw) > MAX_TENANT_BYTES or b"\0" in raw:
        raise ConfigError(f"tenant must be 1 to {MAX_TENANT_BYTES} bytes, without NUL")


class QueueKeys:
    """The keys of a queue (src/wire/keys.hpp), each derived from its stream name."""

    def __init__(self, stream: str) -> None:
        self.stream = stream
        self.high = stream + ":p:high"
        self.low = stream + ":p:low"
        self.delayed = stream + ":delayed"
        self.dlq = stream + ":dlq"
        self.events = stream + ":events"
        self.paused = stream + ":paused"
        self.tenants_ready = stream + ":tenants:ready"
        self.tenants_waiting = stream + ":tenants:waiting"

    def task(self, task_id: str) -> str:
        return self.stream + ":task:" + task_id

    def unique_lock(self, key: str) -> str:
        return self.stream + ":unique:" + key

    def debounce(self, key: str) -> str:
        return self.stream + ":debounce:" + key

    def batch(self, batch_id: str) -> str:
        return self.stream + ":batches:" + batch_id

    def batch_refused(self, token: str) -> str:
        return self.stream + ":batch:" + token + ":refused"

    def tenant_backlog(self, tenant: str, priority: str) -> str:
        """Tenant ``tenant``'s backlog of a level (a list), the suffixes of the level streams'."""
        return self.stream + ":tenant:" + tenant + {"high": ":p:high", "normal": "", "low": ":p:low"}[priority]

    def level(self, priority: str) -> str:
        return {"high": self.high, "normal": self.stream, "low": self.low}[priority]
