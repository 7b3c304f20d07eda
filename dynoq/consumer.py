"""The push consumer (RocketMQ's model): worker threads, a consumer group, rebalance.

Concurrent queues: every worker pops from every shard, the consumer's allocated shards
first, and handles messages independently (a failure is retried later). Ordered queues:
the consumer holds a lease per allocated shard and a shard is handled by one worker at a
time, strictly in order (a failure blocks its shard and is retried in place).

One maintenance thread heartbeats the group, renews leases, extends slow deliveries and
rebalances every ``rebalance_interval`` and at once when the group changes (pub/sub).
"""

from __future__ import annotations

import logging
import math
import random
import secrets
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from .consumer_options import make_options
from .errors import DynoqError, InvalidType, LeaseLost
from .group import Membership
from .hooks import ConsumerStats, Invoker, StatsCounter
from .lease import Leases
from .message import Message
from .processing import BLOCKED, Processor
from .queue import Queue
from .shard_board import InFlight, ShardBoard, pop_order

log = logging.getLogger("dynoq.consumer")

PUBSUB_TICK = 0.25  # longest local wait on the group channel (no server command)


class Consumer:
    """Consume ``queue`` with ``handler`` as one member of consumer group ``group``.

    ``handler(msg)`` returning acks the message; raising retries it after the next of
    ``retry_delays`` (``dynoq.Retry(delay)`` picks the delay, ``dynoq.DeadLetter()``
    dead-letters now) until the queue's ``max_retries`` is spent, then dead-letters it.
    Options (keyword-only): group, concurrency (worker threads), batch_size (messages per
    pop), batch_handler (handler gets the popped list), max_in_flight (flow control),
    strategy (+ strategy_options), retry_delays, lease_ttl, rebalance_interval,
    instance_id, mode ("clustering"), max_continuous_time (ordered: seconds a worker
    stays on one shard while others wait), idle_wait, visibility, before/after hooks and
    middleware (:class:`dynoq.hooks.Middleware` objects).
    """

    def __init__(self, queue: Queue, handler: Callable[..., Any], **options: Any) -> None:
        if not isinstance(queue, Queue):
            raise InvalidType(f"queue must be a dynoq Queue, got {type(queue).__name__}")
        if not callable(handler):
            raise InvalidType(f"handler must be callable, got {type(handler).__name__}")
        try:
            self.options = make_options(ordered=queue.settings.ordered,
                                        shards=queue.settings.shards, **options)
        except TypeError as exc:
            if isinstance(exc, DynoqError):
                raise
            raise InvalidType(f"bad consumer option: {exc}") from None
        o = self.options
        self.queue = queue
        self.handler = handler
        self.ordered = queue.settings.ordered
        self.instance_id = o.instance_id
        self._stats = StatsCounter()
        self._processor = Processor(queue, handler, Invoker(handler, o.middleware), o.retry,
                                    self._stats, batch_handler=o.batch_handler)
        self._membership = Membership(queue.client, queue.name, o.group, o.instance_id,
                                      ttl=o.lease_ttl)
        self._leases = Leases(queue, f"{o.instance_id}:{secrets.token_hex(6)}", o.lease_ttl)
        self._board = ShardBoard()
        self._flow = InFlight(o.max_in_flight)
        self._preferred: list[int] = []  # concurrent queues: the allocated shards
        self._wanted: set[int] = set()  # ordered queues: shards to lease
        self._retrying: set[int] = set()  # ordered shards waiting for an in-place retry
        self._inflight: dict[int, tuple[float, list[Message]]] = {}  # per worker thread
        self._stopping = threading.Event()
        self._maint_stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._maint: threading.Thread | None = None
        self._started = False
        self._next_acquire = math.inf
        self._pubsub: Any = None

    def __repr__(self) -> str:
        return (f"<dynoq.Consumer {self.queue.name!r} group={self.options.group!r} "
                f"id={self.instance_id!r}>")

    # -- public ------------------------------------------------------------------------

    @property
    def assignment(self) -> set[int]:
        """Shards held now: allocated shards, or (ordered) shards whose lease it holds."""
        return self._board.held() if self.ordered else set(self._preferred)

    def stats(self) -> ConsumerStats:
        return self._stats.snapshot()

    def start(self) -> Consumer:
        """Join the group, take the first assignment, start the workers. Returns self."""
        if self._started:
            raise DynoqError("this consumer was already started; create a new one")
        self._started = True
        # Subscribe before joining, so no join/leave of another member is missed.
        self._pubsub = self._subscribe()
        self._tick(rebalance=True)
        name = f"dynoq-{self.queue.name}"
        loop = self._ordered_loop if self.ordered else self._concurrent_loop
        self._threads = [threading.Thread(target=self._guard, args=(loop, self._stopping),
                                          daemon=True, name=f"{name}-w{i}")
                         for i in range(self.options.concurrency)]
        self._maint = threading.Thread(target=self._guard, args=(self._maintain, self._maint_stop),
                                       daemon=True, name=f"{name}-maint")
        for t in [*self._threads, self._maint]:
            t.start()
        return self

    def stop(self, timeout: float = 30.0) -> bool:
        """Finish (and ack) in-flight work, release leases, leave the group. False if a
        worker was still busy after ``timeout`` seconds (its shards' leases then expire
        on their own, so nobody else handles them meanwhile)."""
        if not self._started or self._stopping.is_set():
            return True
        self._stopping.set()
        self._board.wake()  # workers blocked in pop(wait=...) see it within idle_wait
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(deadline - time.monotonic(), 0.0))
        clean = not any(t.is_alive() for t in self._threads)
        self._maint_stop.set()
        if self._maint is not None:
            self._maint.join(max(deadline - time.monotonic(), PUBSUB_TICK * 4))
        try:
            if self.ordered:
                for s in self._board.held() - self._board.busy():
                    self._board.drop(s)  # first: assignment never shows a released shard
                    self._leases.release(s)
            self._membership.leave()  # tells the others to rebalance now
        except DynoqError:
            log.warning("dynoq: could not leave the group cleanly; leases and membership "
                        "expire on their own", exc_info=True)
        return clean

    def run(self) -> None:
        """Start (unless started), block until SIGINT/SIGTERM or stop() from another
        thread, then stop."""
        done = threading.Event()
        previous: dict[signal.Signals, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous[sig] = signal.signal(sig, lambda *_: done.set())
        try:
            if not self._started:
                self.start()
            while not done.wait(0.2) and not self._stopping.is_set():
                pass
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.stop()

    def __enter__(self) -> Consumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- workers -----------------------------------------------------------------------

    def _guard(self, loop: Callable[[], None], stop: threading.Event) -> None:
        # A thread must not die on a transient error (a dropped connection): log, back
        # off, go on.
        try:
            while not stop.is_set():
                try:
                    loop()
                    return
                except Exception:
                    log.exception("dynoq: consumer thread error; retrying in 1 s")
                    stop.wait(1.0)
        finally:
            self.queue.client.waiter.release()  # this thread's wake-up subscription

    def _concurrent_loop(self) -> None:
        o = self.options
        turn = random.randrange(1 << 16)
        ident = threading.get_ident()
        while not self._stopping.is_set():
            n = self._flow.take(o.batch_size, o.idle_wait)
            if n == 0:
                continue
            try:
                turn += 1
                order = pop_order(self._preferred, self.queue.settings.shards, turn)
                msgs = self.queue.pop(n, wait=o.idle_wait, shards=order,
                                      visibility=o.visibility)
                if msgs:
                    self._inflight[ident] = (time.monotonic(), msgs)
                    self._processor.concurrently(msgs)
            finally:
                self._inflight.pop(ident, None)
                self._flow.give(n)

    def _ordered_loop(self) -> None:
        o = self.options
        while not self._stopping.is_set():
            shards, waiting = self._board.claim(o.idle_wait)
            if self._stopping.is_set() or not shards or not waiting:
                for s in shards:
                    self._run_shard(s, None)
                continue
            # Every free shard was empty: block on their behalf for one message.
            try:
                msgs = self.queue.pop(1, wait=o.idle_wait, shards=shards,
                                      lease=self._leases.token, visibility=o.visibility)
            except LeaseLost:
                msgs = []
                self._check_leases(shards)
            except BaseException:
                for s in shards:
                    self._finish(s, None)
                raise
            got = {m.shard for m in msgs}
            for s in shards:
                if s not in got:
                    self._finish(s, found=None if msgs else False)
            for m in msgs:
                assert m.shard is not None
                self._run_shard(m.shard, [m])

    def _run_shard(self, shard: int, first: list[Message] | None) -> None:
        """Handle ``shard`` in order until it is empty, blocked, lost, or others wait
        longer than max_continuous_time; then hand it back to the board."""
        o = self.options
        started = time.monotonic()
        ident = threading.get_ident()
        msgs, found = first, True
        try:
            while True:
                if msgs is None:
                    if self._stopping.is_set() or not self._board.still_mine(shard):
                        break
                    if time.monotonic() - started > o.max_continuous_time:
                        self._board.wake()  # look at the other shards again, then come back
                        break
                    n = 1 if shard in self._retrying else o.batch_size
                    msgs = self.queue.pop(n, shards=[shard], lease=self._leases.token,
                                          visibility=o.visibility)
                    if not msgs:
                        found = False  # empty, or blocked by an earlier retry
                        break
                self._inflight[ident] = (time.monotonic(), msgs)
                if self._processor.orderly(msgs) == BLOCKED:
                    self._retrying.add(shard)
                    found = False  # nothing deliverable until the suspend ends
                    break
                self._retrying.discard(shard)
                msgs = None
        except LeaseLost:
            self._stats.add(lease_lost=1)
            self._board.drop(shard)
            log.warning("dynoq: lease on shard %d of %r lost; dropped it", shard,
                        self.queue.name)
        finally:
            self._inflight.pop(ident, None)
            self._finish(shard, found)

    def _finish(self, shard: int, found: bool | None) -> None:
        if self._board.done(shard, found):  # it moved away while we were on it
            self._leases.release(shard)
            self._membership.notify()

    def _check_leases(self, shards: list[int]) -> None:
        for s in self._leases.renew(shards):
            self._stats.add(lease_lost=1)
            self._board.drop(s)

    # -- maintenance: heartbeat, leases, rebalance -------------------------------------

    def _subscribe(self) -> Any:
        pubsub = self.queue.client.redis.pubsub(ignore_subscribe_messages=True)
        pubsub.subscribe(self._membership.keys.channel)
        pubsub.get_message(timeout=1.0)  # reads the confirmation: subscribed from now on
        return pubsub

    def _maintain(self) -> None:
        o = self.options
        pubsub, self._pubsub = self._pubsub or self._subscribe(), None
        try:
            next_beat = time.monotonic() + o.heartbeat_interval
            next_rebalance = time.monotonic() + o.rebalance_interval
            notified = False
            while not self._maint_stop.is_set():
                now = time.monotonic()
                beat, rebalance = now >= next_beat, notified or now >= next_rebalance
                if beat or rebalance:
                    changed = self._tick(rebalance=rebalance)
                    next_beat = now + o.heartbeat_interval
                    if rebalance or changed:
                        next_rebalance = now + o.rebalance_interval
                if now >= self._next_acquire:
                    self._acquire()
                wait = min(next_beat, next_rebalance, self._next_acquire) - time.monotonic()
                notified = pubsub.get_message(timeout=min(max(wait, 0.0), PUBSUB_TICK))
                while notified and pubsub.get_message(timeout=0.0):
                    pass  # one rebalance for a burst of notifications
                notified = bool(notified)
        finally:
            pubsub.close()

    def _tick(self, *, rebalance: bool) -> bool:
        """Heartbeat, renew leases, extend slow deliveries; rebalance when asked or when
        the group changed. Returns whether it rebalanced."""
        changed, members = self._membership.heartbeat()
        if self.ordered:
            self._check_leases(sorted(self._board.held()))
        self._extend_slow()
        if rebalance or changed:
            self._rebalance(members)
        return rebalance or changed

    def _rebalance(self, members: list[str]) -> None:
        me, shards = self.instance_id, list(range(self.queue.settings.shards))
        target = set(self.options.strategy(shards, members, me,
                                           **self.options.strategy_options)
                     if me in members else [])
        self._stats.add(rebalances=1)
        if not self.ordered:
            self._preferred = sorted(target)
            return
        self._wanted = target
        released = False
        for s in sorted(self._board.held()):
            if s in target:
                self._board.reclaim(s)
            elif self._board.move_away(s):  # else released when its worker is done
                self._leases.release(s)
                released = True
        if released:
            self._membership.notify()
        self._acquire()

    def _acquire(self) -> None:
        """Try to lease wanted shards; retry when the other holder's lease may end."""
        held = self._board.held()
        retry_in = math.inf
        for s in sorted(self._wanted - held):
            if self._stopping.is_set():
                break
            wait = self._leases.acquire(s)
            if wait == 0.0:
                self._retrying.discard(s)
                self._board.add(s)
            else:
                retry_in = min(retry_in, wait + 0.005)
        self._next_acquire = time.monotonic() + min(retry_in,
                                                    self.options.heartbeat_interval) \
            if retry_in < math.inf else math.inf

    def _extend_slow(self) -> None:
        # Keep slow handlers' messages invisible to others (and ordered shards blocked).
        vis = self.options.visibility or self.queue.settings.unack_timeout
        now = time.monotonic()
        for ident, (since, msgs) in list(self._inflight.items()):
            if now - since < vis / 3:
                continue
            if self._inflight.get(ident, (0.0, None))[1] is not msgs:
                continue  # the worker just finished it
            self._inflight[ident] = (now, msgs)
            for m in msgs:
                try:
                    self.queue.extend(m, vis)
                except LeaseLost:
                    break

