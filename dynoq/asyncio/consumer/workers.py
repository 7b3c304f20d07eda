"""The worker tasks: pop, handle, settle (the loops of ``dynoq.consumer.workers``, as
tasks: ``concurrency`` tasks share the event loop, so a handler that awaits lets the
others run).

Concurrent queues: every worker pops from every shard, the consumer's allocated shards
first; when the queue is empty one worker waits on the server for all (IdleGate).
Ordered queues: a worker claims one leased shard at a time from the board and handles it
strictly in order; when every free shard was empty, one worker waits in a pop on behalf
of all of them.

A coroutine handler past consume_timeout is cancelled (and has ended when its worker goes
on). A sync handler's thread cannot be stopped (``overran``): on a concurrent queue its
call is left running and its message fails at once; on an ordered shard its worker waits
for it, so that nothing later of the shard is delivered meanwhile, and another worker
task takes its place. At most ``concurrency`` calls are left running so (the thread
consumer's rule, ``_core.board.Abandoned``); at that cap a worker waits for its call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..._core import consuming
from ..._core.board import Abandoned, InFlightBatch
from ..._core.consuming import MAX_CARRIED, pop_order
from ...errors import DynoqError, LeaseLost, QueueGone
from ...message import Message
from ..events import wait_event
from .context import Shared
from .processing import Processor

log = logging.getLogger("dynoq.consumer")

NO_TURN: contextlib.AbstractAsyncContextManager[object] = contextlib.nullcontext()
ERROR_PAUSE = 1.0  # seconds a worker waits after an unexpected error


class Workers:
    def __init__(self, shared: Shared, processor: Processor) -> None:
        self.shared = shared
        self.processor = processor
        self._tasks: list[asyncio.Task[None]] = []
        # Ordered: workers waiting for a thread past consume_timeout while another took
        # their place (they end when its batch is settled).
        self._retired: set[asyncio.Task[Any]] = set()
        # Concurrent: sync handler calls left running past consume_timeout.
        self._left_running: set[asyncio.Future[Any]] = set()
        self._abandoned = Abandoned(shared.plan.settings.concurrency)
        self._count = 0
        processor.invoker.on_overrun = self.overran

    def start(self) -> None:
        for _ in range(self.shared.plan.settings.concurrency):
            self._spawn()

    def _spawn(self) -> None:
        s = self.shared
        loop = self._ordered_loop if s.plan.ordered else self._concurrent_loop
        k, self._count = self._count, self._count + 1
        self._tasks.append(
            asyncio.create_task(self._guard(loop, k), name=f"dynoq-{s.queue.name}-w{k}")
        )

    def runs(self, task: asyncio.Task[Any] | None) -> bool:
        """Whether ``task`` is one of the workers (a handler calling stop())."""
        return task is not None and (task in self._tasks or task in self._retired)

    def _active(self) -> bool:
        return not self.shared.stopping.is_set() and asyncio.current_task() not in self._retired

    async def overran(self, call: asyncio.Future[Any] | None, msgs: Sequence[Message]) -> None:
        """A handler call ran past consume_timeout; its message fails when this returns.
        ``call``: a sync handler's call, still running in its thread (None: a coroutine,
        cancelled, or a thread call that had not started)."""
        s = self.shared
        settings = s.plan.settings
        s.stats.add(timed_out=1)
        if call is None or call.done():
            return
        me = asyncio.current_task()
        # A keyed queue's call too: its key stays blocked while the call may still run.
        ordered = s.plan.ordered or s.queue.ops.keyed
        left = None
        if (not ordered or me in self._tasks) and self._abandoned.take():
            left = self._abandoned.count
            s.stats.add(abandoned=1)
        seconds = s.plan.timeout_of(msgs)
        consuming.overran(
            log,
            s.queue.name,
            msgs,
            seconds,
            left=left,
            cap=settings.concurrency,
            shard=msgs[0].shard if s.plan.ordered and msgs else None,
            keyed=s.queue.ops.keyed,
        )
        t0 = time.monotonic()

        def returned(_: object = None) -> None:
            consuming.returned(log, s.queue.name, msgs, seconds + time.monotonic() - t0)
            self._left_running.discard(call)
            if left is not None:
                self._abandoned.returned()
                s.stats.add(abandoned=-1)

        if left is not None and not ordered:  # left running: this worker goes on
            self._left_running.add(call)
            call.add_done_callback(returned)
            return
        if left is not None and me is not None:  # another worker takes this one's place
            self._tasks.remove(me)
            self._retired.add(me)
            me.add_done_callback(self._retired.discard)
            if not s.stopping.is_set():
                self._spawn()
        try:
            await asyncio.wait([call])  # the shard stays blocked (or: at the cap)
        except asyncio.CancelledError:  # a stop ran out of time: the call ends later
            call.add_done_callback(returned)
            raise
        returned()

    async def join(self, timeout: float, caller: asyncio.Task[Any] | None = None) -> bool:
        """Wait up to ``timeout`` seconds for the workers (also those waiting for a call
        past consume_timeout) and the calls left running; True if all ended. Workers
        still busy then are cancelled (their batches go back at once, unhandled); a
        call left running cannot be. ``caller``: a worker whose handler asked for the
        stop, which cannot wait for itself (it ends when its handler returns)."""
        tasks = [t for t in [*self._tasks, *self._retired] if t is not caller]
        waited: list[asyncio.Future[Any]] = [*tasks, *self._left_running]
        if not waited:
            return True
        _, busy = await asyncio.wait(waited, timeout=max(timeout, 0.0))
        stuck = [t for t in tasks if t in busy]
        for t in stuck:
            t.cancel()
        if stuck:
            await asyncio.wait(stuck)
        return not busy

    def enforce_timeouts(self) -> None:
        """Nothing to do here: a coroutine handler's call past consume_timeout is
        cancelled where it runs (events.Watch), and a sync handler's thread is dealt
        with when its call overruns (:meth:`overran`). The thread consumer's workers
        replace a stuck worker here, called by the upkeep at every look of its loop."""

    async def _guard(self, loop: Callable[[int], Awaitable[None]], me: int) -> None:
        # A task must not die on a transient error (a dropped connection): log, back
        # off, go on.
        stopping = self.shared.stopping
        try:
            while not stopping.is_set():
                try:
                    await loop(me)
                    return
                except QueueGone as exc:
                    self.shared.gone(exc)  # no retry can help: the consumer stops
                    return
                except Exception as exc:
                    # As the thread consumer's: an expected error in one line.
                    expected = isinstance(exc, DynoqError)
                    log.log(
                        logging.WARNING if expected else logging.ERROR,
                        "dynoq: consumer worker error; retrying in %gs: %s",
                        ERROR_PAUSE,
                        exc,
                        exc_info=not expected or log.isEnabledFor(logging.DEBUG),
                    )
                    await wait_event(stopping, ERROR_PAUSE)
        finally:
            self.shared.idle.wake()  # if it was the watcher, another worker takes over

    async def _aside(self, pause: float) -> bool:
        """Whether a streaming source holds the group (it consumes it alone): if so, wait
        ``pause`` seconds, taking nothing."""
        if self.shared.aside:
            await wait_event(self.shared.stopping, pause)
        return self.shared.aside

    async def _concurrent_loop(self, me: int) -> None:
        # The thread consumer's loop (dynoq.consumer.workers), as a task.
        s = self.shared
        sizer, idle = self.processor.sizer, s.plan.settings.idle_wait
        turn = me  # the workers start at different shards
        quiet = False  # Redis Cluster: the last waiting pop ended with nothing found
        last = consuming.LastLook()
        # A keyed queue's hot key: the acks bring the key's next batch (carried, with
        # the permits it holds), at most MAX_CARRIED times in a row, then a look at the
        # whole queue again (round-robin across shards). (A rate limit's permits are
        # taken by the calls, carried or not. Not under max_running: no slots for them.)
        keyed = s.queue.ops.keyed and not s.plan.settings.batch_handler and s.running is None
        carried: list[Message] = []
        streak = held = 0
        while not s.stopping.is_set():
            if not carried and await self._aside(idle):
                continue
            if carried:
                n, msgs, carried = held, carried, []
            else:
                n, msgs = await s.in_flight.take(sizer.size(), idle), []
            if n == 0:
                continue
            try:
                turn += 1
                order = pop_order(s.preferred, s.plan.shards, turn)
                # (it looked first thing: pop waits after a look; carried: no look)
                if not quiet and not msgs:
                    msgs = await self._look(n, order, last)
                if msgs:
                    s.idle.found()  # more may be due: one sleeping worker comes to look
                elif s.idle.watch():  # nobody waits on the server: this worker does, for all
                    msgs, quiet = await self._watch(n, order, last)
                    if not msgs:
                        continue  # its permits go back below
                else:  # the watcher's finding wakes us; the bound is a safety
                    quiet = False
                    s.in_flight.give(n)
                    n = 0
                    await s.idle.sleep(idle * 12)
                    continue
                quiet = False
                flight = InFlightBatch(msgs, None, time.monotonic(), n)
                s.deliveries.start(me, flight)
                carried = await self.processor.concurrently(
                    msgs, n if keyed and streak < MAX_CARRIED else 0, flight
                )
            finally:
                await s.finish(me)
                if carried:
                    held, streak = n, streak + 1  # its permits are kept
                else:
                    streak = 0
                    s.in_flight.give(n)
        if carried:  # stopping: what the last acks brought goes back at once
            await self._give_back_carried(carried, held)

    async def _look(self, n: int, order: list[int], last: consuming.LastLook) -> list[Message]:
        """A look for up to ``n`` due messages on the shards in ``order``, without
        waiting; one worker at a time unless the last look found a backlog (see the
        thread consumer). What it saw goes to ``last``."""
        s = self.shared
        async with s.looking if last.in_turn else NO_TURN:
            msgs, hint = await s.fetch(n, shards=order, backlog=last.full)
        last.saw(len(msgs), n, hint, time.monotonic())
        return msgs

    async def _watch(
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
                msgs = await s.pop(n, wait=idle, shards=order, until_woken=True)
            else:  # until a wake-up or the due time; then look, next turn
                # (also after a quiet idle_wait: one probe, a safety net)
                await s.wait(last.nap(time.monotonic(), idle))
        finally:
            s.idle.done_watching(found=bool(msgs))
        return msgs, not probing and not msgs

    async def _give_back_carried(self, carried: list[Message], held: int) -> None:
        """Stopping: the messages the last acks brought (a keyed queue's hot key) go back
        at once, unhandled, and the ``held`` permits they held with them."""
        with contextlib.suppress(DynoqError):  # they expire and come again
            await self.processor.give_back(carried)
        self.shared.in_flight.give(held)

    async def _ordered_loop(self, me: int) -> None:
        s = self.shared
        idle = s.plan.settings.idle_wait
        while self._active():
            shards, waiting = await s.board.claim(idle)
            if not self._active() or not shards or not waiting:
                for shard in shards:
                    await self._run_shard(me, shard, None)
                continue
            # Every free shard was empty: wait on their behalf for one message (under
            # max_running for a wake-up: a waiting pop would hold a slot meanwhile).
            if s.running is not None:
                woke = not await s.wait(idle)
                await self._finish_all(shards, None if woke else False)
                continue
            try:
                msgs = await s.pop(1, wait=idle, shards=shards, until_woken=True)
            except LeaseLost:
                msgs = []
                await s.check_leases(shards)
            except BaseException:
                await self._finish_all(shards, None)
                raise
            got = {m.shard for m in msgs}
            await self._finish_all([x for x in shards if x not in got], None if msgs else False)
            for m in msgs:
                assert m.shard is not None
                await self._run_shard(me, m.shard, [m])

    async def _run_shard(self, me: int, shard: int, first: list[Message] | None) -> None:
        """Handle ``shard`` in order until it is empty, blocked, lost, or others wait
        longer than max_continuous_time; then hand it back to the board."""
        s = self.shared
        settings = s.plan.settings
        started = time.monotonic()
        msgs, found = first, True
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
                    msgs = await s.pop(n, shards=[shard])
                    if not msgs:
                        found = False  # empty, or blocked by an earlier retry
                        break
                s.deliveries.start(me, InFlightBatch(msgs, shard, time.monotonic(), 0))
                blocked = await self.processor.orderly(msgs)
                await s.finish(me)  # its slots (max_running) go back before the next pop
                s.board.set_retrying(shard, blocked)
                if blocked:
                    found = False  # nothing deliverable until the suspend ends
                    break
                msgs = None
                await asyncio.sleep(0)  # let the other tasks in between batches
        except LeaseLost as exc:
            s.stats.add(lease_lost=1)
            if s.leases.ended(shard, tenure):
                s.board.drop(shard)
                log.warning("dynoq: %s; dropped the shard", exc)
            else:  # the upkeep took the shard again meanwhile: that lease goes on
                log.info("dynoq: %s; the shard's newer lease goes on", exc)
        finally:
            await s.finish(me)
            await self._finish(shard, found)

    async def _finish(self, shard: int, found: bool | None) -> None:
        await self._finish_all([shard], found)

    async def _finish_all(self, shards: list[int], found: bool | None) -> None:
        for shard in self.shared.board.done_all(shards, found):  # moved away meanwhile
            await asyncio.shield(self.shared.release(shard))
