# SPDX-License-Identifier: MIT
"""The exceptions of streamq, with the meanings of the C++ library's (include/streamq/errors.hpp
and record.hpp). Every one is a :class:`Error`."""
from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Optional, Sequence

if TYPE_CHECKING:
    from .record import TaskRecord


class Error(Exception):
    """Root of every exception streamq raises."""


class ConnectionError(Error, builtins.ConnectionError):  # noqa: A001 (the C++ name)
    """The connection to Redis failed (refused, reset, closed, unreachable). The outcome of a
    write that was in flight is unknown: a retried enqueue should reuse its task id. Also a
    Python ``ConnectionError``."""


class TimeoutError(ConnectionError, builtins.TimeoutError):  # noqa: A001
    """A command got no answer within the socket timeout. Also a Python ``TimeoutError``."""


class ReplyError(Error):
    """Redis answered with an error reply: the message is the server's, code and all (a Redis
    6.2 script error unwrapped, as the C++ library does). ``prefix`` is its code, the first word
    ("NOGROUP", "WRONGTYPE", "OOM", "NOPERM", "NOSCRIPT", "ERR", ...), as C++
    ReplyError::prefix()."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.prefix: str = message.split(" ", 1)[0] if message else ""


class ConfigError(Error, ValueError):
    """An option is invalid; the message names it."""


class PayloadError(Error, ValueError):
    """A payload was refused before anything was sent: larger than the size cap, not JSON, or
    nested deeper than the depth cap."""


class EnqueueRefusedError(Error):
    """Base of the refusals of an enqueue: nothing of a refused task was written.

    From ``enqueue_batch``, ``batch_ids`` has one slot per task, in order: the id of each task
    written, ``""`` for each refused one; the written ones are always the first ``accepted``.
    Empty for a single enqueue."""

    def __init__(self, message: str, batch_ids: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.batch_ids: list[str] = list(batch_ids)

    @property
    def accepted(self) -> int:
        """How many tasks of the batch were written."""
        return sum(1 for i in self.batch_ids if i)


class QueueFullError(EnqueueRefusedError):
    """The queue's unfinished backlog (every priority's stream plus the delayed set) reached
    ``max_len`` (or a tenant's backlog its tenant's max_len) and the overflow policy is reject."""


class BatchClosedError(EnqueueRefusedError):
    """A task of a batch (``batch=``) was refused: its batch is closed, or was never opened."""


class DuplicateTaskError(EnqueueRefusedError):
    """A task with ``unique_for`` was refused: a task with the same unique key was enqueued within
    its window and has not finished. ``existing_task_id`` is the id of the task that holds the
    unique key's lock; ``index`` is the refused task's place in its batch (0 for a single
    enqueue)."""

    def __init__(self, message: str, existing_task_id: str, index: int = 0,
                 batch_ids: Sequence[str] = ()) -> None:
        super().__init__(message, batch_ids)
        self.existing_task_id = existing_task_id
        self.index = index


class TaskFailedError(Error):
    """``Producer.wait``: the task ended dead or cancelled. ``record`` is its record."""

    def __init__(self, message: str, record: "TaskRecord") -> None:
        super().__init__(message)
        self.record = record


class WaitTimeoutError(Error):
    """``Producer.wait``: the task did not finish in time, or no record of it was found (it was
    not tracked, its record expired, or it is another queue's). ``record`` is its record as last
    read, when there is one."""

    def __init__(self, message: str, record: Optional["TaskRecord"] = None) -> None:
        super().__init__(message)
        self.record = record
