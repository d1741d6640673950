# SPDX-License-Identifier: MIT
"""Producer: enqueues tasks on a streamq queue exactly as the C++ streamq::Producer does (the
same enqueue script of src/lua, the same fields), and waits for tracked tasks."""
from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Iterable, Mapping, NoReturn, Optional, Sequence, Union

import redis.exceptions as rx

from . import _lua, _partitions, _redis, _wire
from ._batch_outcome import failed_batch_message, partial_batch_message
from ._wire import Duration, QueueKeys
from .errors import BatchClosedError, ConfigError, DuplicateTaskError, QueueFullError, ReplyError, TaskFailedError
from .flows import FlowIds, FlowNode, TaskLike, flow_node, task_spec
from ._held import HeldConnection
from ._waiting import Memory, Wait
from .record import TaskRecord

PRIORITIES = {"high": 2, "normal": 1, "low": 3}  # the enqueue script's KEYS index of each level
_FAILURE_TEXT = {"fail_parent": "fail", "ignore": "ignore", "remove": "remove"}
_CHUNK = 64  # tasks per enqueue script call of a batch (as src/producer/batch.cpp)
_MAX_FLOW_TASKS = 10000
_MAX_FLOW_DEPTH = 64


@dataclass(frozen=True)
class Retention:
    """How long a tracked task's record is kept once it finished: ``done`` after it succeeded
    (or was cancelled), ``dead`` after it was dead-lettered (None: as long as its dead letter).
    Durations are seconds or timedeltas. Wherever a Retention is taken, a bare duration means
    ``Retention(done=that)``."""

    done: Duration = 0
    dead: Optional[Duration] = None

    def field(self) -> str:
        """The task's ``retention`` field: ``"<done ms> <dead ms>"`` (dead -1: its dead letter's)."""
        done = _wire.duration_ms(self.done, "retention.done")
        dead = -1 if self.dead is None else _wire.duration_ms(self.dead, "retention.dead")
        return f"{done} {dead}"


RetentionLike = Union[Retention, int, float, timedelta]

DEBOUNCE_MODES = ("keep_first", "replace_latest")


@dataclass(frozen=True)
class Debounce:
    """``enqueue(..., debounce=Debounce(key, window, mode))`` (EnqueueOptions::debounce, see
    docs/producer.md, "Debounced tasks"): a burst of enqueues under ``key`` runs once. The first
    call starts a cycle whose task waits ``window`` (seconds or a timedelta, > 0; plus the call's
    ``delay``); a later call while it waits is dropped (``mode="keep_first"``) or replaces its
    payload and moves its start to a window from that call (``"replace_latest"``), and returns
    the waiting task's id."""

    key: str
    window: Duration
    mode: str = "keep_first"


def _retention(value: Optional[RetentionLike]) -> Optional[Retention]:
    if value is None or isinstance(value, Retention):
        return value
    return Retention(done=value)


class _Prepared:
    """A checked task and how the enqueue script is to write it (src/producer/prepare.hpp)."""

    __slots__ = ("task_id", "fields", "dest", "at_ms", "delay_ms", "nonce", "lock_key", "lock_ms", "tracked",
                 "tenant", "partition", "debounce_key", "debounce_ms", "debounce_mode")

    def __init__(self) -> None:
        self.task_id = ""
        self.fields: list[tuple[str, str]] = []
        self.dest = 1
        self.at_ms = 0
        self.delay_ms = 0
        self.nonce = ""
        self.lock_key = ""
        self.lock_ms = 0
        self.tracked = False
        self.tenant = ""
        self.partition = 0
        self.debounce_key = ""
        self.debounce_ms = 0
        self.debounce_mode = ""

    def strings(self) -> list[str]:
        out: list[str] = []
        for name, value in self.fields:
            out.append(name)
            out.append(value)
        return out

    def needs_script(self) -> bool:
        return (self.dest != 1 or self.at_ms > 0 or self.delay_ms > 0 or bool(self.lock_key) or self.tracked
                or bool(self.tenant) or bool(self.debounce_key))


