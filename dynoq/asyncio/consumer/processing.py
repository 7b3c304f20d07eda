"""Handling one popped batch: await the handler, then settle it (ack, retry, dead-letter)
with the core's flows; a batch cut short by cancellation goes back unhandled."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ... import tracing
from ..._core import consuming
from ..._core.board import InFlightBatch, Outcome, Results, begin, outcomes, ran_out
from ..._core.sizing import BatchSizer
from ...errors import DynoqError, LeaseLost
from ...message import Message
from ..events import Watch
from ..queue import Queue
from .lease import Leases
from .middleware import Invoker


class Processor:
    def __init__(self, queue: Queue, handler: Callable[..., Any], invoker: Invoker,
                 plan: consuming.Plan, stats: consuming.Counts, leases: Leases) -> None:
        self.queue = queue
        self.handler = handler
        self.invoker = invoker
        self.plan = plan
        self.stats = stats
        self.leases = leases
        self.batch_handler = plan.settings.batch_handler
        # How many messages the workers pop (batch_size "auto": adapted to the handler)
        self.sizer = BatchSizer(plan.settings.batch_size, keyed=queue.ops.keyed,
                                in_flight=plan.in_flight)
        # A stalled call's batch gives back the messages behind it (see _core/sizing.py)
        self.hands_back = (self.sizer.adapts and not plan.ordered and not queue.ops.keyed
                           and not self.batch_handler)
        self.me = plan.instance_id

    async def _call(self, arg: Any, msgs: Any) -> tuple[Exception | None, float]:
        if tracing.active():
            with tracing.span("process", self.queue.name, ids=[m.id for m in msgs],
                              parent=msgs[0].headers if len(msgs) == 1 else None,
                              consumer=True):
                return await self.invoker.call(arg, msgs)
        return await self.invoker.call(arg, msgs)

    async def concurrently(self, msgs: list[Message], refill: int = 0,
                           batch: InFlightBatch | None = None) -> list[Message]:
        """Each message on its own: a failure retries only that message, later.
        ``refill``: on a keyed queue, the acks may bring up to that many messages of a
        hot key, returned (consuming.settle). ``batch``: its bookkeeping (the outcomes
        go to ``batch.results`` as they come, for the upkeep to settle if a later call
        stalls); on a keyed queue, once its deliveries may have run out
        (board.ran_out), the rest of it is not handled here."""
        vis, keyed, cuts = self.plan.visibility, self.queue.ops.keyed, self.hands_back
        results: Results = [] if batch is None else batch.results

        def gone() -> bool:  # before each call: may this task handle the next message?
            if batch is None or not (keyed or cuts):
                return False
            now = time.monotonic()
            # (a stalled call's batch: the upkeep gave the rest back, board.begin)
            return (keyed and ran_out(batch, now, vis)) or (cuts and not begin(batch, now))

        seconds = 0.0
        try:
            if self.batch_handler:
                error, seconds = await self._call(msgs, msgs)
                results.extend((m, error) for m in msgs)
            elif (not self.invoker.middleware and not self.invoker.in_thread
                  and not tracing.active()):
                seconds = await self._bare(msgs, results, gone)
            else:
                for msg in msgs:
                    if gone():
                        break
                    err, s = await self._call(msg, (msg,))
                    seconds += s
                    results.append((msg, err))
        except asyncio.CancelledError:
            await self._cut_short(msgs if batch is None else batch.mine, results,
                                  0 if batch is None else batch.settled)
            raise
        if batch is not None:  # from here this task settles it (the upkeep cuts no more)
            batch.settling = True
        ok, failed = outcomes(results if batch is None else batch.unsettled)
        more = (refill, self.plan.visibility) if refill else None
        with tracing.span("ack", self.queue.name, ids=[m.id for m in ok if m.id]):
            tally = await self.queue.backend.drive(
                consuming.settle(self.queue.ops, ok, failed, self.plan.retry, self.me,
                                 refill=more))
        self.stats.add_tally(tally, seconds)
        self.sizer.handled(len(results), seconds)
        return tally.refilled

    async def give_back(self, rest: Sequence[Message], handled: Iterable[Outcome] = ()) -> None:
        """Give ``rest`` back unhandled, at once (no attempt counted), and ack or retry
        the outcomes ``handled`` before it, in one round trip: a stalled batch the upkeep
        cut (board.DeliveryState.stalled), or messages a worker carried and will not
        handle. Shielded, so that the settling itself is not cut short. Raises
        DynoqError when the server cannot be reached (they expire and come again)."""
        ok, failed = outcomes(handled)
        flow = consuming.settle(self.queue.ops, ok, failed, self.plan.retry, self.me,
                                back=rest)
        self.stats.add_tally(await asyncio.shield(self.queue.backend.drive(flow)))

    async def _bare(self, msgs: list[Message], results: Results,
                    gone: Callable[[], bool]) -> float:
        # The no-middleware fast path: one clock read and one consume_timeout timer per
        # batch (Python 3.11+; a timer per call before).
        t0 = time.perf_counter()
        if sys.version_info < (3, 11):
            for msg in msgs:
                if gone():
                    break
                try:
                    await self.invoker.handle(msg, (msg,))
                except Exception as exc:  # noqa: BLE001 - the failure is data for retries
                    results.append((msg, exc))
                else:
                    results.append((msg, None))
            return time.perf_counter() - t0
        handler, timeout = self.invoker.handler, self.invoker.timeout
        watch = Watch(timeout)
        try:
            for msg in msgs:
                if gone():
                    break
                watch.start()
                try:
                    await handler(msg)
                except asyncio.CancelledError:
                    if not watch.overran():
                        raise
                    await self.invoker.overran(None, (msg,))
                    results.append((msg, consuming.timed_out(timeout)))
                except Exception as exc:  # noqa: BLE001 - the failure is data for retries
                    error: Exception = exc
                    if watch.overran():
                        await self.invoker.overran(None, (msg,))
                        error = consuming.timed_out(timeout)
                    results.append((msg, error))
                else:
                    if watch.overran():  # it swallowed the cancellation, but ran over
                        await self.invoker.overran(None, (msg,))
                        results.append((msg, consuming.timed_out(timeout)))
                    else:
                        results.append((msg, None))
        finally:
            watch.close()
        return time.perf_counter() - t0

    async def orderly(self, msgs: list[Message]) -> bool:
        """In order; a failing message blocks the shard and is retried in place (the
        messages after it go back untouched). True if the shard waits for a retry.
        Raises LeaseLost when the shard's lease is gone or too close to its end to start
        another handler call (what was handled is acked first, if the lease allows)."""
        shard = msgs[0].shard
        assert shard is not None
        tenure = msgs[0].fence  # the lease's fence it was popped under
        done, error, seconds, short = 0, None, 0.0, False
        try:
            if self.batch_handler:
                short = self.leases.left(shard, tenure) < self.plan.lease_margin
                if not short:
                    error, seconds = await self._call(msgs, msgs)
                    done = len(msgs) if error is None else 0
            else:
                for msg in msgs:
                    if self.leases.left(shard, tenure) < self.plan.lease_margin:
                        short = True
                        break
                    error, s = await self._call(msg, (msg,))
                    seconds += s
                    if error is not None:
                        break
                    done += 1
        except asyncio.CancelledError:
            await self._cut_short(msgs, [(m, None) for m in msgs[:done]])
            raise
        with tracing.span("ack", self.queue.name, ids=[m.id for m in msgs[:done] if m.id]):
            tally, blocked = await self.queue.backend.drive(consuming.settle_in_order(
                self.queue.ops, msgs[:done] if short else msgs, done,
                None if short else error, self.plan.retry, self.me))
        self.stats.add_tally(tally, seconds)
        called = len(msgs) if self.batch_handler and not short else done + (error is not None)
        self.sizer.handled(called, seconds)
        if short:
            raise LeaseLost(f"lease on shard {shard} of {self.queue.name!r} has less than "
                            f"{self.plan.lease_margin:g}s left, or was lost and taken again "
                            "since its batch was popped: not starting another handler")
        return bool(blocked)

    async def _cut_short(self, mine: list[Message], results: Results,
                         settled: int = 0) -> None:
        """Cancelled mid-batch (a stop that ran out of time): settle the outcomes
        (``results[settled:]``: the upkeep settled the ones before when it cut the batch)
        and give the rest of ``mine`` back at once, unhandled (no attempt counted),
        rather than leave it in flight until its visibility timeout."""
        seen = {id(m) for m, _ in results}
        with contextlib.suppress(DynoqError):  # fenced or unreachable: they expire instead
            await self.give_back([m for m in mine if id(m) not in seen], results[settled:])
