# SPDX-License-Identifier: MIT
"""Producer.wait: follows the queue's events (``<stream>:events`` of each partition, XREAD
BLOCK) and reads the task's record with the watch script until it finished, as the C++ waiter
does (src/producer/waiter.cpp), on a connection of its own held for the wait (_held), every
command bounded by the wait's deadline: a connection that fails is tried again until then, and
the wait ends by its timeout whatever Redis does."""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any, Mapping, Optional, Sequence

import redis.exceptions as rx

from . import _lua
from ._held import HeldConnection, Late
from ._wire import QueueKeys
from .errors import WaitTimeoutError
from .record import FINAL_STATES, TaskRecord, _ms_time

_REMEMBERED = 10000  # final events remembered (as the C++ waiter)
_NO_RECORD_GRACE = 1.0  # s a wait on an id without a record waits for it to appear
_LONGEST_BLOCK = 1.0  # s an XREAD blocks at most: the record is read again after each
_RETRY_PAUSE = 0.1  # s between tries of a connection that failed
_NO_RECORD = (" was found: it was not enqueued with a retention, its record expired, or it is another "
              "queue's (wait_for_enqueue=True waits for a task enqueued later)")


class Memory:
    """What the waits of one Producer share, as the C++ waiter's thread keeps it: where the last
    wait stopped reading each events stream, and the last final events read (a record of
    Retention 0 goes with its task's end; a later wait on that task is answered from its event)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._position: Optional[dict[str, str]] = None
        self._ended: OrderedDict[str, TaskRecord] = OrderedDict()

    def position(self) -> Optional[dict[str, str]]:
        with self._lock:
            return None if self._position is None else dict(self._position)

    def advance(self, position: Mapping[str, str]) -> None:
        """The next wait reads the events from here on (the furthest any wait read)."""
        with self._lock:
            if self._position is None:
                self._position = dict(position)
                return
            for events, at in position.items():
                if _entry_id(at) > _entry_id(self._position.get(events, "0-0")):
                    self._position[events] = at

    def remember(self, ended: TaskRecord) -> None:
        with self._lock:
            self._ended[ended.task_id] = ended
            self._ended.move_to_end(ended.task_id)
            while len(self._ended) > _REMEMBERED:
                self._ended.popitem(last=False)

    def ended(self, task_id: str) -> Optional[TaskRecord]:
        with self._lock:
            return self._ended.get(task_id)


class Wait:
    """One wait for task ``task_id`` until ``deadline`` (time.monotonic())."""

    def __init__(self, held: HeldConnection, parts: Sequence[QueueKeys], memory: Memory, task_id: str,
                 deadline: float, socket_timeout: float, for_enqueue: bool) -> None:
        self.held = held
        self.parts = parts
        self.memory = memory
        self.task_id = task_id
        self.deadline = deadline
        self.for_enqueue = for_enqueue
        # Each XREAD blocks at most this long: its answer is awaited within the socket timeout.
        self.longest_block = min(_LONGEST_BLOCK, socket_timeout - min(0.5, socket_timeout / 2))
        self.position: Optional[dict[str, str]] = None
        self.record: Optional[TaskRecord] = None
        self.read = False  # the record was read once
        self.missing_since: Optional[float] = None
        self.trouble = ""  # the connection's last failure, while it lasts

    def run(self) -> TaskRecord:
        """The task's record once it finished; WaitTimeoutError at the deadline or when it has no
        record (see Producer.wait). Raises redis-py's ResponseError for an error reply."""
        while time.monotonic() < self.deadline:
            try:
                found = self._step()
            except Late:
                break
            except rx.ConnectionError as e:  # (and TimeoutError) tried again until the deadline
                self.trouble = str(e) or type(e).__name__
                time.sleep(max(0.0, min(_RETRY_PAUSE, self.deadline - time.monotonic())))
                continue
            self.trouble = ""
            if found is not None:
                return found
        raise self._timed_out()

    def _step(self) -> Optional[TaskRecord]:
        """One round: the record read (first), or the events read for a while then the record;
        the record when it finished."""
        if self.position is None:
            self.position = self.memory.position() or self._newest_events()
        if not self.read:
            self._note(self._read_record())
            self.read = True
        if self.record is not None and self.record.finished:
            return self.record
        if self.record is None and self.missing_since is not None and \
                time.monotonic() - self.missing_since >= _NO_RECORD_GRACE:
            self._note(self._read_record())  # once more, then it fails saying so
            if self.record is None:
                raise WaitTimeoutError("no record of task " + self.task_id + _NO_RECORD)
            return self.record if self.record.finished else None
        self._read_events()
        self._note(self._read_record())
        return self.record if self.record is not None and self.record.finished else None

    def _note(self, record: Optional[TaskRecord]) -> None:
        if record is None:
            record = self.memory.ended(self.task_id)  # its record went with its end (retention 0)
        self.record = record
        if record is not None:
            self.missing_since = None
        elif self.missing_since is None and not self.for_enqueue:
            self.missing_since = time.monotonic()

    def _timed_out(self) -> WaitTimeoutError:
        if self.record is not None:
            since = f"; its record could not be read since: {self.trouble}" if self.trouble else ""
            return WaitTimeoutError(
                f"task {self.task_id} did not finish in time (it is {self.record.state}{since})", self.record)
        if self.trouble:
            return WaitTimeoutError(
                f"task {self.task_id} did not finish in time: its record could not be read ({self.trouble})")
        if self.read:
            return WaitTimeoutError("no record of task " + self.task_id + _NO_RECORD)
        return WaitTimeoutError(f"task {self.task_id} did not finish in time (its record was not read yet)")

    # ------------------------------------------------------------------------------ the commands

    def _newest_events(self) -> dict[str, str]:
        position = {}
        for k in self.parts:
            newest = self.held.command(self.deadline, "XREVRANGE", k.events, "+", "-", "COUNT", 1)
            position[k.events] = newest[0][0] if newest else "0-0"
        return position

    def _read_events(self) -> None:
        """XREAD of every partition's events, blocking a while; remembers the final ones."""
        assert self.position is not None
        block = max(1, int(min(self.deadline - time.monotonic(), self.longest_block) * 1000))
        keys = list(self.position)
        answer = self.held.command(self.deadline, "XREAD", "COUNT", 1000, "BLOCK", block, "STREAMS", *keys,
                                   *(self.position[k] for k in keys))
        for events, entries in answer or []:
            for entry_id, flat in entries:
                self.position[events] = entry_id
                fields = dict(zip(flat[0::2], flat[1::2]))
                if fields.get("event") in FINAL_STATES and "task_id" in fields:
                    self.memory.remember(ended_by(fields["task_id"], fields, events[:-len(":events")]))
        self.memory.advance(self.position)

    def _read_record(self) -> Optional[TaskRecord]:
        """The task's record, from whichever partition has it (the watch script, which keeps a
        finished record a minute for a waiter)."""
        script = _lua.script("watch")
        for k in self.parts:
            try:
                reply = self.held.command(self.deadline, "EVALSHA", script.sha1, 1, k.task(self.task_id))
            except rx.NoScriptError:
                reply = self.held.command(self.deadline, "EVAL", script.source, 1, k.task(self.task_id))
            if reply:
                return TaskRecord.from_hash(self.task_id, dict(zip(reply[0::2], reply[1::2])), k.stream)
        return None


def ended_by(task_id: str, fields: Mapping[str, Any], queue: str) -> TaskRecord:
    """What a final event says of its task, for a record that went with its end."""
    r = TaskRecord(task_id=task_id, queue=queue, state=fields.get("event", "done"))
    r.error = fields.get("error", "")
    r.reason = fields.get("reason", "")
    at = fields.get("at")
    if at is not None and at.isdigit():
        r.finished_at = _ms_time(at)
    return r


def _entry_id(text: str) -> tuple[int, int]:
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)
