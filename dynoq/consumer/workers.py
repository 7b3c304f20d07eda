"""The worker threads: pop, handle, settle.

Concurrent queues: every worker pops from every shard, the consumer's allocated shards
first, and handles messages independently. One worker looks at a time, the next as soon
as it is done: overlapping looks raced for the same due messages and passed the GIL back
and forth at every reply (a look of two round trips took 6.5 ms at the median with four
workers at 10,000 messages/s due, benchmarks/bench_delay.py); only a backlog's looks
(after a full batch) overlap, for throughput (consuming.LastLook.in_turn).

Ordered queues: a worker claims one leased shard at a time from the board and handles it
strictly in order; when every free shard was empty, one worker blocks in a pop on behalf
of all of them.

A worker whose handler call ran past consume_timeout is retired (it ends when the call
returns; a thread cannot be stopped) and replaced, while fewer than ``concurrency``
calls are left running so (``_core.board.Abandoned``); at that cap it is not replaced.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable

from .._core import consuming
from .._core.board import Abandoned
from .._core.consuming import MAX_CARRIED, pop_order
from ..errors import DynoqError, LeaseLost, QueueGone
from ..message import Message
from ..retry import backoff
from .context import Shared
from .processing import ABANDONED, BLOCKED, Processor

log = logging.getLogger("dynoq.consumer")

NO_TURN: contextlib.AbstractContextManager[object] = contextlib.nullcontext()


class Workers:
    def __init__(self, shared: Shared, processor: Processor) -> None:
        self.shared = shared
        self.processor = processor
        self._threads: dict[int, threading.Thread] = {}  # by ident
        # Workers left in a handler call past consume_timeout, by ident (they end when
        # the call returns and its batch is settled).
        self._retired: dict[int, threading.Thread] = {}
        self._abandoned = Abandoned(shared.plan.settings.concurrency)
        self._lock = threading.Lock()
        self._count = 0

    def start(self) -> None:
        for _ in range(self.shared.plan.settings.concurrency):
            self._spawn()

    def _spawn(self) -> None:
        s = self.shared
        with self._lock:
            k = self._count
            self._count += 1
            loop = (
                self._ordered_loop
                if s.plan.ordered
                else functools.partial(self._concurrent_loop, k)
            )
            t = threading.Thread(
                target=self._guard, args=(loop,), daemon=True, name=f"dynoq-{s.queue.name}-w{k + 1}"
            )
            t.start()
            assert t.ident is not None
            self._threads[t.ident] = t

    def retire(self, worker: int) -> int | None:
        """A worker's handler call ran past consume_timeout: let the worker end when the
        call returns, and start another in its place. Returns how many calls are left
        running so now, or None at the cap (the worker is not replaced: it goes on when
        its call returns)."""
        with self._lock:
            if worker not in self._threads or not self._abandoned.take():
                return None
            self._retired[worker] = self._threads.pop(worker)
            left = self._abandoned.count
        self.shared.stats.add(abandoned=1)
        if not self.shared.stopping.is_set():
            self._spawn()
        return left

    def runs_in(self, thread: threading.Thread) -> bool:
        """Whether ``thread`` is one of the workers (a handler calling stop())."""
        with self._lock:
            return thread.ident in self._threads or thread.ident in self._retired

    def _active(self) -> bool:
        return not self.shared.stopping.is_set() and threading.get_ident() not in self._retired

    def join(self, timeout: float, caller: threading.Thread | None = None) -> bool:
        """Wait up to ``timeout`` seconds for the workers, and for the calls left running
        past consume_timeout; True if all ended. ``caller``: a worker whose handler asked
        for the stop, which cannot wait for itself (it ends when its handler returns)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            threads = [
                t for t in [*self._threads.values(), *self._retired.values()] if t is not caller
            ]
        for t in threads:
            t.join(max(deadline - time.monotonic(), 0.0))
        return not any(t.is_alive() for t in threads)

    def enforce_timeouts(self) -> None:
        """Every batch whose running handler call went past its timeout (consume_timeout,
        or its task's own: Plan.timeout_of): replace its
        stuck worker (up to the cap of calls left running). Concurrent queues: settle
        it now, the running message failed. Ordered shards: it stays in flight (and
        extended) with its worker, which settles it when the call returns, so nothing
        later of the shard is delivered while the call may still run. (The upkeep calls
        this at every look of its loop.)"""
        s = self.shared
        settings = s.plan.settings
        # A keyed queue's call too: its key stays blocked while the call may still run.
        held = s.plan.ordered or s.queue.ops.keyed
        overdue = s.deliveries.overdue(time.monotonic(), s.plan.timeout_of, ordered=held)
        for worker, batch in overdue:
            s.stats.add(timed_out=1)
            left = self.retire(worker)
            consuming.overran(
                log,
                s.queue.name,
                batch.calling,
                s.plan.timeout_of(batch.calling),
                left=left,
                cap=settings.concurrency,
                shard=batch.shard if s.plan.ordered else None,
                keyed=s.queue.ops.keyed,
            )
            if held:
                continue
            s.in_flight.give(batch.permits)  # the stuck worker no longer counts against the limit
            self.processor.give_up(batch)

    def _guard(self, loop: Callable[[], None]) -> None:
        # A thread must not die on a transient error (a dropped connection): log, back
        # off, go on.
        failures = 0
        try:
            while self._active():
                try:
                    loop()
                    return
                except QueueGone as exc:
                    self.shared.gone(exc)  # no retry can help: the consumer stops
                    return
                except Exception as exc:
                    failures += 1
                    pause = backoff(failures)
                    # Expected (the server away, scripts not installed): one line; the
                    # traceback only at debug level. Anything else is a bug: in full.
                    expected = isinstance(exc, DynoqError)
                    log.log(
                        logging.WARNING if expected else logging.ERROR,
                        "dynoq: consumer worker error; retrying in %.1fs: %s",
                        pause,
                        exc,
                        exc_info=not expected or log.isEnabledFor(logging.DEBUG),
                    )
                    self.shared.stopping.wait(pause)
        finally:
            self.shared.idle.wake()  # if it was the watcher, another worker takes over
            self.shared.queue.backend.release_thread()  # its wake-up subscription
            with self._lock:  # a new thread may get this ident: it is not retired
                retired = self._retired.pop(threading.get_ident(), None) is not None
                if retired:
                    self._abandoned.returned()
            if retired:
                self.shared.stats.add(abandoned=-1)

    def _aside(self, pause: float) -> bool:
        """Whether a streaming source holds the group (it consumes it alone): if so, wait
        ``pause`` seconds, taking nothing."""
        if self.shared.aside:
            self.shared.stopping.wait(pause)
        return self.shared.aside

    def _concurrent_loop(self, k: int = 0) -> None:
        s = self.shared
        sizer, idle = self.processor.sizer, s.plan.settings.idle_wait
        turn = k  # the workers start at different shards
        me = threading.get_ident()
        quiet = False  # Redis Cluster: the last waiting pop ended with nothing found
        last = consuming.LastLook()
        # A keyed queue's hot key: the acks bring the key's next batch (carried, with
        # the permits it holds), at most MAX_CARRIED times in a row, then a look at the
        # whole queue again (round-robin across shards). (A rate limit's permits are
        # taken by the calls, carried or not. Not under max_running: no slots for them.)
        keyed = s.queue.ops.keyed and not s.plan.settings.batch_handler and s.running is None
        carried: list[Message] = []
        streak = held = 0
        while self._active():
            if not carried and self._aside(idle):
                continue
            if carried:
                n, msgs, carried = held, carried, []
            else:
                n, msgs = s.in_flight.take(sizer.size(), idle), []
            if n == 0:
                continue
            batch = None
            try:
                turn += 1
                order = pop_order(s.preferred, s.plan.shards, turn)
                # (it looked first thing: pop waits after a look; carried: no look)
                if not quiet and not msgs:
                    msgs = self._look(n, order, last)
                if msgs:
                    s.idle.found()  # more may be due: one sleeping worker comes to look
                elif s.idle.watch():  # nobody waits on the server: this worker does, for all
                    msgs, quiet = self._watch(n, order, last)
                    if not msgs:
                        continue  # its permits go back below
                else:  # the watcher's finding wakes us; the bound is a safety
                    quiet = False
                    s.in_flight.give(n)
                    n = 0
                    s.idle.sleep(idle * 12)
                    continue
                quiet = False
                batch = s.deliveries.start(me, msgs, permits=n)
                self.processor.concurrently(
                    batch,
                    lambda: s.deliveries.settle(me),
                    s.deliveries.begin,
                    refill=keyed and streak < MAX_CARRIED,
                )
            finally:
                s.finish(me)
                if batch is not None and batch.refilled and not batch.abandoned:
                    carried, held, streak = batch.refilled, n, streak + 1  # permits kept
                else:
                    streak = 0
                    if n and (batch is None or not batch.abandoned):  # else the watchdog did
                        s.in_flight.give(n)
        if carried:  # stopping: what the last acks brought goes back at once
            self._give_back_carried(carried, held)

    def _look(self, n: int, order: list[int], last: consuming.LastLook) -> list[Message]:
        """A look for up to ``n`` due messages on the shards in ``order``, without
        waiting; one worker at a time unless the last look found a backlog (see the
        module docstring). What it saw goes to ``last``."""
        s = self.shared
        with s.looking if last.in_turn else NO_TURN:
            msgs, hint = s.fetch(n, shards=order, backlog=last.full)
        last.saw(len(msgs), n, hint, time.monotonic())
        return msgs

    def _watch(
        self, n: int, order: list[int], last: consuming.LastLook
    ) -> tuple[list[Message], bool]:
        """The watcher's wait on the server, for all the workers (none of them found
        anything): up to ``n`` messages, and whether the queue is quiet (the pop, which
        looks first, found nothing: the next turn waits at once, without a look)."""
        s = self.shared
        idle = s.plan.settings.idle_wait
        # see Planner.fetch; under max_running a waiting pop would hold slots meanwhile
        probing = (s.queue.ops.cross_slot and s.plan.shards > 1) or s.running is not None
        msgs: list[Message] = []
        try:
            if not probing:  # unlike Redis Cluster, the pop waits (and looks first)
                # back after a wake-up, found or not: a stop's wakes it too
                msgs = s.pop(n, wait=idle, shards=order, until_woken=True)
            else:  # until a wake-up or the due time; then look, next turn
                # (also after a quiet idle_wait: one probe, a safety net)
                s.wait(last.nap(time.monotonic(), idle))
        finally:
            s.idle.done_watching(found=bool(msgs))
        return msgs, not probing and not msgs

    def _give_back_carried(self, carried: list[Message], held: int) -> None:
        """Stopping: the messages the last acks brought (a keyed queue's hot key) go back
        at once, unhandled, and the ``held`` permits they held with them."""
        with contextlib.suppress(DynoqError):  # they expire and come again
            self.processor.give_back(carried)
        self.shared.in_flight.give(held)

    def _ordered_loop(self) -> None:
        s = self.shared
        idle = s.plan.settings.idle_wait
        while self._active():
            shards, waiting = s.board.claim(idle)
            if not self._active() or not shards or not waiting:
                for shard in shards:
                    self._run_shard(shard, None)
                continue
            # Every free shard was empty: block on their behalf for one message (under
            # max_running for a wake-up: a waiting pop would hold a slot meanwhile).
            if s.running is not None:
                woke = not s.wait(idle)
                self._finish_all(shards, None if woke else False)
                continue
            try:
                msgs = s.pop(1, wait=idle, shards=shards, until_woken=True)
            except LeaseLost:
                msgs = []
                s.check_leases(shards)
            except BaseException:
                self._finish_all(shards, None)
                raise
            got = {m.shard for m in msgs}
            self._finish_all([s for s in shards if s not in got], None if msgs else False)
            for m in msgs:
                assert m.shard is not None
                self._run_shard(m.shard, [m])

    def _run_shard(self, shard: int, first: list[Message] | None) -> None:
        """Handle ``shard`` in order until it is empty, blocked, lost, or others wait
        longer than max_continuous_time; then hand it back to the board."""
        s = self.shared
        settings = s.plan.settings
        started = time.monotonic()
        me = threading.get_ident()
        msgs, found, abandoned = first, True, False
        tenure = first[0].fence if first else None  # of the lease the work is done in
        try:
            while True:
                if msgs is None:
                    if not self._active() or not s.board.still_mine(shard):
                        break
                    if time.monotonic() - started > settings.max_continuous_time:
                        s.board.wake()  # look at the other shards again, then come back
                        break
                    n = 1 if s.board.is_retrying(shard) else self.processor.sizer.size()
                    tenure = s.leases.tenures([shard])[shard]
                    msgs = s.pop(n, shards=[shard])
                    if not msgs:
                        found = False  # empty, or blocked by an earlier retry
                        break
                batch = s.deliveries.start(me, msgs, shard)
                outcome = self.processor.orderly(batch, lambda: s.deliveries.settle(me))
                if outcome == ABANDONED:
                    abandoned = True  # a stop that ran out of time gave it back
                    return
                s.finish(me)  # its slots (max_running) go back before the next pop
                s.board.set_retrying(shard, outcome == BLOCKED)
                if outcome == BLOCKED:
                    found = False  # nothing deliverable until the suspend ends
                    break
                msgs = None
        except LeaseLost as exc:
            s.stats.add(lease_lost=1)
            if s.leases.ended(shard, tenure):
                s.board.drop(shard)
                log.warning("dynoq: %s; dropped the shard", exc)
            else:  # the upkeep took the shard again meanwhile: that lease goes on
                log.info("dynoq: %s; the shard's newer lease goes on", exc)
        finally:
            s.finish(me)
            if not abandoned:
                self._finish(shard, found)

    def _finish(self, shard: int, found: bool | None) -> None:
        self._finish_all([shard], found)

    def _finish_all(self, shards: list[int], found: bool | None) -> None:
        for shard in self.shared.board.done_all(shards, found):  # moved away meanwhile
            self.shared.release(shard)