class Producer:
    """Enqueues tasks on one queue (a Redis stream and the keys derived from its name).

    ``url``: redis://[user:password@]host:port[/db], rediss:// or unix://. ``stream``: the queue.
    ``max_len``: the backlog bound (every priority's stream plus the delayed set); a task that
    would exceed it is refused with QueueFullError (``overflow="reject"``) or the oldest entries
    are trimmed (``overflow="trim_oldest"``, the seed's way). ``retention``: track every task
    (see Retention) unless its enqueue says otherwise. ``partitions``: the queue's partitions
    (ProducerOptions::partitions): more than 1 writes to the streams ``{<stream>:<i>}``, each task
    to the partition the C++ Producer would pick (its tenant's, batch's, partition key's or unique
    key's, else the next in turn); ``max_len`` bounds each partition.

    Issues EVALSHA (the enqueue, watch and batch scripts of src/lua), XADD, XREAD, XREVRANGE.
    A Producer may be shared by threads (redis-py's connection pool)."""

    def __init__(self, url: str = "redis://127.0.0.1:6379", stream: str = "task_queue", max_len: int = 10000,
                 retention: Optional[RetentionLike] = None, overflow: str = "reject",
                 default_max_retries: int = 3, max_payload_bytes: int = 1 << 20, max_payload_depth: int = 64,
                 client_name: Optional[str] = None, socket_timeout: float = 5.0, connect_timeout: float = 2.0,
                 partitions: int = 1) -> None:
        if not stream:
            raise ConfigError("stream must not be empty")
        _partitions.check_partitions(partitions, stream)
        if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len <= 0:
            raise ConfigError("max_len must be > 0")
        if overflow not in ("reject", "trim_oldest"):
            raise ConfigError("overflow must be 'reject' or 'trim_oldest'")
        if default_max_retries < 0:
            raise ConfigError("default_max_retries must be >= 0")
        if max_payload_bytes <= 0:
            raise ConfigError("max_payload_bytes must be > 0")
        if max_payload_depth < 1:
            raise ConfigError("max_payload_depth must be >= 1")
        _redis.check_timeouts(socket_timeout, connect_timeout)
        self.stream = stream
        self.max_len = max_len
        self.overflow = overflow
        self.default_max_retries = default_max_retries
        self.max_payload_bytes = max_payload_bytes
        self.max_payload_depth = max_payload_depth
        self.retention = _retention(retention)
        if self.retention is not None:
            self.retention.field()  # checked now
        self.partitions = partitions
        self._parts = [QueueKeys(_partitions.partition_stream(stream, partitions, i)) for i in range(partitions)]
        self._partitioner = _partitions.Partitioner(partitions)
        self.socket_timeout = socket_timeout
        self.connect_timeout = connect_timeout
        self._client = _redis.connect(url, client_name, socket_timeout, connect_timeout)
        self._waits = Memory()

    def close(self) -> None:
        """Closes the connections."""
        self._client.close()

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------------------------- enqueue

    def enqueue(self, task_type: str, payload: Any = None, *, task_id: Optional[str] = None,
                max_retries: Optional[int] = None, delay: Optional[Duration] = None,
                run_at: Union[datetime, int, float, None] = None, priority: str = "normal",
                unique_for: Optional[Duration] = None, unique_key: Optional[str] = None,
                retention: Optional[RetentionLike] = None, deadline: Union[datetime, int, float, None] = None,
                batch: Optional[str] = None, tenant: Optional[str] = None,
                extra_fields: Optional[Mapping[str, str]] = None, partition_key: Optional[str] = None,
                debounce: Optional[Debounce] = None) -> str:
        """Enqueues one task and returns its task id (with ``debounce``: the id of the task that
        will run, this call's or the waiting one it joined).

        ``payload``: a JSON-serialisable value (dict, list, ...) or JSON text (``str``); None is
        ``{}``. ``task_id``: the caller's id (default a new UUID v4). ``max_retries``: retries
        after the first attempt (default the producer's). ``delay`` (seconds or timedelta) or
        ``run_at`` (datetime, or seconds since the epoch): run no earlier, by the server's clock.
        ``priority``: "high", "normal" or "low". ``unique_for``: refuse with DuplicateTaskError
        while a task of the same ``unique_key`` (default the task id) enqueued within this window
        has not finished. ``retention``: track the task (see Retention; ``wait`` needs it).
        ``deadline``: when it must have finished. ``batch``: an open batch it joins
        (``open_batch``). ``tenant``: the tenant whose backlog it waits in (docs/tenants.md).
        ``extra_fields``: more fields, carried through retries and dead letters. ``partition_key``
        (a partitioned queue): tasks of one key go to one partition (CRC16 of the key); unset, the
        unique key's (with unique_for), else the next partition in turn. ``debounce``: a
        Debounce, collapsing a burst of calls under its key into one run (its key picks the
        partition; not with run_at, unique_for, partition_key, batch, or a tenant in a
        partitioned queue).

        Raises QueueFullError, DuplicateTaskError, BatchClosedError (nothing written),
        ConfigError, PayloadError, ConnectionError, ReplyError."""
        p = self._prepare(task_type, payload, dict(
            task_id=task_id, max_retries=max_retries, delay=delay, run_at=run_at, priority=priority,
            unique_for=unique_for, unique_key=unique_key, retention=retention, deadline=deadline, batch=batch,
            tenant=tenant, extra_fields=extra_fields, partition_key=partition_key, debounce=debounce),
            _wire.format_timestamp(), call="enqueue")
        with _redis.translated():
            if self.overflow == "trim_oldest" and not p.needs_script():
                self._client.xadd(self._parts[p.partition].stream, dict(p.fields), maxlen=self.max_len,
                                  approximate=True)
                return p.task_id
            keys, args = self._enqueue_call([p], "", 0)
            try:
                reply = _redis.run_script(self._client, "enqueue", keys, args)
            except rx.ResponseError as e:
                raise _refusal(_redis.server_message(e), 0, []) from e
        if p.debounce_key:
            return reply.decode("utf-8", "surrogateescape") if isinstance(reply, bytes) else str(reply)
        return p.task_id

    def enqueue_batch(self, tasks: Iterable[TaskLike]) -> list[str]:
        """Enqueues tasks (each a TaskSpec, ``(type, payload)`` or ``(type, payload, {options})``
        with enqueue's keyword options) in chunks of 64 per script call, pipelined, and returns
        their ids in order. What is written is always a prefix of the batch: on a refusal the
        exception's ``batch_ids`` has the written tasks' ids and ``""`` for the others."""
        specs = [task_spec(t) for t in tasks]
        created_at = _wire.format_timestamp()
        prepared = [self._prepare(s.task_type, s.payload, s.options, created_at, call="enqueue_batch") for s in specs]
        if not prepared:
            return []
        ids = [p.task_id for p in prepared]
        with _redis.translated():
            if self.overflow == "trim_oldest" and not any(p.needs_script() for p in prepared):
                return self._write_by_xadd(prepared, ids)
            return self._write_chunks(prepared, ids)

    def _write_by_xadd(self, prepared: list[_Prepared], ids: list[str]) -> list[str]:
        """overflow="trim_oldest" without the script: one XADD MAXLEN ~ each, pipelined; a task
        whose XADD failed is not written (C++ finish_batch, unscripted)."""
        pipe = self._client.pipeline(transaction=False)
        for p in prepared:
            pipe.xadd(self._parts[p.partition].stream, dict(p.fields), maxlen=self.max_len, approximate=True)
        replies = pipe.execute(raise_on_error=False)
        written = ["" if isinstance(reply, Exception) else task_id for reply, task_id in zip(replies, ids)]
        errors = [reply for reply in replies if isinstance(reply, Exception)]
        if not errors:
            return ids
        if not isinstance(errors[0], rx.ResponseError):
            raise errors[0]
        raise ReplyError(failed_batch_message(_redis.server_message(errors[0]), written))

    def _write_chunks(self, given: list[_Prepared], given_ids: list[str]) -> list[str]:
        """The enqueue script in chunks (C++ build_batch and finish_batch): the tasks of each
        partition together, in batch order, in chunks of at most 64 of one partition; what is
        written of each partition's tasks is a prefix of them."""
        order = sorted(range(len(given)), key=lambda i: given[i].partition)
        prepared = [given[i] for i in order]
        chunks = self._chunks(prepared)
        calls = self._chunk_calls(prepared, chunks)
        replies = self._run_chunks(calls)
        # A chunk not run (NOSCRIPT, or -1: behind one not run) goes again on its own, in order,
        # unless an earlier chunk of its partition stays unwritten: then it is left.
        stuck_in: set[int] = set()  # partitions with a chunk left unwritten
        left = [False] * len(chunks)
        for k, reply in enumerate(replies):
            part = prepared[chunks[k][0]].partition
            not_run = isinstance(reply, rx.NoScriptError) or reply == -1
            if not_run and part in stuck_in:
                left[k] = True
                continue
            if not_run:
                replies[k] = reply = self._run_alone(calls[k])
            if isinstance(reply, Exception) or not isinstance(reply, int) or reply <= 0:
                stuck_in.add(part)
        if not stuck_in:
            return given_ids
        return self._refuse_batch(prepared, order, chunks, replies, left, given_ids)

    @staticmethod
    def _chunks(prepared: list[_Prepared]) -> list[tuple[int, int]]:
        """[first, last) of each chunk: at most 64 tasks, all of one partition."""
        chunks: list[tuple[int, int]] = []
        for a in range(len(prepared)):
            if a == 0 or prepared[a].partition != prepared[a - 1].partition or a - chunks[-1][0] == _CHUNK:
                chunks.append((a, a + 1))
            else:
                chunks[-1] = (chunks[-1][0], a + 1)
        return chunks

    def _chunk_calls(self, prepared: list[_Prepared],
                     chunks: list[tuple[int, int]]) -> list[tuple[list[str], list[Any]]]:
        """Each chunk's script call. A partition with more than one chunk has a refusal mark of the
        batch's own there, so that its chunks behind a refused one write nothing even if room
        appears (enqueue.lua); each chunk says its place among its partition's chunks."""
        token = _wire.new_task_id()
        per_partition: dict[int, int] = {}
        for a, b in chunks:
            per_partition[prepared[a].partition] = per_partition.get(prepared[a].partition, 0) + b - a
        marks = {part: self._parts[part].batch_refused(token) for part, n in per_partition.items() if n > _CHUNK}
        places: dict[int, int] = {}
        calls = []
        for a, b in chunks:
            part = prepared[a].partition
            places[part] = places.get(part, 0) + 1
            calls.append(self._enqueue_call(prepared[a:b], marks.get(part, ""), places[part]))
        return calls

    def _run_chunks(self, calls: list[tuple[list[str], list[Any]]]) -> list[Any]:
        """EVALSHA of every chunk, pipelined; each reply, or the error it answered."""
        script = _lua.script("enqueue")
        pipe = self._client.pipeline(transaction=False)
        for keys, args in calls:
            pipe.evalsha(script.sha1, len(keys), *keys, *args)
        replies: list[Any] = pipe.execute(raise_on_error=False)
        return replies

    def _run_alone(self, call: tuple[list[str], list[Any]]) -> Any:
        try:
            return _redis.run_script(self._client, "enqueue", *call)
        except rx.ResponseError as e:
            return e

    def _refuse_batch(self, prepared: list[_Prepared], order: list[int], chunks: list[tuple[int, int]],
                      replies: list[Any], left: list[bool], given_ids: list[str]) -> NoReturn:
        """Raises what a batch with unwritten chunks raises (C++ finish_batch): the first refusal
        (QUEUEFULL, DUPLICATE), else the first other error, with what was written."""
        ids = list(given_ids)
        server_message = ""
        refusal: Optional[Exception] = None
        failure = ""
        for k, (a, b) in enumerate(chunks):
            reply = replies[k]
            message = _redis.server_message(reply) if isinstance(reply, rx.ResponseError) else ""
            refused = not left[k] and (message.startswith("QUEUEFULL") or message.startswith("DUPLICATE "))
            if refused and refusal is None:
                refusal = _refusal(message, a, [], order=order)
                server_message = str(refusal) if isinstance(refusal, DuplicateTaskError) else message
            elif not left[k] and message and not refused and not failure:
                failure = message
            elif not left[k] and isinstance(reply, Exception) and not isinstance(reply, rx.ResponseError):
                raise reply
            if left[k] or refused or message or not isinstance(reply, int) or reply <= 0:
                for place in range(a, b):
                    ids[order[place]] = ""
        if isinstance(refusal, DuplicateTaskError):
            raise DuplicateTaskError(partial_batch_message("duplicate task", ids, server_message),
                                     refusal.existing_task_id, refusal.index, ids)
        if refusal is not None:
            raise QueueFullError(partial_batch_message("queue full", ids, server_message), ids)
        if not failure:
            failure = ("ERR a chunk of the batch was not run and the ones behind it were not written (the batch's "
                       "mark expired or was evicted)")
        if failure.startswith("BATCHCLOSED"):
            raise BatchClosedError(partial_batch_message("batch closed", ids, failure), ids)
        raise ReplyError(failed_batch_message(failure, ids))

    # -------------------------------------------------------------------------------------- flows

    def enqueue_flow(self, root: FlowNode) -> FlowIds:
        """Enqueues a flow (``chain``, ``chord``, ``group``, or a FlowNode tree) in one script
        call: every parent waits until its children finished, then runs reading their results.
        Returns the ids in the flow's shape. Every task of a flow is tracked (the producer's
        retention, else an hour once done). Raises as enqueue; nothing is written on a refusal."""
        root = flow_node(root)
        if self.partitions > 1:
            raise ConfigError("enqueue_flow on a partitioned queue is not offered by this client (the C++ Producer "
                              "places a flow's children across partitions): enqueue the flow from C++")
        if self.overflow == "trim_oldest":
            raise ConfigError("enqueue_flow needs overflow='reject': trim_oldest may drop a child unfinished, "
                              "and its parent would wait forever")
        flat: list[tuple[FlowNode, int]] = []  # pre-order, each with its parent's place (-1: root)
        children: list[list[int]] = []
        root_id = root.options.get("task_id") or _wire.new_task_id()

        def flatten(node: FlowNode, parent: int, depth: int) -> None:
            if depth >= _MAX_FLOW_DEPTH:
                raise ConfigError(f"flow deeper than {_MAX_FLOW_DEPTH} levels")
            if len(flat) >= _MAX_FLOW_TASKS:
                raise ConfigError(f"flow of more than {_MAX_FLOW_TASKS} tasks")
            if node.children and (node.options.get("delay") or node.options.get("run_at") is not None):
                raise ConfigError(f'a flow\'s parent (task type "{node.task_type}") runs when its children '
                                  "finished: it cannot have a delay or run_at")
            if node.on_failure not in _FAILURE_TEXT:
                raise ConfigError("on_failure must be 'fail_parent', 'ignore' or 'remove'")
            place = len(flat)
            flat.append((node, parent))
            children.append([])
            if parent >= 0:
                children[parent].append(place)
            for child in node.children:
                flatten(child, place, depth + 1)

        flatten(root, -1, 0)
        created_at = _wire.format_timestamp()
        prepared: list[_Prepared] = []
        seen: set[str] = set()
        for i, (node, parent) in enumerate(flat):
            options = dict(node.options)
            if not options.get("task_id"):
                options["task_id"] = root_id if parent < 0 else _wire.new_task_id()
            if options.get("retention") is None and self.retention is None:
                options["retention"] = Retention(done=timedelta(hours=1))
            flow = None
            if parent >= 0:
                flow = (prepared[parent].task_id, _FAILURE_TEXT[node.on_failure])
            p = self._prepare(node.task_type, node.payload, options, created_at, flow, call="enqueue_flow")
            if p.task_id in seen:
                raise ConfigError(f'flow: task id "{p.task_id}" is given twice')
            seen.add(p.task_id)
            if children[i]:
                p.dest = -p.dest  # waits for its children (enqueue.lua)
            prepared.append(p)
        with _redis.translated():
            keys, args = self._enqueue_call(prepared, "", 0)
            try:
                _redis.run_script(self._client, "enqueue", keys, args)
            except rx.ResponseError as e:
                raise _refusal(_redis.server_message(e), 0, []) from e

        def ids_of(place: int) -> FlowIds:
            return FlowIds(prepared[place].task_id, [ids_of(c) for c in children[place]])

        return ids_of(0)

    # ------------------------------------------------------------------------------------ batches

    def open_batch(self, batch_id: Optional[str] = None, parent: Optional[str] = None) -> str:
        """Opens a batch (docs/workflows.md#batches) that tasks join with ``enqueue(..., batch=id)``
        until ``close_batch``; returns its id (default a new UUID v4). ``parent``: an open batch it
        is nested in. (Callbacks on_complete/on_success are not offered by this client yet: open
        such a batch from C++.) Raises ConfigError for an id in use, BatchClosedError for a parent
        that is not open."""
        if parent and self.partitions > 1:
            raise ConfigError("nested batches (parent) need a queue of one partition")
        batch_id = batch_id or _wire.new_task_id()
        home = self._parts[self._partitioner.of(batch=batch_id)].stream
        with _redis.translated():
            try:
                _redis.run_script(self._client, "batch", [home], ["open", batch_id, parent or "", 0, 0])
            except rx.ResponseError as e:
                message = _redis.server_message(e)
                if message.startswith("BATCHEXISTS"):
                    raise ConfigError(message) from e
                raise _refusal(message, 0, []) from e
        return batch_id

    def close_batch(self, batch_id: str) -> bool:
        """Closes a batch: no task joins it any more. True when this call closed it, False when it
        was closed already. BatchClosedError when there is no such batch; ConfigError for an
        empty id."""
        if not batch_id:
            raise ConfigError("batch_id must not be empty")
        home = self._parts[self._partitioner.of(batch=batch_id)].stream
        with _redis.translated():
            try:
                return bool(_redis.run_script(self._client, "batch", [home], ["close", batch_id]) == 1)
            except rx.ResponseError as e:
                raise _refusal(_redis.server_message(e), 0, []) from e

    # -------------------------------------------------------------------------------------- waits

    def wait(self, task_id: str, timeout: Duration, wait_for_enqueue: bool = False) -> TaskRecord:
        """Waits until tracked task ``task_id`` finished and returns its record (``.result`` is
        what its handler returned). Raises TaskFailedError when it ended dead or cancelled, and
        WaitTimeoutError when it did not finish within ``timeout`` (seconds or timedelta) or has
        no record (not tracked, expired, another queue's) within about a second, unless
        ``wait_for_enqueue``. Follows ``<stream>:events`` (XREAD BLOCK) and reads the record
        with the watch script, which keeps a finished record a minute for a waiter.

        Ends by ``timeout`` whatever Redis does: it holds a pooled connection of its own for the
        wait, bounds every command by what is left of the timeout, and tries a connection that
        failed again until then (the WaitTimeoutError then says why)."""
        deadline = time.monotonic() + _wire.duration_ms(timeout, "timeout") / 1000.0
        with _redis.translated():
            with HeldConnection(self._client, self.socket_timeout, self.connect_timeout) as held:
                record = Wait(held, self._parts, self._waits, task_id, deadline, self.socket_timeout,
                              wait_for_enqueue).run()
        return _outcome(record)

    # ---------------------------------------------------------------------------------- internals

    def _prepare(self, task_type: str, payload: Any, o: Mapping[str, Any], created_at: str,
                 flow: Optional[tuple[str, str]] = None, call: str = "enqueue") -> _Prepared:
        """``call``: the public call preparing it ("enqueue", "enqueue_batch", "enqueue_flow"): only
        enqueue takes a debounced task."""
        known = {"task_id", "max_retries", "delay", "run_at", "priority", "unique_for", "unique_key", "retention",
                 "deadline", "batch", "tenant", "extra_fields", "partition_key", "debounce"}
        unknown = set(o) - known
        if unknown:
            raise ConfigError("unknown enqueue option(s): " + ", ".join(sorted(unknown)))
        if not isinstance(task_type, str) or not task_type:
            raise ConfigError("task_type must not be empty")
        max_retries = o.get("max_retries")
        if max_retries is None:
            max_retries = self.default_max_retries
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ConfigError("max_retries must be >= 0")
        extra = dict(o.get("extra_fields") or {})
        for name, value in extra.items():
            if not isinstance(name, str) or not name or name in _wire.RESERVED_FIELDS:
                raise ConfigError(f'extra field name "{name}" is empty or reserved')
            if not isinstance(value, str):
                raise ConfigError(f'extra field "{name}" must be a string')
        delay_ms = _wire.duration_ms(o["delay"], "delay") if o.get("delay") is not None else 0
        run_at = o.get("run_at")
        if delay_ms > 0 and run_at is not None:
            raise ConfigError("delay and run_at: set one of them, not both")
        unique_for_ms = _wire.duration_ms(o["unique_for"], "unique_for") if o.get("unique_for") is not None else 0
        unique_key = o.get("unique_key") or ""
        if unique_key and unique_for_ms == 0:
            raise ConfigError("unique_key needs unique_for > 0")
        batch = o.get("batch") or ""
        if batch and self.overflow == "trim_oldest":
            raise ConfigError("a batch's task needs overflow='reject': trim_oldest may drop it unfinished")
        if batch and unique_for_ms > 0 and self.partitions > 1:
            raise ConfigError("a batch's task cannot be unique in a partitioned queue (its lock would be in the "
                              "batch's partition, not the unique key's)")
        tenant = o.get("tenant") or ""
        if tenant:
            _wire.check_tenant(tenant)
            if self.partitions > 1 and (unique_for_ms > 0 or batch):
                raise ConfigError("a tenant's task in a partitioned queue cannot be unique or join a batch (it goes "
                                  "to its tenant's partition, where the lock or the batch may not be)")
        partition_key = o.get("partition_key") or ""
        if not isinstance(partition_key, str):
            raise ConfigError("partition_key must be a string")
        debounce = o.get("debounce")
        debounce_ms = 0
        if debounce is not None:
            if call != "enqueue":
                raise ConfigError(f"{call}: a task cannot have debounce here (a dropped or replaced "
                                  "call has no task of its own to return; enqueue it with enqueue)")
            debounce_ms = self._check_debounce(debounce, o, unique_for_ms, partition_key, batch, tenant)
        priority = o.get("priority") or "normal"
        if priority not in PRIORITIES:
            raise ConfigError("priority must be 'high', 'normal' or 'low'")
        text = _wire.payload_text({} if payload is None else payload, self.max_payload_bytes,
                                  self.max_payload_depth)
        if len(extra) + 15 > _wire.MAX_FIELDS:
            raise ConfigError(f"too many extra fields: {len(extra)} (at most {_wire.MAX_FIELDS - 15})")
        p = _Prepared()
        p.task_id = o.get("task_id") or _wire.new_task_id()
        p.dest = PRIORITIES[priority]
        if run_at is not None:
            p.at_ms = _wire.epoch_ms(run_at, "run_at")
        p.delay_ms = delay_ms
        if p.at_ms > 0 or p.delay_ms > 0:
            p.nonce = _wire.new_task_id()
        fields = [("task_id", p.task_id), ("task_type", task_type), ("payload", text), ("created_at", created_at),
                  ("max_retries", str(max_retries)), ("retry_count", "0")]
        key = (unique_key or p.task_id) if unique_for_ms > 0 else ""
        # (A debounced task goes by its key: partition_key, batch and a partitioned tenant are refused with it.)
        p.partition = self._partitioner.of(tenant, batch, debounce.key if debounce is not None else partition_key,
                                           key)
        if debounce is not None:
            p.debounce_key = self._parts[p.partition].debounce(debounce.key)
            p.debounce_ms = debounce_ms
            p.debounce_mode = debounce.mode
            if not p.nonce:
                p.nonce = _wire.new_task_id()  # it waits in the delayed set
        if unique_for_ms > 0:
            fields.append(("unique_key", key))
            p.lock_key = self._parts[p.partition].unique_lock(key)
            p.lock_ms = unique_for_ms
        retention = _retention(o.get("retention")) or self.retention
        if retention is not None:
            fields.append(("retention", retention.field()))
        elif batch:
            fields.append(("retention", Retention(done=timedelta(hours=1)).field()))  # a batch counts ends
        p.tracked = retention is not None or bool(batch)
        if o.get("deadline") is not None:
            deadline_ms = _wire.epoch_ms(o["deadline"], "deadline")
            if deadline_ms > time.time() * 1000 + _wire.MAX_DURATION_MS:
                raise ConfigError("deadline must be at most ten years from now")
            fields.append(("deadline", str(deadline_ms)))
        if flow is not None:
            fields.append(("flow_parent", flow[0]))
            fields.append(("flow_on_failure", flow[1]))
        if batch:
            fields.append(("batch_id", batch))
        if tenant:
            fields.append((_wire.TENANT_FIELD, tenant))
            p.tenant = tenant
        fields.extend(extra.items())
        p.fields = fields
        return p

    def _check_debounce(self, debounce: Any, o: Mapping[str, Any], unique_for_ms: int, partition_key: str,
                        batch: str, tenant: str) -> int:
        """The window in ms of a Debounce, checked with the task's other options (as the C++
        Producer::Impl::check_debounce)."""
        if not isinstance(debounce, Debounce):
            raise ConfigError("debounce must be a streamq.Debounce")
        if not isinstance(debounce.key, str) or not debounce.key:
            raise ConfigError("debounce.key must not be empty")
        window_ms = _wire.duration_ms(debounce.window, "debounce.window")
        if window_ms <= 0:
            raise ConfigError("debounce.window must be > 0")
        if debounce.mode not in DEBOUNCE_MODES:
            raise ConfigError("debounce.mode must be 'keep_first' or 'replace_latest'")
        if o.get("run_at") is not None:
            raise ConfigError("debounce and run_at: a debounced task runs a window after its call (use delay)")
        if unique_for_ms > 0:
            raise ConfigError("debounce and unique_for: set one of them, not both")
        if partition_key:
            raise ConfigError("debounce and partition_key: a debounced task goes to its debounce key's partition")
        if batch:
            raise ConfigError("debounce and batch: a debounced task cannot join a batch")
        if tenant and self.partitions > 1:
            raise ConfigError("a tenant's task in a partitioned queue cannot be debounced (it goes to its tenant's "
                              "partition, not its debounce key's, where the key's waiting task may be)")
        return window_ms

    def _enqueue_call(self, tasks: Sequence[_Prepared], mark: str, position: int) -> tuple[list[str], list[Any]]:
        """The keys and arguments of one enqueue script call (its header in src/lua/enqueue.lua;
        built as enqueue_call in src/producer/prepare.cpp); the tasks are of one partition."""
        k = self._parts[tasks[0].partition]
        keys = [k.stream, k.high, k.low, k.delayed]
        keys.extend(t.lock_key for t in tasks if t.lock_key)
        if len(tasks) == 1 and tasks[0].debounce_key:
            # The 'debounce' layout: one task, its state's key KEYS[5].
            t = tasks[0]
            strings = t.strings()
            keys.append(t.debounce_key)
            return keys, ["reject" if self.overflow == "reject" else "trim", self.max_len, 0, 1, "debounce",
                          t.dest, t.delay_ms, t.debounce_ms, t.debounce_mode, t.nonce, len(strings), *strings]
        if mark:
            keys.append(mark)
        plain = not any(t.needs_script() or t.dest < 0 for t in tasks)
        args: list[Any] = ["reject" if self.overflow == "reject" else "trim", self.max_len,
                           position if mark else 0, len(tasks), "plain" if plain else "full"]
        lock_index = 4
        for t in tasks:
            strings = t.strings()
            if not plain:
                lock = 0
                if t.lock_key:
                    lock_index += 1
                    lock = lock_index
                args.extend((t.dest, t.at_ms, t.delay_ms, lock, t.lock_ms, t.nonce))
            args.append(len(strings))
            args.extend(strings)
        return keys, args


