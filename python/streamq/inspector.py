# SPDX-License-Identifier: MIT
"""Inspector: reads a queue without changing it: a tracked task's record, a queue's numbers,
a batch's counts and the entries waiting in a level's stream (the C++ Inspector and StatsReader
do more: cancel, replay, delete, pause are theirs)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import redis.exceptions as rx

from . import _redis
from ._wire import QueueKeys
from .record import TaskRecord


@dataclass
class LevelStats:
    """One priority level's stream: ``<stream>:p:high``, ``<stream>``, ``<stream>:p:low``."""

    level: str
    stream: str
    exists: bool = False
    #: XLEN: unfinished entries of this level.
    length: int = 0
    #: Delivered, unacknowledged entries of this level, over every consumer group.
    pending: int = 0


@dataclass
class QueueStats:
    """A snapshot of a queue (its numbers mean what the C++ QueueStats' do)."""

    stream: str
    #: Unfinished entries of every priority level (streamq deletes finished ones).
    length: int = 0
    #: Delivered, unacknowledged entries of every level and group.
    pending_total: int = 0
    #: XLEN of ``<stream>:dlq``.
    dlq_length: int = 0
    #: ZCARD of ``<stream>:delayed``.
    delayed: int = 0
    #: Tenants with a backlog (ZCARD of ``:tenants:ready`` and ``:tenants:waiting``).
    backlog_tenants: int = 0
    #: Whether the queue is paused (``<stream>:paused`` exists).
    paused: bool = False
    levels: list[LevelStats] = field(default_factory=list)


@dataclass
class Entry:
    """One entry of a level's stream: its id and its fields, in order."""

    id: str
    fields: dict[str, str]


class Inspector:
    """Read-only views of queue ``stream`` at ``url``. Issues HGETALL, XLEN, XINFO GROUPS, ZCARD,
    EXISTS and XRANGE only."""

    def __init__(self, url: str = "redis://127.0.0.1:6379", stream: str = "task_queue",
                 client_name: Optional[str] = None, socket_timeout: Optional[float] = None) -> None:
        self.stream = stream
        self.keys = QueueKeys(stream)
        self._client = _redis.connect(url, client_name, socket_timeout)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> "Inspector":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def record(self, task_id: str) -> Optional[TaskRecord]:
        """The record of tracked task ``task_id``, or None when there is none (not tracked,
        expired, or another queue's)."""
        with _redis.translated():
            fields = self._client.hgetall(self.keys.task(task_id))
        return TaskRecord.from_hash(task_id, fields, self.stream) if fields else None

    def batch(self, batch_id: str) -> Optional[dict[str, str]]:
        """A batch's hash (state, total, done, dead, ...), or None when there is no such batch."""
        with _redis.translated():
            fields = self._client.hgetall(self.keys.batch(batch_id))
        return fields or None

    def entries(self, priority: str = "normal", count: int = 100) -> list[Entry]:
        """The first ``count`` entries of a level's stream, oldest first (tasks not finished)."""
        with _redis.translated():
            return [Entry(i, f) for i, f in self._client.xrange(self.keys.level(priority), count=count)]

    def stats(self) -> QueueStats:
        """The queue's numbers now."""
        s = QueueStats(stream=self.stream)
        with _redis.translated():
            for level in ("high", "normal", "low"):
                ls = LevelStats(level=level, stream=self.keys.level(level))
                try:
                    groups = self._client.xinfo_groups(ls.stream)
                    ls.exists = True
                except rx.ResponseError:  # no such key
                    groups = []
                if ls.exists:
                    ls.length = self._client.xlen(ls.stream)
                    ls.pending = sum(int(g.get("pending", 0)) for g in groups)
                s.levels.append(ls)
                s.length += ls.length
                s.pending_total += ls.pending
            s.dlq_length = self._client.xlen(self.keys.dlq)
            s.delayed = self._client.zcard(self.keys.delayed)
            s.backlog_tenants = (self._client.zcard(self.keys.tenants_ready) +
                                 self._client.zcard(self.keys.tenants_waiting))
            s.paused = bool(self._client.exists(self.keys.paused))
        return s
