"""Tasks: call a function later, on any worker (Celery's, RQ's and arq's ``.delay()``),
as a thin layer on the queue.

A task is a message ``{"task": name, "args": [...], "kwargs": {...}}`` (msgpack, never
pickle) on one of the app's queues; a worker runs one consumer per queue, whose handler
runs each message's task. Delays, ordered queues and keys, retries, dead letters with
their reasons, rate limits and schedules are the queue's and the consumer's own; the
decisions of this layer are in :mod:`dynoq._core.tasks` and :mod:`dynoq._core.taskapp`,
shared by both flavors. The asyncio shell (``dynoq/asyncio/tasks.py``) is written by hand;
the sync one is generated from it (scripts/unasync.py).
"""

from __future__ import annotations

import asyncio  # unasync: # no asyncio: a sync app runs each task in a worker thread
import functools
import logging
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, overload

from .._core import canvas, taskapp, validate
from .._core import flows as flow_core
from .._core import tasks as core
from .._core.callables import call_sync
from .._core.calls import Call
from .._core.canvas import Chain, Group, Node, Signature
from .._core.flows import Step
from .._core.queue import QueueOps
from .._core.retry import RetryPolicy
from .._core.taskapp import TaskOptions
from ..errors import InvalidArgument, PayloadTypeError
from ..message import ConsumerStats, Message
from ..settings import ConsumerSettings
from . import flows
from .client import Client, connect
from .consumer.many import Consumers
from .flows import FlowHandle
from .handles import TaskHandle
from .queue import Queue
from .taskruns import Runner
from .transactions import Half

ASYNC = True  # unasync: ASYNC = False
log = logging.getLogger("dynoq.tasks")


def _runner(fn: Callable[..., Any], in_thread: bool) -> Callable[..., Any]:
    """What a worker calls to run ``fn``: a sync function of an asyncio app runs in a
    thread; a sync function's awaitable result fails its run (nothing awaits it)."""
    sync = functools.partial(call_sync, fn)
    return functools.partial(asyncio.to_thread, sync) if in_thread else fn  # unasync: return sync


