# SPDX-License-Identifier: MIT
"""A tracked task's state record (``<stream>:task:<task_id>``, written by the scripts of
src/lua/lib/record.lua), read as the C++ TaskRecord reads it (src/wire/record.cpp)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Mapping, Optional

from .errors import ConfigError

STATES = ("queued", "delayed", "running", "retrying", "done", "dead", "cancelled", "waiting")
FINAL_STATES = frozenset(("done", "dead", "cancelled"))
GROUP_TASK_TYPE = "streamq:group"

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _ms_time(text: str) -> Optional[datetime]:
    try:
        return _EPOCH + timedelta(milliseconds=int(text))
    except ValueError:
        return None


def take_counted(text: str, at: int) -> tuple[Optional[str], int]:
    """The next ``<length>:<bytes>`` of ``text`` from ``at`` (lengths count UTF-8 bytes, as Lua's
    ``#``), and the place after it; (None, at) when there is none there."""
    colon = text.find(":", at)
    if colon < 0 or not text[at:colon].isdigit():
        return None, at
    n = int(text[at:colon])
    raw = text[colon + 1:].encode("utf-8", "surrogateescape")
    if n > len(raw):
        return None, at
    part = raw[:n].decode("utf-8", "surrogateescape")
    return part, colon + 1 + len(part)


def counted_list(text: str) -> list[str]:
    out: list[str] = []
    at = 0
    while at < len(text):
        part, at = take_counted(text, at)
        if part is None:
            break
        out.append(part)
    return out


@dataclass
class TaskRecord:
    """The record of a tracked task (``Producer.wait``, ``Inspector.record``). Times are the
    server's clock, as aware UTC datetimes."""

    task_id: str
    task_type: str = ""
    #: queued, delayed, running, retrying, done, dead, cancelled or waiting (a flow's parent).
    state: str = "queued"
    #: Handler starts so far.
    attempts: int = 0
    enqueued_at: Optional[datetime] = None
    started_at: Optional[datetime] = None
    finished_at: Optional[datetime] = None
    #: Retrying or delayed: when it is due.
    due_at: Optional[datetime] = None
    #: The consumer that started it last.
    worker: str = ""
    #: The last failure's error, and a dead task's reason.
    error: str = ""
    reason: str = ""
    #: What the handler returned (Task::set_result), as text (JSON as a rule); None when nothing.
    result: Optional[str] = None
    #: What it reported last (Task::set_progress), as JSON text.
    progress: Optional[str] = None
    #: The stream whose record it is.
    queue: str = ""
    #: A flow's task: the parent that waits for it, and a parent's children, in order.
    parent: str = ""
    parent_queue: str = ""
    children: list[str] = field(default_factory=list)
    child_queues: dict[str, str] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        """Whether it is done, dead or cancelled."""
        return self.state in FINAL_STATES

    def result_json(self) -> Any:
        """The result parsed as JSON. ValueError when there is none or it is not JSON."""
        if self.result is None:
            raise ValueError(f"task {self.task_id} has no result")
        return json.loads(self.result)

    @classmethod
    def from_hash(cls, task_id: str, fields: Mapping[str, str], queue: str) -> "TaskRecord":
        """A record from its hash's fields (HGETALL)."""
        r = cls(task_id=task_id, queue=queue)
        for name, value in fields.items():
            if name == "state":
                # A state this version does not know (a newer writer's) reads as running.
                r.state = value if value in STATES else "running"
            elif name == "type":
                r.task_type = value
            elif name == "attempts":
                try:
                    r.attempts = int(value)
                except ValueError:
                    pass
            elif name in ("enqueued_at", "started_at", "finished_at", "due_at"):
                setattr(r, name, _ms_time(value))
            elif name in ("worker", "error", "reason", "result", "progress"):
                setattr(r, name, value)
            elif name == "flow_parent":
                r.parent = value
            elif name == "flow_home":
                r.parent_queue = value
            elif name == "flow_children":
                r.children = counted_list(value)
            elif name == "flow_queues":
                pairs = counted_list(value)
                r.child_queues = dict(zip(pairs[0::2], pairs[1::2]))
        return r


@dataclass
class ChildResult:
    """What one child of a flow ended with (a group's result, a parent's children's results)."""

    task_id: str
    #: "done", or "dead" / "cancelled" for a child whose failure was ignored.
    state: str
    #: What a done child returned ("" when nothing).
    result: str = ""
    error: str = ""

    @property
    def succeeded(self) -> bool:
        return self.state == "done"


def parse_children(text: str) -> list[ChildResult]:
    """Children's outcomes, ``<length>:<id><length>:<outcome>`` each, the outcome ``d`` + result
    or ``x`` + state + `` `` + error (src/wire/task.cpp)."""
    out: list[ChildResult] = []
    at = 0
    while at < len(text):
        child, at2 = take_counted(text, at)
        outcome, at3 = take_counted(text, at2) if child is not None else (None, at2)
        if child is None or outcome is None:
            raise ValueError("malformed children's results at offset %d" % at)
        at = at3
        if outcome.startswith("d"):
            out.append(ChildResult(child, "done", outcome[1:]))
        elif outcome.startswith("x"):
            state, _, error = outcome[1:].partition(" ")
            out.append(ChildResult(child, state, "", error))
        else:
            raise ValueError(f"malformed children's results: outcome of child {child}")
    return out


def group_results(group: TaskRecord) -> list[ChildResult]:
    """What a finished group's tasks ended with, in the order given (empty while it waits or
    when it ended dead). ConfigError for a record that is not a group's."""
    if group.task_type != GROUP_TASK_TYPE:
        raise ConfigError(f'task {group.task_id} is a "{group.task_type}", not a group')
    if group.state != "done" or group.result is None:
        return []
    return parse_children(group.result)
