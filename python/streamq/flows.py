# SPDX-License-Identifier: MIT
"""Flows (docs/workflows.md): a task that runs once the tasks it waits for finished, with their
results. ``chain``, ``chord`` and ``group`` build the common shapes; ``Producer.enqueue_flow``
writes one in a single call of the enqueue script."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Union

from .errors import ConfigError
from .record import GROUP_TASK_TYPE

#: What a child's failure does to the parent that waits for it (C++ ChildFailure):
#: "fail_parent" (the parent ends dead, unrun, reason child_failed), "ignore" (the parent runs
#: and reads the failure among its children's results) or "remove" (the parent runs without it).
CHILD_FAILURES = ("fail_parent", "ignore", "remove")


@dataclass
class TaskSpec:
    """One task: its type, payload (a JSON-serialisable value or JSON text) and the keyword
    options of ``Producer.enqueue`` (task_id, max_retries, priority, retention, ...)."""

    task_type: str
    payload: Any = None
    options: dict[str, Any] = field(default_factory=dict)


#: A task as given to enqueue_batch, chain, chord and group: a TaskSpec, ``(type, payload)`` or
#: ``(type, payload, {options})``.
TaskLike = Union[TaskSpec, tuple[Any, ...]]


def task_spec(t: TaskLike) -> TaskSpec:
    """``t`` as a TaskSpec (a copy of its options)."""
    if isinstance(t, TaskSpec):
        return TaskSpec(t.task_type, t.payload, dict(t.options))
    if isinstance(t, tuple) and len(t) in (2, 3):
        options = dict(t[2]) if len(t) == 3 else {}
        if not isinstance(options, dict):
            raise ConfigError("a task's options must be a dict")
        return TaskSpec(t[0], t[1], options)
    raise ConfigError("a task is a TaskSpec, (task_type, payload) or (task_type, payload, options)")


@dataclass
class FlowNode:
    """One task of a flow with the children it waits for. A node with children is a parent: it
    runs once every child finished, and reads their results (C++ Task::children_results)."""

    task_type: str
    payload: Any = None
    #: The keyword options of Producer.enqueue. A parent may not have a delay or run_at. Unset
    #: retention (here and the Producer's): a flow's tasks are kept an hour once done.
    options: dict[str, Any] = field(default_factory=dict)
    #: What this node's failure does to its parent (CHILD_FAILURES); ignored on the root.
    on_failure: str = "fail_parent"
    children: list["FlowNode"] = field(default_factory=list)


@dataclass
class FlowIds:
    """The task ids of a flow, in the shape of its FlowNode tree."""

    task_id: str
    children: list["FlowIds"] = field(default_factory=list)


def _check_failure(on_failure: str) -> str:
    if on_failure not in CHILD_FAILURES:
        raise ConfigError("on_failure must be 'fail_parent', 'ignore' or 'remove'")
    return on_failure


def chain(tasks: Iterable[TaskLike]) -> FlowNode:
    """Each task runs after the one before it finished, and reads its result. The flow's root is
    the last task; a failure fails the tasks after it. ConfigError for an empty list."""
    specs = [task_spec(t) for t in tasks]
    if not specs:
        raise ConfigError("chain: no tasks")
    node = FlowNode(specs[0].task_type, specs[0].payload, specs[0].options)
    for s in specs[1:]:
        node = FlowNode(s.task_type, s.payload, s.options, children=[node])
    return node


def chord(header: Iterable[TaskLike], callback: TaskLike, on_failure: str = "fail_parent") -> FlowNode:
    """The ``header`` tasks run (in parallel), then ``callback`` runs with their results, in the
    header's order. ``on_failure`` applies to every header task. ConfigError for no header."""
    specs = [task_spec(t) for t in header]
    if not specs:
        raise ConfigError("chord: no header tasks")
    _check_failure(on_failure)
    cb = task_spec(callback)
    return FlowNode(cb.task_type, cb.payload, cb.options,
                    children=[FlowNode(s.task_type, s.payload, s.options, on_failure) for s in specs])


def group(tasks: Iterable[TaskLike], on_failure: str = "fail_parent", task_id: str = "") -> FlowNode:
    """The tasks run (in parallel) and are awaited together by the root's id (``task_id``, else
    a new one); the root is not a task that runs: its record (type "streamq:group") ends done
    with their outcomes as its result (``group_results``), or dead under "fail_parent"."""
    specs = [task_spec(t) for t in tasks]
    if not specs:
        raise ConfigError("group: no tasks")
    _check_failure(on_failure)
    options: dict[str, Any] = {"task_id": task_id} if task_id else {}
    return FlowNode(GROUP_TASK_TYPE, "{}", options,
                    children=[FlowNode(s.task_type, s.payload, s.options, on_failure) for s in specs])


def flow_node(node: Union[FlowNode, Mapping[str, Any]]) -> FlowNode:
    if isinstance(node, FlowNode):
        return node
    raise ConfigError("enqueue_flow takes a FlowNode (chain, chord, group or one built by hand)")