class Tasks:
    """An app's tasks, sent through ``client`` (a :class:`dynoq.asyncio.Client`; None
    until :meth:`bind`). ``queue``: where a task goes unless it names its own.

    ``@tasks.task`` declares one; ``await fn.delay(...)`` sends a call;
    ``await tasks.worker()`` runs them (or ``dynoq worker --tasks module:tasks``)."""

    def __init__(self, client: Client | None = None, *, queue: str = "default") -> None:
        self.client = client
        self.registry: taskapp.Registry[Task] = taskapp.Registry(queue)
        self._queues: dict[str, Queue] = {}

    def __repr__(self) -> str:
        count = len(self.registry.options())
        return f"<dynoq.asyncio.Tasks {count} task(s) on {self.registry.queues()}>"

    def bind(self, client: Client) -> None:
        """Send and run this app's tasks through ``client`` from now on (``dynoq worker
        --tasks`` binds the app to the worker's own connection, so a task that delays
        another sends it there too)."""
        self.client = client
        self._queues = {}

    @overload
    def task(self, fn: Callable[..., Any], /) -> Task: ...

    @overload
    def task(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        queue: str | None = None,
        retry_delays: Sequence[float] | None = None,
        max_retries: int | None = None,
        timeout: float | None = None,
        rate_limit: tuple[int, float] | None = None,
        key: Callable[..., Any] | None = None,
        keep_result: float = 0.0,
        ordered: bool | str | None = None,
        run_in_thread: bool = False,
        retry_backoff: bool | float = False,
        retry_backoff_max: float | None = None,
        retry_jitter: bool | None = None,
    ) -> Callable[[Callable[..., Any]], Task]: ...

    def task(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        queue: str | None = None,
        retry_delays: Sequence[float] | None = None,
        max_retries: int | None = None,
        timeout: float | None = None,
        rate_limit: tuple[int, float] | None = None,
        key: Callable[..., Any] | None = None,
        keep_result: float = 0.0,
        ordered: bool | str | None = None,
        run_in_thread: bool = False,
        retry_backoff: bool | float = False,
        retry_backoff_max: float | None = None,
        retry_jitter: bool | None = None,
    ) -> Task | Callable[[Callable[..., Any]], Task]:
        """Declare a task: ``@tasks.task`` or ``@tasks.task(...)`` with its options.

        name: default ``module.qualname``; queue: default the app's; retry_delays /
        max_retries: seconds before each retry, and retries after the first run before it
        is dead-lettered (default: the worker's options, then the queue's; the queue's
        max_retries caps it); retry_backoff: exponential delays in place of retry_delays
        (True: 1, 2, 4, ... s; a number: that factor), at most retry_backoff_max seconds
        (default 600), each a random draw from 0 to that with retry_jitter (default True:
        Celery's full jitter); timeout: seconds one run may take (for the whole queue: its
        consumer's consume_timeout; a task that needs its own goes on its own queue);
        rate_limit: (count, period seconds), this task's calls across every worker (one
        over it goes back, no attempt used, until a permit is free); key: a function of
        the call's arguments giving its ordering key (ordered queues); keep_result:
        seconds its end state and return value are kept (0: nothing kept, no cost);
        ordered: the queue's setting when this app first opens it; run_in_thread: a sync
        function of an asyncio app runs in a thread. Bad options raise InvalidArgument /
        InvalidType, and so do a name already taken and a queue option that contradicts
        another task's."""

        def declare(f: Callable[..., Any]) -> Task:
            taskapp.check_function(f, asyncio=ASYNC, run_in_thread=run_in_thread)
            options = TaskOptions(
                name=taskapp.task_name(f) if name is None else name,
                queue=self.registry.default_queue if queue is None else queue,
                retry_delays=None if retry_delays is None else tuple(retry_delays),
                max_retries=max_retries,
                timeout=timeout,
                rate_limit=rate_limit,
                key=key,
                keep_result=keep_result,
                ordered=ordered,
                run_in_thread=run_in_thread,
                retry_backoff=retry_backoff,
                retry_backoff_max=retry_backoff_max,
                retry_jitter=retry_jitter,
            )
            declared = Task(self, f, options)
            self.registry.add(options, declared)
            return declared

        return declare if fn is None else declare(fn)

    def get(self, name: str) -> Task | None:
        """The task declared under ``name``, or None."""
        return self.registry.get(name)

    # -- workflows: chains, groups, chords (docs/workflows.md) ------------------------------

    def chain(self, *steps: Node) -> Chain:
        """Steps run one after another, each result the next step's first argument
        (``a.s() | b.s()`` is the same)."""
        return canvas.chain(*steps)

    def group(self, members: Iterable[Node], *, on_failure: str = "fail") -> Group:
        """Members run at once; the group's value is their results, in order. A member
        that fails fails the group (``on_failure="fail"``), or is a TaskFailed value
        in its place (``"continue"``)."""
        return canvas.group(members, on_failure)

    def chord(
        self, members: Group | Iterable[Node], callback: Node, *, on_failure: str = "fail"
    ) -> Chain:
        """A group, then ``callback`` with the list of its members' results once every
        member ended; a member that failed fails the chord (``on_failure="fail"``: the
        callback never runs), or the callback gets a TaskFailed in its place
        (``"continue"``)."""
        return canvas.chord(members, callback, on_failure)

    def follow(self, flow_id: str, step: Step) -> list[Call]:
        """What a flow's step that a worker's call ended asks to send (no I/O: the
        worker opened every queue of the app when it started); a queue it did not
        open is said in the log, and its calls left to a reconcile."""
        calls, unknown = flow_core.follow(step, flow_id, self._client().prefix, self._ops_of)
        for name in unknown:
            log.warning(
                "dynoq: flow %s's next step goes to queue %r, which this worker did not "
                "open: the flow's reconcile (FlowHandle.result waits with one) pushes it",
                flow_id,
                name,
            )
        return calls

    def _ops_of(self, name: str) -> QueueOps | None:
        """An opened queue's ops (a step's queue this app opened), or None."""
        q = self._queues.get(name)
        return None if q is None else q.ops

    async def start_flow(self, root: Node, *, keep_result: float | None = None) -> FlowHandle:
        """Start a flow (``root.delay()`` calls this); its handle. ``keep_result``:
        seconds its state and result are kept once it ended (default a day)."""
        return await flows.start(self, self._client(), root, keep_result)

    def flow(self, id: str) -> FlowHandle:
        """A handle on the flow of this id, from any process."""
        return flows.FlowHandle(self._client(), flow_core.check_flow_id(id), self)

    def handle(
        self, id: str, *, task: Task | str | None = None, key: str | None = None
    ) -> TaskHandle:
        """A handle on the task of this id, from any process: give its ``task`` (or its
        name) when you know it (else every task queue of the app is looked at), and its
        ordering ``key`` when it has one (else every shard of an ordered queue is)."""
        found = self.get(task) if isinstance(task, str) else task
        if isinstance(task, str) and found is None:
            raise InvalidArgument(f"no task named {task!r} in this app")
        return TaskHandle(
            self, validate.check_id(id, "task id"), task=found, key=validate.check_key(key)
        )

    async def queue(self, name: str) -> Queue:
        """One of the app's queues, opened (created on first use) through its client;
        opened again once an operation found it gone (QueueGone), so the next call
        creates it anew with the app's settings."""
        q = self._queues.get(name)
        if q is None or q.ops.lost:
            q = await self._client().queue(name, **self.registry.spec(name).settings())
            self._queues[name] = q
        return q

    def _client(self) -> Client:
        if self.client is None:
            raise InvalidArgument(
                "this Tasks has no client: make it with Tasks(client), or "
                "call tasks.bind(client) first"
            )
        return self.client

    async def worker(
        self,
        *,
        queues: Iterable[str] | None = None,
        settings: ConsumerSettings | None = None,
        **options: Any,
    ) -> Consumers:
        """A worker of the app's tasks: one consumer per task queue (``queues``: these
        only), each with the consumer ``options`` (as ``client.consumer`` takes them, or
        ``settings=``) and its tasks' timeout, rate limit and retry policies. Start it,
        stop it, or ``run()`` it until SIGTERM."""
        base = taskapp.worker_settings(settings, options)
        client = self._client()
        made = []
        keeping = {o.queue for o in self.registry.options() if o.keep_ms}
        for name in self.registry.queues():  # a flow's next step may go to any of them
            await self.queue(name)
        for name in self.registry.pick(queues):
            q = await self.queue(name)
            if name in keeping:
                await q.backend.run(core.load_keep(q.ops))
            ordered = bool(q.settings.ordered)
            settings = self.registry.consumer_settings(name, base, ordered)
            policy = RetryPolicy.make(settings.retry_delays, ordered=ordered)
            made.append(client.consumer(q, Runner(self, q, policy), settings=settings))
        return Consumers(made)

    async def serve(
        self,
        url: str | None = None,
        *,
        prefix: str = "dq",
        queues: Iterable[str] | None = None,
        stop_timeout: float = 30.0,
        ready: Callable[[Consumers], Any] | None = None,
        redis_options: dict[str, Any] | None = None,
        **options: Any,
    ) -> ConsumerStats:
        """Run a worker of this app (:meth:`worker`, with ``queues`` and ``options``) on a
        connection of its own to ``url`` under ``prefix``, until SIGTERM or SIGINT, then
        stop it (``stop_timeout``); what ``dynoq worker --tasks`` runs. The app is bound
        to that connection, so a task that sends another sends it there. ``ready`` is
        called with the worker before it starts. Returns the worker's counts."""
        async with connect(url, prefix=prefix, **(redis_options or {})) as client:
            self.bind(client)
            worker = await self.worker(queues=queues, **options)
            if ready is not None:
                ready(worker)
            await worker.run(stop_timeout=stop_timeout)
            return worker.stats()


