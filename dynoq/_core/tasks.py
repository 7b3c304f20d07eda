"""Tasks: functions as messages (pure: no I/O), shared by dynoq.Tasks and its asyncio twin.

A task is a message ``{"task": name, "args": [...], "kwargs": {...}}`` (msgpack, never
pickle) on an ordinary queue, so delays, ordered queues and keys, retries, dead letters
with their reasons, rate limits and schedules are the queue's and the consumer's own. What
is decided here: how a call becomes a payload (and which argument cannot be sent), how a
worker finds the task of a message, what is kept of an ended task, and what state a task
is in, read from its queue's own sets. A task's name and options, and which options its
queue's consumer takes, are decided in :mod:`dynoq._core.taskapp`.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgpack

from ..errors import (
    InvalidArgument,
    InvalidType,
    OrderedQueueError,
    PayloadTypeError,
    RecordError,
    ResultNotKept,
    TaskArgumentError,
    TaskCancelled,
    TaskFailed,
)
from ..message import Failure, Message
from . import codec, reasons, validate
from .calls import Batch, Call, text
from .codec import Outgoing
from .keys import result_key
from .lua import script
from .queue import QueueOps
from .retry import DeadLetter
from .taskapp import Arguments

_STATE, _PUSH, _CANCEL = script("task-state"), script("task-push"), script("task-cancel")
_KEEP = script("task-keep")


class TaskState(str, enum.Enum):
    """What became of a task. Read from its queue's own sets (nothing extra is stored for
    the live states), and from its kept record once it ended (``keep_result`` > 0)."""

    WAITING = "waiting"  # due, waiting for a worker
    DELAYED = "delayed"  # not due yet (apply(delay=...), or rescheduled)
    RUNNING = "running"  # a worker has it
    RETRYING = "retrying"  # it failed (or its worker died) and waits for another run
    SUCCEEDED = "succeeded"  # ended: it returned (kept only with keep_result > 0)
    DEAD = "dead"  # ended: its retries were spent (or unknown to the worker): a dead letter
    CANCELLED = "cancelled"  # ended: cancelled before it ran (kept with keep_result > 0)
    UNKNOWN = "unknown"  # nothing is known: ended with nothing kept, expired, or never was

    @property
    def ended(self) -> bool:
        return self in (TaskState.SUCCEEDED, TaskState.DEAD, TaskState.CANCELLED)

    def __str__(self) -> str:  # "waiting", as it compares (h.status() == "waiting")
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


@dataclass(frozen=True)
class TaskInfo:
    """A task's state and what goes with it. ``attempts``: runs started so far (as a
    message's attempts); ``failure``: its last failure (type, message, traceback), while
    it is retrying or dead; ``due_at``: when a waiting, delayed or retrying task is due
    (seconds, server clock); ``result``: a succeeded task's kept return value; ``note``:
    why a succeeded task's return value could not be kept; ``task``: its name (from its
    kept record)."""

    id: str
    state: TaskState
    attempts: int = 0
    failure: Failure | None = None
    due_at: float | None = None
    result: Any = None
    note: str | None = None
    task: str | None = None


# -- a call as a message -------------------------------------------------------------------


def call_payload(name: str, args: Any, kwargs: Any) -> dict[str, Any]:
    """The payload of a call (the hot path of ``delay``: no copy of the arguments)."""
    if type(args) is not tuple and type(args) is not list:
        raise InvalidType(f"args must be a tuple or list, got {type(args).__name__}")
    if kwargs is None:
        kwargs = {}
    elif type(kwargs) is not dict:
        raise InvalidType(f"kwargs must be a dict, got {type(kwargs).__name__}")
    return {"task": name, "args": args, "kwargs": kwargs}


def refusal(
    name: str,
    arguments: Arguments,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    limit: int,
    error: PayloadTypeError,
) -> PayloadTypeError:
    """The error for a call msgpack cannot carry: it names the first argument that is the
    reason (by parameter name when the signature says it)."""
    positional = arguments.positional if arguments.signature is not None else []
    labelled = [
        *((positional[i] if i < len(positional) else f"#{i + 1}", v) for i, v in enumerate(args)),
        *kwargs.items(),
    ]
    for label, value in labelled:
        try:
            codec.encode_body(value, None, None, limit)
        except PayloadTypeError as exc:
            return TaskArgumentError(
                f"{name}(): argument {label!r} ({type(value).__name__}) cannot be sent: "
                f"{exc}; never a pickle: send what rebuilds it (an id, a string, a number)",
                label,
            )
    return error


def delay_until(at: object, delay: float, now: float | None = None) -> float:
    """The delay of a call sent for ``at`` (an aware datetime, counted by this machine's
    clock ``now``, default the wall clock; past: 0), or ``delay`` when ``at`` is None."""
    if at is None:
        return delay
    if not isinstance(at, datetime):
        raise InvalidType(f"at must be a datetime, got {type(at).__name__}")
    if at.tzinfo is None or at.utcoffset() is None:
        raise InvalidArgument(
            "at must be an aware datetime (with its tzinfo, e.g. datetime.now(timezone.utc)"
            " + timedelta(...)): a naive one could mean any time zone"
        )
    if delay:
        raise InvalidArgument("give delay= or at=, not both")
    left = at.timestamp() - (time.time() if now is None else now)
    return validate.check_seconds(max(left, 0.0), "at's distance from now")


def routing(ops: QueueOps, task_id: str, key: str | None) -> int:
    """The shard a task of this id and key lives in (as a push routes it)."""
    return ops.shard_for(key if ops.settings.ordered and key is not None else task_id)


def call_of(msg: Message) -> tuple[str, Sequence[Any], dict[str, Any]]:
    """(task name, args, kwargs) of a task message; a message that is no task is
    dead-lettered, with the reason, at once."""
    payload = msg.payload
    if type(payload) is dict:
        name, args, kwargs = payload.get("task"), payload.get("args", ()), payload.get("kwargs", {})
        if type(name) is str and type(args) is list and type(kwargs) is dict:
            return name, args, kwargs
    raise DeadLetter(
        f"message {msg.id!r} is not a task: a task's payload is a dict of "
        "'task' (its name), 'args' (a list) and 'kwargs' (a dict)"
    )


# -- what is kept of an ended task ----------------------------------------------------------

_SUCCEEDED, _CANCELLED = "s", "c"


def kept_record(state: str, task: str, value: Any, limit: int, attempts: int = 0) -> bytes:
    """A kept record: msgpack [state, task, value, None, attempts], or [state, task, None,
    why the value is not kept, attempts] when msgpack cannot carry it or it is over the
    size limit. ``attempts``: runs started (a record of an earlier version has 3 or 4
    fields: read as 0)."""
    try:
        record: bytes = msgpack.packb([state, task, value, None, attempts], use_bin_type=True)
        if len(record) > limit:
            why = f"the return value is {len(record)} bytes, over the limit of {limit}"
        else:
            codec.unpack(record, limit)  # what cannot be read back is not kept
            return record
    except (TypeError, ValueError, OverflowError, RecordError) as exc:
        why = (
            f"the return value ({type(value).__name__}) cannot be kept: msgpack carries "
            f"bytes, str, numbers, bools, None, lists and dicts ({exc})"
        )
    packed: bytes = msgpack.packb([state, task, None, why, attempts], use_bin_type=True)
    return packed


def keep_success(
    ops: QueueOps, msg: Message, task: str, value: Any, keep_ms: int
) -> tuple[str, bytes, int]:
    """What a worker writes with the ack of a task that returned (``Message.keep``)."""
    assert msg.shard is not None and msg.id is not None
    return (
        result_key(ops.keys.prefix, ops.keys.tag or ops.name, msg.shard, msg.id),
        kept_record(_SUCCEEDED, task, value, ops.limit, msg.attempts),
        keep_ms,
    )


# -- requests ------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskKeys:
    """The KEYS of the task scripts: a shard's, and one task's kept record."""

    delayed: str
    ready: str
    unack: str
    msgs: str
    dlv: str
    dead: str
    seq: str
    done: str
    counts: str
    why: str
    result: str
    epoch: str
    control: str
    expiry: str

    @classmethod
    def of(cls, ops: QueueOps, shard: int, task_id: str) -> TaskKeys:
        k = ops.shard_keys[shard]
        return cls(
            k.delayed,
            k.ready,
            k.unack,
            k.msgs,
            k.dlv,
            k.dead,
            k.seq,
            k.done,
            k.counts,
            k.why,
            result_key(ops.keys.prefix, ops.keys.tag or ops.name, shard, task_id),
            k.epoch,
            k.control,
            k.expiry,
        )


def push_if_absent(ops: QueueOps, out: Outgoing) -> Call | Batch:
    """Push a task by id unless its id waits, runs, is dead-lettered or has a kept record
    (task-push-12.lua); the reply is True when it was pushed (QueueGone when the queue
    is gone)."""
    if ops.keyed:  # task-push places as a plain push does, where keyed pops never look
        raise OrderedQueueError(
            f"a task with an id cannot go to {ops.name!r}, a "
            "message-group queue (ordered='key'), yet: leave the id "
            "out, or use ordered=True"
        )
    check = ops.checked(f"a task's push to {ops.name!r}")
    call = _PUSH.call(TaskKeys.of(ops, ops.shard_for(out.routing), out.id), by_id(ops, out), check)
    if ops.settings.min_replicas:
        return ops.replicated([call], lambda replies: int(replies[0]) == 1)
    call.parse = ops.checked(f"a task's push to {ops.name!r}", lambda r: int(r) == 1)
    return call


def by_id(ops: QueueOps, out: Outgoing) -> list[Any]:
    """The ARGV of a push by id that checks a key of its own first (task-push-12.lua,
    flow-push-11.lua): the queue's epoch, dedupe window and wake channel, then the
    message."""
    return [
        ops.epoch,
        validate.to_ms(ops.settings.dedupe_window),
        ops.wake,
        out.id,
        out.delay_ms,
        out.priority,
        out.body,
    ]


def load_keep(ops: QueueOps) -> Batch:
    """A call of task-keep on every shard that writes nothing, so that the server (every
    node of a cluster) has the script before a worker's first ack needs it: a batch whose
    script is not loaded sends it again once loaded, after the rest of the batch, and the
    first records would be written after their acks, not before."""
    return Batch(
        [
            Call(
                _KEEP, [result_key(ops.keys.prefix, ops.keys.tag or ops.name, shard, "-")], [0, b""]
            )
            for shard in range(ops.settings.shards)
        ]
    )


def cancel(ops: QueueOps, shard: int, task_id: str, task: str | None, keep_ms: int) -> Call:
    """Take a waiting task off its queue, or ask a running one to stop (task-cancel-10.lua);
    the reply is True when it was waiting (now cancelled) or runs (now asked to stop: it
    ends cancelled), False otherwise (QueueGone when the queue is gone)."""
    record = kept_record(_CANCELLED, task or "", None, ops.limit) if keep_ms else b""
    return _CANCEL.call(
        TaskKeys.of(ops, shard, task_id),
        [ops.epoch, task_id, keep_ms, record, ops.wake],
        ops.checked(f"a task's cancel on {ops.name!r}", lambda r: int(r) > 0),
    )


def state(ops: QueueOps, shard: int, task_id: str) -> Call:
    """A task's state, read in one script (task-state-8.lua); the reply is a TaskInfo."""
    return _STATE.call(
        TaskKeys.of(ops, shard, task_id), [task_id], lambda reply: derive(task_id, reply, ops.limit)
    )


