"""The push consumer for asyncio: the object users start, stop and run."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import secrets
import signal
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..._core import logs
from ..._core.callables import is_coroutine_function
from ..._core.calls import Cmd, Flow
from ..._core.consuming import Counts, check_mode, for_topic, resolve, settings_of
from ..._core.middleware import chain
from ..._core.queue import QueueOps
from ...errors import DynoqError, InvalidType, QueueGone
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


def _check_queue_and_handler(
    queue: Queue | Topic, handler: Callable[..., Any], run_in_thread: bool
) -> None:
    """Refuse what this consumer cannot consume with (before its options are read): the
    handler is async def, or sync with ``run_in_thread``."""
    if not isinstance(queue, (Queue, Topic)):
        raise InvalidType(
            f"queue must be a dynoq.asyncio Queue or Topic, got {type(queue).__name__}"
        )
    if not callable(handler):
        raise InvalidType(f"handler must be callable, got {type(handler).__name__}")
    if not isinstance(run_in_thread, bool):
        raise InvalidType("run_in_thread must be a bool")
    if run_in_thread == is_coroutine_function(handler):
        raise InvalidType(
            "run_in_thread=True is for a sync handler; this one is async def"
            if run_in_thread
            else f"handler {getattr(handler, '__name__', handler)!r} is not async def: a "
            "sync handler would block the event loop. Make it async def, or pass "
            "run_in_thread=True to run it in a thread"
        )


class Consumer:
    """Consume ``queue`` with ``async def handler(msg)`` as one member of a consumer group
    (see :class:`dynoq.Consumer`: the same options, given by name or as ``settings=``,
    with the same defaults; ``concurrency`` is the number of worker tasks).

    A sync handler is refused, since it would block the event loop; with
    ``run_in_thread=True`` it runs in a thread of the loop's default executor instead.
    Middleware hooks may be sync or ``async def``. ``queue`` may be a
    :class:`dynoq.asyncio.Topic`: the group is subscribed (tags "*") at start if it is
    not yet, and ``mode`` says how its members share its messages (default: as the group
    is subscribed, else clustering).
    """

    def __init__(
        self,
        queue: Queue | Topic,
        handler: Callable[..., Any],
        *,
        settings: ConsumerSettings | None = None,
        run_in_thread: bool = False,
        group: str = _D.group,
        concurrency: int = _D.concurrency,
        batch_size: int | str = _D.batch_size,
        batch_handler: bool = _D.batch_handler,
        max_in_flight: int | None = _D.max_in_flight,
        strategy: str | Callable[..., list[int]] = _D.strategy,
        strategy_options: Mapping[str, Any] | None = _D.strategy_options,
        retry_delays: Sequence[float] | RetryPolicy | None = _D.retry_delays,
        max_retries: int | None = _D.max_retries,
        lease_ttl: float = _D.lease_ttl,
        rebalance_interval: float = _D.rebalance_interval,
        instance_id: str | None = _D.instance_id,
        mode: str | None = _D.mode,
        max_continuous_time: float = _D.max_continuous_time,
        idle_wait: float = _D.idle_wait,
        visibility: float | None = _D.visibility,
        consume_timeout: float = _D.consume_timeout,
        rate_limit: tuple[int, float] | None = _D.rate_limit,
        before: Callable[..., Any] | None = _D.before,
        after: Callable[..., Any] | None = _D.after,
        middleware: Sequence[Any] = _D.middleware,
    ) -> None:
        _check_queue_and_handler(queue, handler, run_in_thread)
        named = dict(
            group=group,
            concurrency=concurrency,
            batch_size=batch_size,
            batch_handler=batch_handler,
            max_in_flight=max_in_flight,
            strategy=strategy,
            strategy_options=strategy_options,
            retry_delays=retry_delays,
            max_retries=max_retries,
            lease_ttl=lease_ttl,
            rebalance_interval=rebalance_interval,
            instance_id=instance_id,
            mode=mode,
            max_continuous_time=max_continuous_time,
            idle_wait=idle_wait,
            visibility=visibility,
            consume_timeout=consume_timeout,
            rate_limit=rate_limit,
            before=before,
            after=after,
            middleware=middleware,
        )
        self.settings = settings_of(settings, named)
        self.handler = handler
        self._in_thread = run_in_thread
        self._stats = Counts()
        self._assemble(self._queue_to_consume(queue))
        self._init_lifecycle()

    def _queue_to_consume(self, queue: Queue | Topic) -> Queue:
        """``queue``, or a topic's queue for this member's group in its mode (as far as
        it is known before the start: see ``_joining``)."""
        # a topic's subscription, read (and made if needed) at start
        self._joining: Flow[tuple[str, QueueOps]] | None = None
        if isinstance(queue, Topic):
            self.settings, ops, self._joining = for_topic(self.settings, queue.ops)
            queue = Queue(queue.backend, ops)
        check_mode(self.settings, queue.ops)
        return queue

    def _init_lifecycle(self) -> None:
        """Not started, no stop begun: the state start() and stop() go through (a
        consumer starts once, and stops once)."""
        self._upkeep: Upkeep | None = None
        self._started = False
        # The one stop: every stop() (and run()) awaits it to its end, wherever it
        # started; a handler that began it awaits only its first part (``_left``).
        self._stopping: asyncio.Future[bool] | None = None
        self._left: asyncio.Future[bool] | None = None
        self._gone_stop: asyncio.Task[bool] | None = None  # see _stop_soon

    def _assemble(self, queue: Queue) -> None:
        """The parts that consume ``queue``; made again at start when a topic's group is
        subscribed in another mode than its consumer assumed (nothing ran yet)."""
        plan = resolve(self.settings, queue.settings)
        self.queue = queue
        self.instance_id = plan.instance_id
        self.ordered = plan.ordered
        token = f"{plan.instance_id}:{secrets.token_hex(6)}"
        self._shared = Shared(
            queue,
            plan,
            self._stats,
            Leases(queue, token, self.settings.lease_ttl),
            Membership(queue, self.settings.group, plan.instance_id, self.settings.lease_ttl),
        )
        # A sync handler's pool: a thread per worker, and one per call that may be left
        # running past consume_timeout (at most concurrency: see Workers.overran).
        self._invoker = Invoker(
            self.handler,
            chain(self.settings.middleware, self.settings.before, self.settings.after),
            threads=2 * self.settings.concurrency if self._in_thread else 0,
            timeout=self.settings.consume_timeout,
            name=f"dynoq-{queue.name}",
            timeout_of=plan.timeout_of if plan.own_timeouts else None,
        )
        self._workers = Workers(
            self._shared,
            Processor(
                queue,
                self.handler,
                self._invoker,
                plan,
                self._stats,
                self._shared.leases,
                self._shared.gate,
            ),
        )
        self._shared.on_gone = self._stop_soon

    def __repr__(self) -> str:
        return (
            f"<dynoq.asyncio.Consumer {self.queue.name!r} group={self.settings.group!r} "
            f"id={self.instance_id!r}>"
        )

    @property
    def assignment(self) -> set[int]:
        """Shards held now: allocated shards, or (ordered) shards whose lease it holds."""
        s = self._shared
        return s.board.leased() if self.ordered else set(s.preferred)

    def stats(self) -> ConsumerStats:
        return self._stats.snapshot()

    @property
    def failure(self) -> QueueGone | None:
        """The QueueGone that stopped this consumer (its queue vanished, or was created
        anew), or None. :meth:`run` raises it."""
        return self._shared.failure

    def _stop_soon(self) -> None:
        # Called by the worker or upkeep task that met QueueGone: stop() waits for those
        # tasks, so it runs in a task of its own (run() and stop() await it).
        self._gone_stop = asyncio.get_running_loop().create_task(
            self.stop(), name=f"dynoq-{self.queue.name}-gone"
        )

    async def start(self) -> Consumer:
        """Join the group, take the first assignment, start the worker tasks. Returns
        self. Raises ConnectionFailed when Redis cannot be reached."""
        if self._started:
            raise DynoqError("this consumer was already started; create a new one")
        self._started = True
        s = self._shared
        if self._joining is not None:
            mode, ops = await s.queue.backend.drive(self._joining)
            self.settings = dataclasses.replace(self.settings, mode=mode)
            if ops.keys != s.queue.ops.keys:  # the group's subscription decided
                self._assemble(Queue(s.queue.backend, ops))
                s = self._shared
        # Subscribe before joining, so no join/leave of another member is missed.
        subscription = await s.queue.backend.subscribe(s.membership.channel)
        self._upkeep = Upkeep(s, subscription, self._workers)
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
        not handled goes back to the queue at once.

        A second call (or :meth:`run` ending) while a stop is under way waits for that
        stop to finish and returns its result. The stop runs in a task of its own:
        cancelling a caller does not cut it short. A handler may stop its own consumer:
        its call returns once the rest has stopped and the group is left (the stop then
        waits for that handler to return, and its message to be settled, before it is
        finished for everyone else); while another stop is under way, a handler's call
        returns at once (that stop waits for the handler)."""
        if not self._started:
            return True
        me = asyncio.current_task()
        own = self._workers.runs(me)
        if self._stopping is None:
            self._left = asyncio.get_running_loop().create_future()
            self._stopping = asyncio.ensure_future(self._stop(timeout, me if own else None))
        elif own:
            return True
        assert self._left is not None
        return await asyncio.shield(self._left if own else self._stopping)

    async def _stop(self, timeout: float, caller: asyncio.Task[Any] | None) -> bool:
        assert self._left is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        clean = False
        try:
            clean = await self._wind_down(deadline, caller)
        finally:
            self._left.set_result(clean)
            if caller is None:
                self._invoker.close()
        if caller is not None:  # its handler returns now; then its message is settled
            ended, _ = await asyncio.wait([caller], timeout=max(deadline - loop.time(), 0.0))
            clean = clean and bool(ended)
            self._invoker.close()
            try:
                await self._release_free()
            except DynoqError as exc:
                logs.error(
                    log,
                    logging.WARNING,
                    "dynoq: could not release the leases of %r; they expire on their own",
                    self.queue.name,
                    exc=exc,
                )
        return clean

    async def _wind_down(self, deadline: float, caller: asyncio.Task[Any] | None) -> bool:
        s = self._shared
        s.stopping.set()
        s.board.wake()  # workers waiting for a shard see it at once
        s.idle.wake()
        with contextlib.suppress(DynoqError):  # else they return within idle_wait
            # the worker blocked on the wake-up channel returns at once
            await s.queue.backend.run(Cmd(("PUBLISH", s.queue.ops.wake, "stop")))
        loop = asyncio.get_running_loop()
        clean = await self._workers.join(deadline - loop.time(), caller)
        if self._upkeep is not None:
            await self._upkeep.stop(deadline - loop.time())
        try:
            await self._release_free()
            if s.running is not None:
                await s.running.release()
            await s.membership.leave()  # tells the others to rebalance now
        except DynoqError as exc:
            logs.error(
                log,
                logging.WARNING,
                "dynoq: could not leave the group of %r "
                "cleanly; leases and membership expire on their own",
                self.queue.name,
                exc=exc,
            )
        return clean

    async def _release_free(self) -> None:
        """Release the leases of the shards no worker is on (ordered queues); a busy
        shard's lease expires on its own."""
        s = self._shared
        if self.ordered:
            for shard in s.board.leased() - s.board.busy():
                s.board.drop(shard)  # first: assignment never shows a released shard
                await s.leases.release(shard)

    async def run(self, stop_timeout: float = 30.0) -> None:
        """Start (unless started), wait until SIGINT/SIGTERM or :meth:`stop`, then stop
        (``stop_timeout``: see :meth:`stop`); returns when the stop has finished (also
        one that another task began). Raises
        QueueGone when the queue vanished or was created anew under the consumer (which
        then stopped)."""
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
            await self.stop(stop_timeout)
        if self._shared.failure is not None:
            raise self._shared.failure

    async def __aenter__(self) -> Consumer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
