# SPDX-License-Identifier: MIT
"""Inspector: reads a queue without changing it: a tracked task's record, a queue's numbers,
a batch's counts and the entries waiting in a level's stream (the C++ Inspector and StatsReader
do more: cancel, replay, delete, pause are theirs)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from . import _partitions, _redis
from ._wire import QueueKeys
from .record import TaskRecord

_MOST_BACKLOG_TENANTS = 1000  # per partition, whose backlogs stats() adds up (as C++ StatsReader)


@dataclass
class LevelStats:
    """One priority level's stream: ``<stream>:p:high``, ``<stream>``, ``<stream>:p:low`` (of a
    partitioned queue: summed over its partitions, ``stream`` the first partition's)."""

    level: str
    stream: str
    exists: bool = False
    #: XLEN: unfinished entries of this level.
    length: int = 0
    #: Delivered, unacknowledged entries of this level, over every consumer group.
    pending: int = 0


@dataclass
class QueueStats:
    """A snapshot of a queue (its numbers mean what the C++ QueueStats' do; of a partitioned
    queue, the sum over its partitions, as StatsReader with StatsOptions::partitions)."""

    stream: str
    #: The partitions read.
    partitions: int = 1
    #: Unfinished entries of every priority level (streamq deletes finished ones).
    length: int = 0
    #: Delivered, unacknowledged entries of every level and group.
    pending_total: int = 0
    #: XLEN of ``<stream>:dlq``.
    dlq_length: int = 0
    #: ZCARD of ``<stream>:delayed``.
    delayed: int = 0
    #: Tasks waiting in the backlogs of the queue's tenants, every level (the LLEN of each backlog
    #: of the tenants with one), not in ``length``; as C++ QueueStats::backlog, None when a
    #: partition has more than 1,000 such tenants (three LLEN each would be too many).
    backlog: Optional[int] = 0
    #: Tenants with a backlog (ZCARD of ``:tenants:ready`` and ``:tenants:waiting``).
    backlog_tenants: int = 0
    #: Whether the queue is paused (``<stream>:paused`` exists; partitioned: on every partition).
    paused: bool = False
    levels: list[LevelStats] = field(default_factory=list)


@dataclass
class Entry:
    """One entry of a level's stream: its id and its fields, in order."""

    id: str
    fields: dict[str, str]


class Inspector:
    """Read-only views of queue ``stream`` at ``url``; ``partitions``: the queue's partitions
    (as its producers say, ProducerOptions::partitions). Issues HGETALL, XLEN, XINFO GROUPS,
    ZCARD, EXISTS and XRANGE only."""

    def __init__(self, url: str = "redis://127.0.0.1:6379", stream: str = "task_queue",
                 client_name: Optional[str] = None, socket_timeout: float = 5.0, connect_timeout: float = 2.0,
                 partitions: int = 1) -> None:
        _partitions.check_partitions(partitions, stream)
        _redis.check_timeouts(socket_timeout, connect_timeout)
        self.stream = stream
        self.partitions = partitions
        self._parts = [QueueKeys(_partitions.partition_stream(stream, partitions, i)) for i in range(partitions)]
        self._client = _redis.connect(url, client_name, socket_timeout, connect_timeout)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> "Inspector":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def record(self, task_id: str) -> Optional[TaskRecord]:
        """The record of tracked task ``task_id``, or None when there is none (not tracked,
        expired, or another queue's). HGETALL on each partition until one has it."""
        with _redis.translated():
            for k in self._parts:
                fields = self._client.hgetall(k.task(task_id))
                if fields:
                    return TaskRecord.from_hash(task_id, fields, k.stream)
        return None

    def batch(self, batch_id: str) -> Optional[dict[str, str]]:
        """A batch's hash (state, total, done, dead, ...), or None when there is no such batch
        (in a partitioned queue, its batch id's partition's)."""
        home = self._parts[_partitions.Partitioner(self.partitions).of(batch=batch_id)]
        with _redis.translated():
            fields = self._client.hgetall(home.batch(batch_id))
        return fields or None

    def entries(self, priority: str = "normal", count: int = 100) -> list[Entry]:
        """The first ``count`` entries of a level's stream, oldest first (tasks not finished);
        of a partitioned queue, the partitions' one after another (at most ``count`` in all)."""
        out: list[Entry] = []
        with _redis.translated():
            for k in self._parts:
                if len(out) >= count:
                    break
                out.extend(Entry(i, f) for i, f in self._client.xrange(k.level(priority), count=count - len(out)))
        return out

    def stats(self) -> QueueStats:
        """The queue's numbers now."""
        s = QueueStats(stream=self.stream, partitions=self.partitions, paused=True)
        levels = {level: LevelStats(level=level, stream=self._parts[0].level(level))
                  for level in ("high", "normal", "low")}
        with _redis.translated():
            for k in self._parts:
                for level, ls in levels.items():
                    self._add_level(ls, k.level(level))
                s.dlq_length += self._client.xlen(k.dlq)
                s.delayed += self._client.zcard(k.delayed)
                tenants, backlog = self._backlog(k)
                s.backlog_tenants += tenants
                s.backlog = None if s.backlog is None or backlog is None else s.backlog + backlog
                s.paused = s.paused and bool(self._client.exists(k.paused))
        s.levels = list(levels.values())
        s.length = sum(ls.length for ls in s.levels)
        s.pending_total = sum(ls.pending for ls in s.levels)
        return s

    def _backlog(self, k: QueueKeys) -> tuple[int, Optional[int]]:
        """The tenants with a backlog in one partition, and their tasks (None beyond 1,000 tenants),
        as C++ StatsReader reads them."""
        names: list[str] = []
        for tenants_set in (k.tenants_ready, k.tenants_waiting):
            names.extend(self._client.zrange(tenants_set, 0, _MOST_BACKLOG_TENANTS - 1))
        tenants = self._client.zcard(k.tenants_ready) + self._client.zcard(k.tenants_waiting)
        if tenants > _MOST_BACKLOG_TENANTS:
            return tenants, None
        pipe = self._client.pipeline(transaction=False)
        for name in names:
            for level in ("high", "normal", "low"):
                pipe.llen(k.tenant_backlog(name, level))
        return tenants, sum(pipe.execute())

    def _add_level(self, into: LevelStats, stream: str) -> None:
        """Adds one level stream's numbers (XINFO GROUPS, XLEN) to ``into``."""
        groups = _redis.xinfo_groups_or_none(self._client, stream)
        if groups is None:
            return
        into.exists = True
        into.length += self._client.xlen(stream)
        into.pending += sum(int(g.get("pending", 0)) for g in groups)
