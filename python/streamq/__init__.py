# SPDX-License-Identifier: MIT
"""streamq for Python: enqueue tasks on streamq's queues (Redis Streams) for C++ workers, wait
for their results and read their records. See docs/python.md.

    from streamq import Producer, chord

    p = Producer(url="redis://127.0.0.1:6379", stream="task_queue", max_len=100000)
    p.enqueue("send_email", {"to": "user@example.com"}, task_id="order-12345-confirmation")
"""
from .errors import (BatchClosedError, ConfigError, ConnectionError, DuplicateTaskError, EnqueueRefusedError,
                     Error, PayloadError, QueueFullError, ReplyError, TaskFailedError, TimeoutError,
                     WaitTimeoutError)
from .flows import FlowIds, FlowNode, TaskSpec, chain, chord, group
from .inspector import Entry, Inspector, LevelStats, QueueStats
from .producer import Debounce, Producer, Retention
from .record import ChildResult, TaskRecord, group_results, parse_children

__version__ = "0.2.0"

__all__ = [
    "BatchClosedError", "ChildResult", "ConfigError", "ConnectionError", "Debounce", "DuplicateTaskError",
    "EnqueueRefusedError",
    "Entry", "Error", "FlowIds", "FlowNode", "Inspector", "LevelStats", "PayloadError", "Producer", "QueueFullError",
    "QueueStats", "ReplyError", "Retention", "TaskFailedError", "TaskRecord", "TaskSpec", "TimeoutError",
    "WaitTimeoutError", "chain", "chord", "group", "group_results", "parse_children",
]
