"""A tasks app's declarations (pure: no I/O), shared by dynoq.Tasks and its asyncio twin:
a task's name and options, whether its function fits the app, whether a call's arguments
fit the function, the app's tasks by name and their queues, which options each task
queue's consumer takes, and each task's retry policy."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ..errors import InvalidArgument, InvalidType
from ..message import Message
from . import validate
from .callables import is_coroutine_function
from .retry import DeadLetter, RetryPolicy, backoff_policy, check_delays
from .settings import ConsumerSettings

T = TypeVar("T")

MAX_TASKS = 10_000  # tasks one app may declare


def task_name(fn: Callable[..., Any]) -> str:
    """A task's default name: ``module.qualname`` (a script run as ``__main__`` should
    name its tasks, or its workers, which import it by its module name, will not know
    them)."""
    return f"{getattr(fn, '__module__', None) or '?'}.{getattr(fn, '__qualname__', repr(fn))}"


@dataclass(frozen=True)
class TaskOptions:
    """A task's options, validated. ``queue``: where its messages go; ``retry_delays`` /
    ``max_retries``: its own retry policy (None: the worker's), or ``retry_backoff`` (True
    or a factor in seconds), ``retry_backoff_max`` and ``retry_jitter``: exponential
    backoff in its place (Celery's names); ``timeout``: seconds one run may take (its
    own, whatever the other tasks of its queue take; None: the worker's consume_timeout;
    RetryPolicy.timeout); ``rate_limit``: (count, period
    seconds): its own calls, across every worker (``Runner``); ``key``: a function of
    the call's arguments giving the ordering key; ``keep_result``: seconds its end state
    and return value are kept (0: nothing kept, no cost); ``ordered``: passed to the
    queue when it is first opened; ``run_in_thread``: a sync function of an asyncio app
    runs in a thread."""

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
    retry_backoff: bool | float = False
    retry_backoff_max: float | None = None
    retry_jitter: bool | None = None

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
            object.__setattr__(self, "rate_limit", (self.rate_limit[0], float(self.rate_limit[1])))
        if self.key is not None and not callable(self.key):
            raise InvalidType(
                f"key must be a function of the task's arguments giving its "
                f"ordering key, got {type(self.key).__name__}"
            )
        keep = validate.check_seconds(self.keep_result, "keep_result")
        if 0 < keep < 0.001:
            raise InvalidArgument("keep_result must be 0 (keep nothing) or at least 0.001 s")
        object.__setattr__(self, "keep_result", keep)
        if self.ordered is not None and not isinstance(self.ordered, (bool, str)):
            raise InvalidType(
                f"ordered must be a bool (or a mode name), got {type(self.ordered).__name__}"
            )
        validate.check_bool(self.run_in_thread, "run_in_thread")
        if self.retry_backoff is False:
            given = [
                what
                for what in ("retry_backoff_max", "retry_jitter")
                if getattr(self, what) is not None
            ]
            if given:
                raise InvalidArgument(f"{' and '.join(given)} shape retry_backoff: give it too")
        elif self.retry_delays is not None:
            raise InvalidArgument(
                "give retry_delays (a schedule) or retry_backoff (exponential), not both"
            )
        self.retry_policy(RetryPolicy(()))  # checks the backoff's options

    def retry_policy(self, default: RetryPolicy) -> RetryPolicy | None:
        """This task's own retry policy (None: it takes ``default``, the worker's)."""
        retries = default.max_retries if self.max_retries is None else self.max_retries
        if self.retry_backoff is not False:
            policy = backoff_policy(
                self.retry_backoff, self.retry_backoff_max, self.retry_jitter, retries
            )
            return dataclasses.replace(policy, timeout=self.timeout)
        if self.retry_delays is None and self.max_retries is None and self.timeout is None:
            return None
        return RetryPolicy(self.retry_delays or default.delays, retries, self.timeout)

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
            raise InvalidArgument(f"{task_name(fn)} is async: run_in_thread is for sync functions")
        if not coroutine and not run_in_thread:
            raise InvalidArgument(
                f"{task_name(fn)} is a sync function: on an asyncio app it "
                "would block the event loop; make it async def, or give "
                "run_in_thread=True to run it in a thread"
            )
    elif coroutine:
        raise InvalidArgument(
            f"{task_name(fn)} is async def: use dynoq.asyncio.Tasks for "
            "async tasks (dynoq.Tasks runs sync functions in threads)"
        )
    elif run_in_thread:
        raise InvalidArgument(
            "run_in_thread is for dynoq.asyncio.Tasks: a dynoq.Tasks "
            "worker runs every task in its threads"
        )


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
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        self.positional = [p.name for p in positional]
        self.least = sum(p.default is p.empty for p in positional)
        self.most = None if any(p.kind is p.VAR_POSITIONAL for p in params) else len(positional)
        # a keyword-only parameter without a default must be given by name: bind checks
        self.counted = not any(p.kind is p.KEYWORD_ONLY and p.default is p.empty for p in params)

    def check(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        if self.signature is None:
            return
        if (
            not kwargs
            and self.counted
            and len(args) >= self.least
            and (self.most is None or len(args) <= self.most)
        ):
            return
        try:
            self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise InvalidType(f"{self.name}(): {exc}") from None


@dataclass
class QueueSpec:
    """What a task queue's consumer takes from its tasks (one consumer runs them all):
    the first task that names one of these decides it, and another that names a different
    value is refused when it is declared. (A rate limit and a timeout are each task's
    own.)"""

    name: str
    ordered: bool | str | None = None
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
            raise InvalidArgument(
                f"a task named {options.name!r} is already declared; give "
                "this one another name (@tasks.task(name=...))"
            )
        if len(self._tasks) >= MAX_TASKS:
            raise InvalidArgument(f"an app holds at most {MAX_TASKS} tasks")
        spec = self._queues.get(options.queue) or QueueSpec(options.queue)
        wanted = {"ordered": options.ordered}
        for what, value in wanted.items():
            have = getattr(spec, what)
            if value is not None and have is not None and value != have:
                raise InvalidArgument(
                    f"task {options.name!r} asks for {what}={value!r} on queue "
                    f"{options.queue!r}, where task {spec.decided_by[what]!r} asked for "
                    f"{have!r}: one consumer runs a queue's tasks, with one {what}; put "
                    "this task on a queue of its own (@tasks.task(queue=...))"
                )
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
            raise DeadLetter(
                f"unknown task {name!r}: no task of that name is declared in "
                f"this worker's app (a newer version's task? deploy the "
                f"workers, then replay the dead letters)"
            )
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
            raise InvalidArgument(
                f"no task of this app is on queue(s) {unknown or picked}; "
                f"its task queues: {', '.join(self.queues())}"
            )
        return picked

    def consumer_settings(
        self, queue: str, base: ConsumerSettings, ordered: bool
    ) -> ConsumerSettings:
        """The settings of ``queue``'s consumer: ``base`` (the worker's options; its rate
        limit, if any, the whole queue's), with a retry policy that picks each task's own
        (retry_delays or retry_backoff, max_retries, and its timeout; a task that sets
        none of them takes the worker's)."""
        default = RetryPolicy.make(base.retry_delays, ordered=ordered, max_retries=base.max_retries)
        policies = {o.name: o.retry_policy(default) for o in self.options()}
        own = {name: policy for name, policy in policies.items() if policy is not None}
        return dataclasses.replace(
            base,
            retry_delays=TaskRetries(default.delays, default.max_retries, by_task=own),
            max_retries=None,
        )


def worker_settings(
    settings: ConsumerSettings | None, options: Mapping[str, Any]
) -> ConsumerSettings:
    """A task worker's consumer options: ``settings``, or options by name (not both)."""
    if settings is not None:
        if options:
            raise InvalidArgument(
                "give the worker's options either as settings= or by name, "
                f"not both (also given by name: {', '.join(sorted(options))})"
            )
        if not isinstance(settings, ConsumerSettings):
            raise InvalidType(
                f"settings must be a dynoq.ConsumerSettings, got {type(settings).__name__}"
            )
        return settings
    names = {f.name for f in dataclasses.fields(ConsumerSettings)}
    unknown = sorted(set(options) - names)
    if unknown:
        raise InvalidType(
            f"unknown worker option(s) {', '.join(unknown)}; the options are "
            "dynoq.ConsumerSettings' fields"
        )
    return ConsumerSettings(**options)


@dataclass(frozen=True)
class TaskRetries(RetryPolicy):
    """A task queue's retry policy: each task's own (``by_task``), else this one's."""

    by_task: Mapping[str, RetryPolicy] = field(default_factory=dict)

    def has_timeouts(self) -> bool:
        return self.timeout is not None or any(p.timeout is not None for p in self.by_task.values())

    def of(self, msg: Message) -> RetryPolicy:
        payload = msg.payload
        if type(payload) is dict:
            name = payload.get("task")
            if type(name) is str:
                return self.by_task.get(name, self)
        return self