class Task:
    """A function declared as a task. Calling it calls the function, here and now;
    :meth:`delay` and :meth:`apply` send the call to a worker."""

    run: Callable[..., Any]  # what a worker calls (a sync function of an asyncio app: in a thread)

    def __init__(self, app: Tasks, fn: Callable[..., Any], options: TaskOptions) -> None:
        functools.update_wrapper(self, fn)
        self.app = app
        self.fn = fn
        self.options = options
        self.name = options.name
        self.keep_ms = options.keep_ms
        self.rate_limit = options.rate_limit  # its own, across every worker
        self._arguments = taskapp.Arguments(options.name, fn)
        self.run = _runner(fn, options.run_in_thread)

    def __repr__(self) -> str:
        return f"<dynoq.asyncio.Task {self.name!r} on queue {self.options.queue!r}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    async def delay(self, *args: Any, **kwargs: Any) -> TaskHandle:
        """Send this call to a worker now; a handle on it."""
        return await self.apply(args, kwargs)

    async def apply(
        self,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        *,
        delay: float = 0.0,
        at: datetime | None = None,
        id: str | None = None,
        key: str | None = None,
        priority: int = 0,
        expires: float | None = None,
        debounce: float | None = None,
    ) -> TaskHandle:
        """Send a call: after ``delay`` seconds, or at ``at`` (an aware datetime, by this
        machine's clock; one in the past: now), with ``priority`` (0..99, lower first), an
        ordering ``key`` (default: the task's key function of the arguments); one that no
        worker started within ``expires`` seconds is dead-lettered (never run). With an
        ``id`` it is pushed only if no task of that id waits, runs, is dead-lettered or
        has its result kept (push-if-absent: calling twice sends once); with an ``id``
        and ``debounce`` seconds, it runs that long after the latest call of that id, with
        the latest arguments (``Queue.push``'s debounce; not for a task that keeps its
        result, whose id names one call). Arguments msgpack
        cannot carry are refused (TaskArgumentError naming the argument), and so are
        arguments that do not fit the function (InvalidType): nothing is sent then."""
        delay = core.delay_until(at, delay)
        payload, key = self._call(args, kwargs, key)
        q = await self.app.queue(self.options.queue)
        try:
            options: dict[str, Any] = {
                "delay": delay,
                "priority": priority,
                "key": key,
                "expires": expires,
            }
            if debounce is not None:
                if self.keep_ms:
                    raise InvalidArgument(
                        f"task {self.name!r} keeps its result: its id names one call, which "
                        "debounce would replace"
                    )
                task_id = await q.push(payload, id=id, debounce=debounce, **options)
            elif id is None:
                task_id = await q.push(payload, **options)
            elif self.keep_ms:
                task_id = validate.check_id(id, "task id")
                out = q.ops.prepare(Message(payload, id=task_id, **options))
                await q.backend.run(core.push_if_absent(q.ops, out))
            else:
                task_id = validate.check_id(id, "task id")
                await q.ensure(payload, id=task_id, **options)
        except PayloadTypeError as exc:
            raise self._refusal(payload, q, exc) from None
        return TaskHandle(self.app, task_id, task=self, queue=q, key=validate.check_key(key))

    async def prepare(self, *args: Any, **kwargs: Any) -> Half:
        """Send this call transactionally (``Queue.prepare``): stored, never run, until
        ``await half.commit()``; ``half.rollback()`` drops it. Prepare, commit your
        database transaction, then commit the half; one left undecided is asked about by
        the queue's checker (``client.checker``), which gets the task's message.
        ``half.id`` is the task's id (``tasks.handle(half.id)``). Arguments are checked
        as :meth:`apply` checks them."""
        payload, key = self._call(args, kwargs, None)
        q = await self.app.queue(self.options.queue)
        try:
            return await q.prepare(payload, key=key)
        except PayloadTypeError as exc:
            raise self._refusal(payload, q, exc) from None

    def _call(
        self, args: Sequence[Any], kwargs: dict[str, Any] | None, key: str | None
    ) -> tuple[dict[str, Any], str | None]:
        """The payload of a call whose arguments fit the function, and its ordering key
        (``key``, else the task's key function of the arguments)."""
        payload = core.call_payload(self.name, args, kwargs)
        self._arguments.check(args, payload["kwargs"])
        if key is None and self.options.key is not None:
            key = self.options.key(*args, **payload["kwargs"])
        return payload, key

    def _refusal(self, payload: dict[str, Any], q: Queue, exc: PayloadTypeError) -> Exception:
        """The error for a call whose arguments msgpack cannot carry (naming the first)."""
        args, kw = payload["args"], payload["kwargs"]
        return core.refusal(self.name, self._arguments, args, kw, q.ops.limit, exc)

    async def schedule(
        self,
        *,
        every: float | None = None,
        cron: str | None = None,
        tz: str | None = None,
        overlap: str = "allow",
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        id: str | None = None,
        key: str | None = None,
    ) -> float:
        """Run this call again and again: ``every`` seconds or on a ``cron`` expression
        (in the IANA time zone ``tz``, default UTC), one run per tick however many
        workers run (the queue's schedules, see ``Queue.schedule``); ``overlap="skip"``:
        no run starts while the last one waits or runs. ``id``: the
        schedule's (default the task's name: give one per schedule when a task has
        several). Returns the first tick (server clock)."""
        payload, key = self._call(args, kwargs, key)
        q = await self.app.queue(self.options.queue)
        try:
            return await q.schedule(
                self.name if id is None else id,
                payload,
                every=every,
                cron=cron,
                tz=tz,
                overlap=overlap,
                key=key,
            )
        except PayloadTypeError as exc:
            raise self._refusal(payload, q, exc) from None

    async def unschedule(self, id: str | None = None) -> bool:
        """Stop a schedule of this task (default id: the task's name); False if unknown."""
        q = await self.app.queue(self.options.queue)
        return await q.unschedule(self.name if id is None else id)

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """This call as a step of a flow: it takes the previous step's result as its
        first argument (a chain's first step gets none)."""
        return self._signature(args, kwargs, immutable=False)

    def si(self, *args: Any, **kwargs: Any) -> Signature:
        """This call as a step of a flow, with exactly these arguments (immutable: the
        previous step's result is not passed)."""
        return self._signature(args, kwargs, immutable=True)

    def _signature(
        self, args: Sequence[Any], kwargs: dict[str, Any], *, immutable: bool
    ) -> Signature:
        payload = core.call_payload(self.name, args, kwargs)
        return Signature(
            self.name,
            self.options.queue,
            tuple(args),
            payload["kwargs"],
            immutable,
            self.app,
            self._arguments.check,
        )

    def handle(self, id: str, *, key: str | None = None) -> TaskHandle:
        """A handle on this task's call of this id (as :meth:`Tasks.handle`)."""
        return self.app.handle(id, task=self, key=key)
