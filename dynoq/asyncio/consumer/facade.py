"""The push consumer for asyncio: the object users start, stop and run."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import secrets
import signal
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..._core.calls import Cmd, Flow
from ..._core.consuming import Counts, check_mode, for_topic, resolve, settings_of
from ..._core.middleware import chain
from ..._core.ops import QueueOps
from ...errors import DynoqError, InvalidType
from ...message import ConsumerStats
from ...retry import RetryPolicy
from ...settings import ConsumerSettings
from ..queue import Queue
from ..topic import Topic
from .context import Shared
from .group import Membership
from .lease import Leases
from .middleware import Invoker
from .processing import Processor
from .upkeep import Upkeep
from .workers import Workers

log = logging.getLogger("dynoq.consumer")

_D = ConsumerSettings  # the options' defaults live on its fields


class Consumer:
    """Consume ``queue`` with ``async def handler(msg)`` as one member of a consumer group
    (see :class:`dynoq.Consumer`: the same options, given by name or as ``settings=``,
    with the same defaults; ``concurrency`` is the number of worker tasks).

    A sync handler is refused, since it would block the event loop; with
    ``run_in_thread=True`` it runs in a thread of the loop's default executor instead.
    Middleware hooks may be sync or ``async def``. ``queue`` may be a
    :class:`dynoq.asyncio.Topic`: the group is subscribed (tags "*") at start if it is
    not yet, and ``mode`` says how its members share its messages.
    """

    def __init__(self, queue: Queue | Topic, handler: Callable[..., Any], *,
                 settings: ConsumerSettings | None = None,
                 run_in_thread: bool = False,
                 group: str = _D.group,
                 concurrency: int = _D.concurrency,
                 batch_size: int = _D.batch_size,
                 batch_handler: bool = _D.batch_handler,
                 max_in_flight: int | None = _D.max_in_flight,
                 strategy: str | Callable[..., list[int]] = _D.strategy,
                 strategy_options: Mapping[str, Any] | None = _D.strategy_options,
                 retry_delays: Sequence[float] | RetryPolicy | None = _D.retry_delays,
                 max_retries: int | None = _D.max_retries,
                 lease_ttl: float = _D.lease_ttl,
                 rebalance_interval: float = _D.rebalance_interval,
                 instance_id: str | None = _D.instance_id,
                 mode: str = _D.mode,
                 max_continuous_time: float = _D.max_continuous_time,
                 idle_wait: float = _D.idle_wait,
                 visibility: float | None = _D.visibility,
                 consume_timeout: float = _D.consume_timeout,
                 rate_limit: tuple[int, float] | None = _D.rate_limit,
                 before: Callable[..., Any] | None = _D.before,
                 after: Callable[..., Any] | None = _D.after,
                 middleware: Sequence[Any] = _D.middleware) -> None:
        if not isinstance(queue, (Queue, Topic)):
            raise InvalidType(f"queue must be a dynoq.asyncio Queue or Topic, got "
                              f"{type(queue).__name__}")
        if not callable(handler):
            raise InvalidType(f"handler must be callable, got {type(handler).__name__}")
        if not isinstance(run_in_thread, bool):
            raise InvalidType("run_in_thread must be a bool")
        if run_in_thread == is_async(handler):
            raise InvalidType(
                "run_in_thread=True is for a sync handler; this one is async def"
                if run_in_thread else
                f"handler {getattr(handler, '__name__', handler)!r} is not async def: a "
                "sync handler would block the event loop. Make it async def, or pass "
                "run_in_thread=True to run it in a thread")
        named = dict(group=group, concurrency=concurrency, batch_size=batch_size,
                     batch_handler=batch_handler, max_in_flight=max_in_flight,
                     strategy=strategy, strategy_options=strategy_options,
                     retry_delays=retry_delays, max_retries=max_retries,
                     lease_ttl=lease_ttl,
                     rebalance_interval=rebalance_interval, instance_id=instance_id,
                     mode=mode, max_continuous_time=max_continuous_time,
                     idle_wait=idle_wait, visibility=visibility,
                     consume_timeout=consume_timeout, rate_limit=rate_limit,
                     before=before, after=after, middleware=middleware)
        self.settings = settings_of(settings, named)
        self._joining: Flow[QueueOps] | None = None  # a topic's subscription, made at start
        if isinstance(queue, Topic):
            self.settings, ops, self._joining = for_topic(self.settings, queue.ops)
            queue = Queue(queue.backend, ops)
        check_mode(self.settings, queue.ops)
        plan = resolve(self.settings, queue.settings)
        self.queue = queue
        self.handler = handler
        self.instance_id = plan.instance_id
        self.ordered = plan.ordered
        self._stats = Counts()
        token = f"{plan.instance_id}:{secrets.token_hex(6)}"
        self._shared = Shared(queue, plan, self._stats,
                              Leases(queue, token, self.settings.lease_ttl),
                              Membership(queue, self.settings.group, plan.instance_id,
                                         self.settings.lease_ttl))
        invoker = Invoker(handler, chain(self.settings.middleware, self.settings.before,
                                         self.settings.after), in_thread=run_in_thread,
                          timeout=self.settings.consume_timeout)
        self._workers = Workers(self._shared, Processor(queue, handler, invoker, plan,
                                                        self._stats, self._shared.leases))
        self._upkeep: Upkeep | None = None
        self._started = False
        self._stopped = False

    def __repr__(self) -> str:
        return (f"<dynoq.asyncio.Consumer {self.queue.name!r} group={self.settings.group!r} "
                f"id={self.instance_id!r}>")

    @property
    def assignment(self) -> set[int]:
        """Shards held now: allocated shards, or (ordered) shards whose lease it holds."""
        s = self._shared
        return s.board.leased() if self.ordered else set(s.preferred)

    def stats(self) -> ConsumerStats:
        return self._stats.snapshot()

    async def start(self) -> Consumer:
        """Join the group, take the first assignment, start the worker tasks. Returns
        self. Raises ConnectionFailed when Redis cannot be reached."""
        if self._started:
            raise DynoqError("this consumer was already started; create a new one")
        self._started = True
        s = self._shared
        if self._joining is not None:
            await s.queue.backend.drive(self._joining)
        # Subscribe before joining, so no join/leave of another member is missed.
        subscription = await s.queue.backend.subscribe(s.membership.channel)
        self._upkeep = Upkeep(s, subscription)
        try:
            await self._upkeep.tick(rebalance=True)
        except BaseException:
            await subscription.close()
            raise
        self._workers.start()
        self._upkeep.start()
        return self

    async def stop(self, timeout: float = 30.0) -> bool:
        """Finish (and ack) in-flight work, release leases, leave the group. False if a
        worker was still busy after ``timeout`` seconds: it is cancelled, and what it had
        not handled goes back to the queue at once."""
        s = self._shared
        if not self._started or self._stopped:
            return True
        self._stopped = True
        s.stopping.set()
        s.board.wake()  # workers waiting for a shard see it at once
        s.idle.wake()
        with contextlib.suppress(DynoqError):  # else they return within idle_wait
            # the worker blocked on the wake-up channel returns at once
            await s.queue.backend.run(Cmd(("PUBLISH", s.queue.ops.wake, "stop")))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        clean = await self._workers.join(timeout)
        if self._upkeep is not None:
            await self._upkeep.stop(deadline - loop.time())
        try:
            if self.ordered:
                for shard in s.board.leased() - s.board.busy():
                    s.board.drop(shard)  # first: assignment never shows a released shard
                    await s.leases.release(shard)
            await s.membership.leave()  # tells the others to rebalance now
        except DynoqError:
            log.warning("dynoq: could not leave the group cleanly; leases and membership "
                        "expire on their own", exc_info=True)
        return clean

    async def run(self) -> None:
        """Start (unless started), wait until SIGINT/SIGTERM or :meth:`stop`, then stop."""
        loop = asyncio.get_running_loop()
        stopping = self._shared.stopping
        signals: list[signal.Signals] = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            # Not in a thread other than the main one, nor on every platform.
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, stopping.set)
                signals.append(sig)
        try:
            if not self._started:
                await self.start()
            await stopping.wait()
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)
            await self.stop()

    async def __aenter__(self) -> Consumer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def is_async(fn: Any) -> bool:
    """Whether calling ``fn`` gives a coroutine (async def, also behind partial or as an
    object's ``async def __call__``)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None))  # noqa: B004 - a callable object's method