def locate(candidates: Sequence[tuple[QueueOps, int]], task_id: str) -> Batch:
    """The state of a task that may be in any of these (queue, shard) places, in one round
    trip; the reply is (the index of the place that knows it, its TaskInfo), or (-1, an
    unknown TaskInfo)."""

    def parse(infos: list[TaskInfo]) -> tuple[int, TaskInfo]:
        for i, info in enumerate(infos):
            if info.state is not TaskState.UNKNOWN:
                return i, info
        return -1, TaskInfo(task_id, TaskState.UNKNOWN)

    return Batch([state(ops, shard, task_id) for ops, shard in candidates], parse=parse)


def derive(task_id: str, reply: Sequence[Any], limit: int) -> TaskInfo:
    """A TaskInfo from what task-state-8.lua read: the queue's sets first (a task that
    runs again after a kept end shows how it runs now), then the kept record."""
    where, score, attempts, why, kept, now = reply
    where, attempts = text(where), int(attempts)
    failure = reasons.failure(why)
    if where == "unack":
        return TaskInfo(task_id, TaskState.RUNNING, attempts, failure)
    if where == "dead":
        return TaskInfo(task_id, TaskState.DEAD, attempts, failure)
    if where in ("delayed", "ready", "msgs"):
        due = float(score) / 1000 if where == "delayed" else None
        if attempts > 0:
            return TaskInfo(task_id, TaskState.RETRYING, attempts, failure, due)
        later = due is not None and float(score) > int(now)
        return TaskInfo(
            task_id, TaskState.DELAYED if later else TaskState.WAITING, attempts, failure, due
        )
    if kept:
        try:
            fields = codec.unpack(kept, limit)
            code, task = fields[0], fields[1]
        except (RecordError, TypeError, IndexError, KeyError):
            return TaskInfo(task_id, TaskState.UNKNOWN, note="its kept record is unreadable")
        if code == _CANCELLED:
            return TaskInfo(task_id, TaskState.CANCELLED, task=task or None)
        value = fields[2] if len(fields) > 2 else None
        note = fields[3] if len(fields) > 3 else None
        runs = fields[4] if len(fields) > 4 and type(fields[4]) is int else 0
        return TaskInfo(
            task_id, TaskState.SUCCEEDED, max(runs, 0), result=value, note=note, task=task or None
        )
    return TaskInfo(task_id, TaskState.UNKNOWN)


def outcome(info: TaskInfo, label: str) -> Any:
    """``result()`` of an ended (or unknown) task: its kept return value, or the error
    that says why there is none."""
    if info.state is TaskState.SUCCEEDED:
        if info.note:
            raise ResultNotKept(f"{label} succeeded, but {info.note}")
        return info.result
    if info.state is TaskState.DEAD:
        f = info.failure
        if f is None:
            raise TaskFailed(f"{label} failed (its retries are spent: it is a dead letter)")
        raise TaskFailed(
            f"{label} failed: {f.error_type}: {f.error}", f.error_type, f.error, f.traceback
        )
    if info.state is TaskState.CANCELLED:
        raise TaskCancelled(f"{label} was cancelled before it ran", "TaskCancelled")
    raise ResultNotKept(
        f"nothing is known of {label}: it ended and its task keeps no "
        "result (keep_result=0), or its kept result expired, or no task "
        "of that id was pushed"
    )
