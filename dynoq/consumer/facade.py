"""The push consumer (RocketMQ's model): the object users start, stop and run."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._core import logs
from .._core.callables import refuse_coroutine_function
from .._core.calls import Cmd, Flow
from .._core.consuming import check_mode, for_topic, resolve, settings_of
from .._core.middleware import refuse_async_hooks
from .._core.queue import QueueOps
from ..errors import DynoqError, InvalidType, QueueGone
from ..message import ConsumerStats
from ..queue import Queue
from ..retry import RetryPolicy
from ..settings import ConsumerSettings
from ..signals import StopOnSignals
from ..topic import Topic
from .context import Shared
from .group import Membership
from .lease import Leases
from .middleware import Invoker, chain
from .processing import Processor
from .stats import StatsCounter
from .upkeep import Upkeep
from .workers import Workers

log = logging.getLogger("dynoq.consumer")

_D = ConsumerSettings  # the options' defaults live on its fields


def _check_queue_and_handler(queue: Queue | Topic, handler: Callable[..., Any]) -> None:
    """Refuse what this consumer cannot consume with (before its options are read)."""
    if not isinstance(queue, (Queue, Topic)):
        raise InvalidType(f"queue must be a dynoq Queue or Topic, got {type(queue).__name__}")
    if not callable(handler):
        raise InvalidType(f"handler must be callable, got {type(handler).__name__}")
    refuse_coroutine_function(
        handler,
        "the handler",
        "dynoq.asyncio (await client.queue(...), then client.consumer(q, handler))",
    )


class Consumer:
    """Consume ``queue`` with ``handler`` as one member of a consumer group.

    ``handler(msg)`` returning acks the message; raising retries it after the next of
    ``retry_delays`` (``dynoq.Retry(delay)`` picks the delay, ``dynoq.DeadLetter()``
    dead-letters now) until the queue's ``max_retries`` is spent, then dead-letters it.
    Every option is described on :class:`dynoq.ConsumerSettings`; give them by name or as
    ``settings=`` (not both). ``queue`` may be a :class:`dynoq.Topic`: the group is
    subscribed (tags "*") at start if it is not yet, and ``mode`` says how its members
    share its messages (default: as the group is subscribed, else clustering).
    """

    def __init__(
        self,
        queue: Queue | Topic,
        handler: Callable[..., Any],
        *,
        settings: ConsumerSettings | None = None,
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
        _check_queue_and_handler(queue, handler)
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
        self._stats = StatsCounter()
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
        # The one stop: every stop() (and run()) waits for it to its end, whichever
        # thread began it.
        self._stop_lock = threading.Lock()
        self._stop_begun = False
        self._left = threading.Event()  # the group is left (a handler's stop() returns)
        self._stopped = threading.Event()  # ... and every worker has ended
        self._clean = True

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
        hooks = chain(self.settings.middleware, self.settings.before, self.settings.after)
        refuse_async_hooks(hooks)
        invoker = Invoker(self.handler, hooks)
        self._processor = Processor(
            queue, self.handler, invoker, plan, self._stats, self._shared.leases, self._shared.gate
        )
        self._workers = Workers(self._shared, self._processor)
        self._shared.on_gone = self._stop_soon

    def __repr__(self) -> str:
        return (
            f"<dynoq.Consumer {self.queue.name!r} group={self.settings.group!r} "
            f"id={self.instance_id!r}>"
        )

    @property
    def assignment(self) -> set[int]:
        """Shards held now: allocated shards, or (ordered) shards whose lease it holds."""
        s = self._shared
        return s.board.leased() if self.ordered else set(s.preferred)

    def stats(self) -> ConsumerStats:
        """Counts since the consumer was created (handled, failed, retried, ...)."""
        return self._stats.snapshot()

    @property
    def failure(self) -> QueueGone | None:
        """The QueueGone that stopped this consumer (its queue vanished, or was created
        anew), or None. :meth:`run` raises it."""
        return self._shared.failure

    def _stop_soon(self) -> None:
        # Called by the worker or upkeep thread that met QueueGone: stop() joins those
        # threads, so it runs in one of its own (run() and stop() wait for it).
        threading.Thread(
            target=self.stop, daemon=True, name=f"dynoq-{self.queue.name}-gone"
        ).start()

    def start(self) -> Consumer:
        """Join the group, take the first assignment, start the workers. Returns self.
        Raises ConnectionFailed when Redis cannot be reached."""
        if self._started:
            raise DynoqError("this consumer was already started; create a new one")
        self._started = True
        s = self._shared
        if self._joining is not None:
            mode, ops = s.queue.backend.drive(self._joining)
            self.settings = dataclasses.replace(self.settings, mode=mode)
            if ops.keys != s.queue.ops.keys:  # the group's subscription decided
                self._assemble(Queue(s.queue.backend, ops))
                s = self._shared
        # Subscribe before joining, so no join/leave of another member is missed.
        subscription = s.queue.backend.subscribe(s.membership.channel)
        self._upkeep = Upkeep(s, subscription, self._workers)
        try:
            self._upkeep.tick(rebalance=True)
        except BaseException:
            subscription.close()
            raise
        self._workers.start()
        self._upkeep.start()
        return self

    def stop(self, timeout: float = 30.0) -> bool:
        """Finish (and ack) in-flight work, release leases, leave the group. False if a
        worker was still busy after ``timeout`` seconds (its shards' leases then expire
        on their own, so nobody else handles them meanwhile).

        A second call (or :meth:`run` ending) while a stop is under way in another
        thread waits for that stop to finish and returns its result. A handler may stop
        its own consumer: its call returns once the rest has stopped and the group is
        left (the stop then waits for that handler to return, and its message to be
        settled, before it is finished for everyone else); while another stop is under
        way, a handler's call returns at once (that stop waits for the handler)."""
        me = threading.current_thread()
        with self._stop_lock:
            first = self._started and not self._stop_begun
            self._stop_begun = self._stop_begun or first
        if not self._started:
            return True
        own = self._workers.runs_in(me)
        if first and own:  # it cannot wait for itself: the stop goes on in its own thread
            threading.Thread(
                target=self._stop,
                args=(timeout, me),
                daemon=True,
                name=f"dynoq-{self.queue.name}-stop",
            ).start()
        elif first:
            self._stop(timeout, None)
        elif own:
            return True
        (self._left if own else self._stopped).wait()
        return self._clean

    def _stop(self, timeout: float, caller: threading.Thread | None) -> None:
        deadline = time.monotonic() + timeout
        try:
            try:
                self._clean = self._wind_down(deadline, caller)
            finally:
                self._left.set()
            if caller is not None:  # its handler returns now; then its message is settled
                caller.join(max(deadline - time.monotonic(), 0.0))
                self._clean = self._clean and not caller.is_alive()
                try:
                    self._release_free()
                except DynoqError as exc:
                    logs.error(
                        log,
                        logging.WARNING,
                        "dynoq: could not release the leases of %r; they expire on their own",
                        self.queue.name,
                        exc=exc,
                    )
        finally:
            self._stopped.set()

    def _wind_down(self, deadline: float, caller: threading.Thread | None) -> bool:
        s = self._shared
        s.stopping.set()
        s.board.wake()
        s.idle.wake()
        with contextlib.suppress(DynoqError):  # else they return within idle_wait
            # the worker blocked on the wake-up channel returns at once
            s.queue.backend.run(Cmd(("PUBLISH", s.queue.ops.wake, "stop")))
        clean = self._workers.join(deadline - time.monotonic(), caller)
        if self._upkeep is not None:
            self._upkeep.stop(deadline - time.monotonic())
        keep = None if caller is None else caller.ident
        for _, batch in [] if clean else s.deliveries.abandon_all(keep):
            try:  # finish or give back: nothing stays in flight until its timeout
                self._processor.stopped(batch)
                if batch.shard is not None and s.board.done(batch.shard, found=True):
                    s.leases.release(batch.shard)
            except DynoqError as exc:
                logs.error(
                    log,
                    logging.WARNING,
                    "dynoq: could not give back a batch of %r "
                    "on stop; it returns when its visibility times out",
                    self.queue.name,
                    exc=exc,
                )
        try:
            self._release_free()
            if s.running is not None:
                s.running.release()
            s.membership.leave()  # tells the others to rebalance now
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

    def _release_free(self) -> None:
        """Release the leases of the shards no worker is on (ordered queues); a busy
        shard's lease expires on its own, after its worker's handler returned."""
        s = self._shared
        if self.ordered:
            for shard in s.board.leased() - s.board.busy():
                s.board.drop(shard)  # first: assignment never shows a released shard
                s.leases.release(shard)

    def run(self, stop_timeout: float = 30.0) -> None:
        """Start (unless started), block until SIGINT/SIGTERM or stop() from another
        thread, then stop (``stop_timeout``: see :meth:`stop`); returns when the stop has
        finished (also one that another thread began). Raises QueueGone when the queue
        vanished or was created anew under the consumer (which then stopped)."""
        done = threading.Event()
        try:
            with StopOnSignals(done):
                if not self._started:
                    self.start()
                while not done.wait(0.2) and not self._shared.stopping.is_set():
                    pass
        finally:
            self.stop(stop_timeout)
        if self._shared.failure is not None:
            raise self._shared.failure

    def __enter__(self) -> Consumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