def _refusal(message: str, first: int, batch_ids: list[str], order: Optional[Sequence[int]] = None) -> Exception:
    """The exception for the enqueue script's refusal ``message`` (index ``first``: where its
    chunk starts in a batch, or in ``order``, the batch's tasks grouped by partition, when
    given)."""
    if message.startswith("QUEUEFULL"):
        return QueueFullError(message, batch_ids)
    if message.startswith("BATCHCLOSED"):
        return BatchClosedError(message, batch_ids)
    if message.startswith("DEBOUNCETYPE"):
        return ConfigError(message)
    if message.startswith("DUPLICATE "):
        # DUPLICATE <index in the call> <length of the holder> <holder> holds <key>
        try:
            _, index, length, rest = message.split(" ", 3)
            raw = rest.encode("utf-8", "surrogateescape")
            holder = raw[:int(length)].decode("utf-8", "surrogateescape")
            key = raw[int(length):].decode("utf-8", "surrogateescape")
            key = key[len(" holds "):] if key.startswith(" holds ") else key
            return DuplicateTaskError(
                f"duplicate task: unique lock {key} is held by task {holder} (enqueued within its unique_for "
                "window and not finished)", holder, _place(first + int(index), order), batch_ids)
        except ValueError:
            pass
    return ReplyError(message)


def _place(index: int, order: Optional[Sequence[int]]) -> int:
    return order[index] if order is not None else index


def _outcome(record: TaskRecord) -> TaskRecord:
    if record.state == "done":
        return record
    if record.state == "cancelled":
        raise TaskFailedError(f"task {record.task_id} ended cancelled: an operator cancelled it", record)
    message = f"task {record.task_id} ended {record.state}"
    if record.reason:
        message += f" ({record.reason})"
    if record.error:
        message += f": {record.error}"
    raise TaskFailedError(message, record)
