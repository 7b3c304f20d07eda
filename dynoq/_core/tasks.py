"""Tasks: functions as messages (pure: no I/O), shared by dynoq.Tasks and its asyncio twin.

A task is a message ``{"task": name, "args": [...], "kwargs": {...}}`` (msgpack, never
pickle) on an ordinary queue, so delays, ordered queues and keys, retries, dead letters
with their reasons, rate limits and schedules are the queue's and the consumer's own. What
is decided here: a task's name and options, which options its queue's consumer takes, how
a call becomes a payload (and which argument cannot be sent), how a worker finds the task
of a message, each task's retry policy, what is kept of an ended task, and what state a
task is in, read from its queue's own sets.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

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
from . import codec, validate
from .callables import is_coroutine_function
from .calls import Batch, Call
from .codec import Outgoing
from .keys import result_key
from .lua import script
from .ops import QueueOps
from .retry import DeadLetter, RetryPolicy, check_delays
from .settings import ConsumerSettings

T = TypeVar("T")

_STATE, _PUSH, _CANCEL = script("task-state"), script("task-push"), script("task-cancel")
_KEEP = script("task-keep")
MAX_TASKS = 10_000  # tasks one app may declare


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


# -- declaring tasks -----------------------------------------------------------------------

def task_name(fn: Callable[..., Any]) -> str:
    """A task's default name: ``module.qualname`` (a script run as ``__main__`` should
    name its tasks, or its workers, which import it by its module name, will not know
    them)."""
    return f"{getattr(fn, '__module__', None) or '?'}.{getattr(fn, '__qualname__', repr(fn))}"


@dataclass(frozen=True)
class TaskOptions:
    """A task's options, validated. ``queue``: where its messages go; ``retry_delays`` /
    ``max_retries``: its own retry policy (None: the worker's); ``timeout``: seconds one
    run may take (its queue consumer's consume_timeout); ``rate_limit``: (count, period
    seconds) of its queue's consumer group; ``key``: a function of the call's arguments
    giving the ordering key; ``keep_result``: seconds its end state and return value are
    kept (0: nothing kept, no cost); ``ordered``: passed to the queue when it is first
    opened; ``run_in_thread``: a sync function of an asyncio app runs in a thread."""

    name: str
    queue: str
    retry_delays: tuple[float, ...] | None = None
    max_retries: int | None = None
    timeout: float | None = None
    rate_limit: tuple[int, float] | None = None
    key: Callable[..., Any] | None = None
    keep_result: float = 0.0
    ordered: bool | str | None = None
    run_in_thread: bool = False

    def __post_init__(self) -> None:
        validate.check_text(self.name, "task name")
        validate.check_name(self.queue, "task queue")
        if self.retry_delays is not None:
            object.__setattr__(self, "retry_delays", check_delays(self.retry_delays))
        if self.max_retries is not None:
            validate.check_int(self.max_retries, "max_retries", low=0, high=1_000_000)
        if self.timeout is not None:
            validate.check_seconds(self.timeout, "timeout", minimum=0.001)
        if self.rate_limit is not None:
            ConsumerSettings(rate_limit=self.rate_limit)  # one check of a rate limit
            object.__setattr__(self, "rate_limit", (self.rate_limit[0],
                                                    float(self.rate_limit[1])))
        if self.key is not None and not callable(self.key):
            raise InvalidType(f"key must be a function of the task's arguments giving its "
                              f"ordering key, got {type(self.key).__name__}")
        keep = validate.check_seconds(self.keep_result, "keep_result")
        if 0 < keep < 0.001:
            raise InvalidArgument("keep_result must be 0 (keep nothing) or at least 0.001 s")
        object.__setattr__(self, "keep_result", keep)
        if self.ordered is not None and not isinstance(self.ordered, (bool, str)):
            raise InvalidType(f"ordered must be a bool (or a mode name), got "
                              f"{type(self.ordered).__name__}")
        validate.check_bool(self.run_in_thread, "run_in_thread")

    @property
    def keep_ms(self) -> int:
        return validate.to_ms(self.keep_result)


def check_function(fn: Any, *, asyncio: bool, run_in_thread: bool) -> None:
    """A task's function fits its app: an asyncio app runs ``async def`` functions, and
    sync ones only with ``run_in_thread=True``; a sync app runs sync functions."""
    if not callable(fn):
        raise InvalidType(f"a task is a function, got {type(fn).__name__}")
    coroutine = is_coroutine_function(fn)
    if asyncio:
        if coroutine and run_in_thread:
            raise InvalidArgument(f"{task_name(fn)} is async: run_in_thread is for sync "
                                  "functions")
        if not coroutine and not run_in_thread:
            raise InvalidArgument(f"{task_name(fn)} is a sync function: on an asyncio app it "
                                  "would block the event loop; make it async def, or give "
                                  "run_in_thread=True to run it in a thread")
    elif coroutine:
        raise InvalidArgument(f"{task_name(fn)} is async def: use dynoq.asyncio.Tasks for "
                              "async tasks (dynoq.Tasks runs sync functions in threads)")
    elif run_in_thread:
        raise InvalidArgument("run_in_thread is for dynoq.asyncio.Tasks: a dynoq.Tasks "
                              "worker runs every task in its threads")


class Arguments:
    """Checks that a call's arguments fit a task's function (refused at ``delay``, not at
    the worker, where every retry would fail the same way). The common call, positional
    arguments only, is checked by counting (``Signature.bind`` took 2.3 µs a ``delay``);
    any other by binding."""

    def __init__(self, name: str, fn: Callable[..., Any]) -> None:
        self.name = name
        try:
            self.signature: inspect.Signature | None = inspect.signature(fn)
        except (TypeError, ValueError):  # some builtins have none: calls are not checked
            self.signature = None
            return
        params = list(self.signature.parameters.values())
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY,
                                                      p.POSITIONAL_OR_KEYWORD)]
        self.positional = [p.name for p in positional]
        self.least = sum(p.default is p.empty for p in positional)
        self.most = (None if any(p.kind is p.VAR_POSITIONAL for p in params)
                     else len(positional))
        # a keyword-only parameter without a default must be given by name: bind checks
        self.counted = not any(p.kind is p.KEYWORD_ONLY and p.default is p.empty
                               for p in params)

    def check(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        if self.signature is None:
            return
        if (not kwargs and self.counted and len(args) >= self.least
                and (self.most is None or len(args) <= self.most)):
            return
        try:
            self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise InvalidType(f"{self.name}(): {exc}") from None


@dataclass
class QueueSpec:
    """What a task queue's consumer takes from its tasks (one consumer runs them all):
    the first task that names one of these decides it, and another that names a different
    value is refused when it is declared."""

    name: str
    ordered: bool | str | None = None
    timeout: float | None = None
    rate_limit: tuple[int, float] | None = None
    decided_by: dict[str, str] = field(default_factory=dict)  # option -> task name
    tasks: list[str] = field(default_factory=list)

    def settings(self) -> dict[str, Any]:
        """The queue settings the app opens the queue with (the rest: stored, or the
        defaults on first use)."""
        return {} if self.ordered is None else {"ordered": self.ordered}


class Registry(Generic[T]):
    """An app's tasks by name, and their queues' specs (pure bookkeeping)."""

    def __init__(self, default_queue: str) -> None:
        self.default_queue = validate.check_name(default_queue, "queue")
        self._tasks: dict[str, tuple[TaskOptions, T]] = {}
        self._queues: dict[str, QueueSpec] = {}

    def add(self, options: TaskOptions, task: T) -> None:
        """Register a task; refuses a name taken by another task and queue options that
        contradict an earlier task of the same queue (nothing is changed then)."""
        if options.name in self._tasks:
            raise InvalidArgument(f"a task named {options.name!r} is already declared; give "
                                  "this one another name (@tasks.task(name=...))")
        if len(self._tasks) >= MAX_TASKS:
            raise InvalidArgument(f"an app holds at most {MAX_TASKS} tasks")
        spec = self._queues.get(options.queue) or QueueSpec(options.queue)
        wanted = {"ordered": options.ordered, "timeout": options.timeout,
                  "rate_limit": options.rate_limit}
        for what, value in wanted.items():
            have = getattr(spec, what)
            if value is not None and have is not None and value != have:
                raise InvalidArgument(
                    f"task {options.name!r} asks for {what}={value!r} on queue "
                    f"{options.queue!r}, where task {spec.decided_by[what]!r} asked for "
                    f"{have!r}: one consumer runs a queue's tasks, with one {what}; put "
                    "this task on a queue of its own (@tasks.task(queue=...))")
        for what, value in wanted.items():
            if value is not None and getattr(spec, what) is None:
                setattr(spec, what, value)
                spec.decided_by[what] = options.name
        spec.tasks.append(options.name)
        self._queues[options.queue] = spec
        self._tasks[options.name] = (options, task)

    def get(self, name: str) -> T | None:
        found = self._tasks.get(name)
        return None if found is None else found[1]

    def runnable(self, name: str) -> T:
        """The task a worker runs for a message naming ``name`` (whatever queue it came
        from: a task moved to another queue still runs the calls waiting on its old one);
        an unknown name is dead-lettered, with the reason, at once."""
        found = self._tasks.get(name)
        if found is None:
            raise DeadLetter(f"unknown task {name!r}: no task of that name is declared in "
                             f"this worker's app (a newer version's task? deploy the "
                             f"workers, then replay the dead letters)")
        return found[1]

    def options(self) -> list[TaskOptions]:
        return [o for o, _ in self._tasks.values()]

    def queues(self) -> list[str]:
        """The queues that hold tasks, sorted."""
        return sorted(self._queues)

    def spec(self, queue: str) -> QueueSpec:
        return self._queues.get(queue) or QueueSpec(queue)

    def pick(self, queues: Iterable[str] | None) -> list[str]:
        """The queues a worker runs: ``queues`` (each must hold tasks), or all of them."""
        if not self._queues:
            raise InvalidArgument("this app declares no task: nothing to run")
        if queues is None:
            return self.queues()
        if isinstance(queues, (str, bytes)):
            raise InvalidType("queues must be a list of queue names, not one string")
        picked = list(dict.fromkeys(queues))
        unknown = [q for q in picked if q not in self._queues]
        if unknown or not picked:
            raise InvalidArgument(f"no task of this app is on queue(s) {unknown or picked}; "
                                  f"its task queues: {', '.join(self.queues())}")
        return picked

    def consumer_settings(self, queue: str, base: ConsumerSettings,
                          ordered: bool) -> ConsumerSettings:
        """The settings of ``queue``'s consumer: ``base`` (the worker's options), with its
        tasks' timeout and rate limit, and a retry policy that picks each task's own
        (retry_delays and max_retries; a task that sets neither takes the worker's)."""
        default = RetryPolicy.make(base.retry_delays, ordered=ordered,
                                   max_retries=base.max_retries)
        own = {o.name: RetryPolicy(o.retry_delays or default.delays,
                                   default.max_retries if o.max_retries is None
                                   else o.max_retries)
               for o in self.options() if o.retry_delays is not None or o.max_retries is not None}
        spec = self.spec(queue)
        return dataclasses.replace(
            base, retry_delays=TaskRetries(default.delays, default.max_retries, own),
            max_retries=None, consume_timeout=spec.timeout or base.consume_timeout,
            rate_limit=spec.rate_limit or base.rate_limit)


def worker_settings(settings: ConsumerSettings | None,
                    options: Mapping[str, Any]) -> ConsumerSettings:
    """A task worker's consumer options: ``settings``, or options by name (not both)."""
    if settings is not None:
        if options:
            raise InvalidArgument("give the worker's options either as settings= or by name, "
                                  f"not both (also given by name: {', '.join(sorted(options))})")
        if not isinstance(settings, ConsumerSettings):
            raise InvalidType(f"settings must be a dynoq.ConsumerSettings, got "
                              f"{type(settings).__name__}")
        return settings
    names = {f.name for f in dataclasses.fields(ConsumerSettings)}
    unknown = sorted(set(options) - names)
    if unknown:
        raise InvalidType(f"unknown worker option(s) {', '.join(unknown)}; the options are "
                          "dynoq.ConsumerSettings' fields")
    return ConsumerSettings(**options)


@dataclass(frozen=True)
class TaskRetries(RetryPolicy):
    """A task queue's retry policy: each task's own (``by_task``), else this one's."""

    by_task: Mapping[str, RetryPolicy] = field(default_factory=dict)

    def of(self, msg: Message) -> RetryPolicy:
        payload = msg.payload
        if type(payload) is dict:
            name = payload.get("task")
            if type(name) is str:
                return self.by_task.get(name, self)
        return self


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


def refusal(name: str, arguments: Arguments, args: Sequence[Any], kwargs: Mapping[str, Any],
            limit: int, error: PayloadTypeError) -> PayloadTypeError:
    """The error for a call msgpack cannot carry: it names the first argument that is the
    reason (by parameter name when the signature says it)."""
    positional = arguments.positional if arguments.signature is not None else []
    labelled = [*((positional[i] if i < len(positional) else f"#{i + 1}", v)
                  for i, v in enumerate(args)), *kwargs.items()]
    for label, value in labelled:
        try:
            codec.encode_body(value, None, None, limit)
        except PayloadTypeError as exc:
            return TaskArgumentError(
                f"{name}(): argument {label!r} ({type(value).__name__}) cannot be sent: "
                f"{exc}; never a pickle: send what rebuilds it (an id, a string, a number)",
                label)
    return error


def routing(ops: QueueOps, task_id: str, key: str | None) -> int:
    """The shard a task of this id and key lives in (as a push routes it)."""
    return ops.shard_for(key if ops.settings.ordered and key is not None else task_id)


def call_of(msg: Message) -> tuple[str, Sequence[Any], dict[str, Any]]:
    """(task name, args, kwargs) of a task message; a message that is no task is
    dead-lettered, with the reason, at once."""
    payload = msg.payload
    if type(payload) is dict:
        name, args, kwargs = payload.get("task"), payload.get("args", ()), payload.get(
            "kwargs", {})
        if type(name) is str and type(args) is list and type(kwargs) is dict:
            return name, args, kwargs
    raise DeadLetter(f"message {msg.id!r} is not a task: a task's payload is a dict of "
                     "'task' (its name), 'args' (a list) and 'kwargs' (a dict)")


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
        why = (f"the return value ({type(value).__name__}) cannot be kept: msgpack carries "
               f"bytes, str, numbers, bools, None, lists and dicts ({exc})")
    packed: bytes = msgpack.packb([state, task, None, why, attempts], use_bin_type=True)
    return packed


def keep_success(ops: QueueOps, msg: Message, task: str, value: Any,
                 keep_ms: int) -> tuple[str, bytes, int]:
    """What a worker writes with the ack of a task that returned (``Message.keep``)."""
    assert msg.shard is not None and msg.id is not None
    return (result_key(ops.keys.prefix, ops.keys.tag or ops.name, msg.shard, msg.id),
            kept_record(_SUCCEEDED, task, value, ops.limit, msg.attempts), keep_ms)


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

    @classmethod
    def of(cls, ops: QueueOps, shard: int, task_id: str) -> TaskKeys:
        k = ops.shard_keys[shard]
        return cls(k.delayed, k.ready, k.unack, k.msgs, k.dlv, k.dead, k.seq, k.done,
                   k.counts, k.why, result_key(ops.keys.prefix, ops.keys.tag or ops.name,
                                               shard, task_id), k.epoch)


def push_if_absent(ops: QueueOps, out: Outgoing) -> Call | Batch:
    """Push a task by id unless its id waits, runs, is dead-lettered or has a kept record
    (task-push-11.lua); the reply is True when it was pushed (QueueGone when the queue
    is gone)."""
    if ops.keyed:  # task-push places as a plain push does, where keyed pops never look
        raise OrderedQueueError(f"a task with an id cannot go to {ops.name!r}, a "
                                "message-group queue (ordered='key'), yet: leave the id "
                                "out, or use ordered=True")
    check = ops.checked(f"a task's push to {ops.name!r}")
    call = _PUSH.call(TaskKeys.of(ops, ops.shard_for(out.routing), out.id),
                      [ops.epoch, validate.to_ms(ops.settings.dedupe_window), ops.wake,
                       out.id, out.delay_ms, out.priority, out.body], check)
    if ops.settings.min_replicas:
        return ops._replicated([call], lambda replies: int(replies[0]) == 1)
    call.parse = ops.checked(f"a task's push to {ops.name!r}", lambda r: int(r) == 1)
    return call


def load_keep(ops: QueueOps) -> Batch:
    """A call of task-keep on every shard that writes nothing, so that the server (every
    node of a cluster) has the script before a worker's first ack needs it: a batch whose
    script is not loaded sends it again once loaded, after the rest of the batch, and the
    first records would be written after their acks, not before."""
    return Batch([Call(_KEEP, [result_key(ops.keys.prefix, ops.keys.tag or ops.name, shard,
                                          "-")], [0, b""])
                  for shard in range(ops.settings.shards)])


def cancel(ops: QueueOps, shard: int, task_id: str, task: str | None, keep_ms: int) -> Call:
    """Take a waiting task off its queue (task-cancel-7.lua); the reply is True when it
    was waiting, and is now cancelled (QueueGone when the queue is gone)."""
    record = kept_record(_CANCELLED, task or "", None, ops.limit) if keep_ms else b""
    return _CANCEL.call(TaskKeys.of(ops, shard, task_id),
                        [ops.epoch, task_id, keep_ms, record, ops.wake],
                        ops.checked(f"a task's cancel on {ops.name!r}", lambda r: int(r) == 1))


def state(ops: QueueOps, shard: int, task_id: str) -> Call:
    """A task's state, read in one script (task-state-8.lua); the reply is a TaskInfo."""
    return _STATE.call(TaskKeys.of(ops, shard, task_id), [task_id],
                       lambda reply: derive(task_id, reply, ops.limit))


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


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def derive(task_id: str, reply: Sequence[Any], limit: int) -> TaskInfo:
    """A TaskInfo from what task-state-8.lua read: the queue's sets first (a task that
    runs again after a kept end shows how it runs now), then the kept record."""
    where, score, attempts, why, kept, now = reply
    where, attempts = _text(where), int(attempts)
    failure = codec.failure(why)
    if where == "unack":
        return TaskInfo(task_id, TaskState.RUNNING, attempts, failure)
    if where == "dead":
        return TaskInfo(task_id, TaskState.DEAD, attempts, failure)
    if where in ("delayed", "ready", "msgs"):
        due = float(score) / 1000 if where == "delayed" else None
        if attempts > 0:
            return TaskInfo(task_id, TaskState.RETRYING, attempts, failure, due)
        later = due is not None and float(score) > int(now)
        return TaskInfo(task_id, TaskState.DELAYED if later else TaskState.WAITING,
                        attempts, failure, due)
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
        return TaskInfo(task_id, TaskState.SUCCEEDED, max(runs, 0), result=value, note=note,
                        task=task or None)
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
        raise TaskFailed(f"{label} failed: {f.error_type}: {f.error}", f.error_type, f.error,
                         f.traceback)
    if info.state is TaskState.CANCELLED:
        raise TaskCancelled(f"{label} was cancelled before it ran", "TaskCancelled")
    raise ResultNotKept(f"nothing is known of {label}: it ended and its task keeps no "
                        "result (keep_result=0), or its kept result expired, or no task "
                        "of that id was pushed")
