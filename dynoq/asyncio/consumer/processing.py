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
from ..._core import consuming, logcontext
from ..._core.board import InFlightBatch, Outcome, Results, begin, outcomes, ran_out
from ..._core.rates import Permits
from ..._core.sizing import BatchSizer
from ...errors import DynoqError, LeaseLost
from ...message import Message
from ..events import Watch
from ..queue import Queue
from .lease import Leases
from .middleware import Invoker
from .rates import RateGate


class Processor:
    def __init__(
        self,
        queue: Queue,
        handler: Callable[..., Any],
        invoker: Invoker,
        plan: consuming.Plan,
        stats: consuming.Counts,
        leases: Leases,
        gate: RateGate | None = None,
    ) -> None:
        self.queue = queue
        self.gate = gate  # the group's rate limit, taken for each call (None: no limit)
        self.handler = handler
        self.invoker = invoker
        self.plan = plan
        self.stats = stats
        self.leases = leases
        self.batch_handler = plan.settings.batch_handler
        # How many messages the workers pop (batch_size "auto": adapted to the handler)
        self.sizer = BatchSizer(
            plan.settings.batch_size,
            in_flight=plan.in_flight,
            rate_limit=plan.settings.rate_limit,
            concurrency=plan.settings.concurrency,
        )
        # A stalled call's batch gives back the messages behind it (see _core/sizing.py)
        self.hands_back = self.sizer.adapts and not plan.ordered and not self.batch_handler
        self.me = plan.instance_id

    async def _call(self, arg: Any, msgs: Any) -> tuple[Exception | None, float]:
        if len(msgs) != 1:  # a batch handler's call: no one delivery to name
            return await self._traced(arg, msgs)
        token = logcontext.handling(self.queue.name, msgs[0])
        try:
            return await self._traced(arg, msgs)
        finally:
            logcontext.done(token)

    async def _traced(self, arg: Any, msgs: Any) -> tuple[Exception | None, float]:
        if tracing.active():
            with tracing.span(
                "process",
                self.queue.name,
                ids=[m.id for m in msgs],
                parent=msgs[0].headers if len(msgs) == 1 else None,
                consumer=True,
            ):
                return await self.invoker.call(arg, msgs)
        return await self.invoker.call(arg, msgs)

    async def concurrently(
        self, msgs: list[Message], refill: int = 0, batch: InFlightBatch | None = None
    ) -> list[Message]:
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

        try:
            if self.batch_handler:
                seconds, refused = await self._in_parts(msgs, results)
            elif (
                not self.invoker.middleware
                and not self.invoker.in_thread
                and not tracing.active()
                and self.gate is None
            ):
                seconds, refused = await self._bare(msgs, results, gone, batch), False
            else:
                seconds, refused = await self._one_by_one(msgs, results, gone)
        except asyncio.CancelledError:
            await self._cut_short(
                msgs if batch is None else batch.mine,
                results,
                0 if batch is None else batch.settled,
            )
            raise
        if batch is not None:  # from here this task settles it (the upkeep cuts no more)
            batch.settling = True
        ok, failed = outcomes(results if batch is None else batch.unsettled)
        mine = msgs if batch is None else batch.mine
        back = mine[len(results) :] if refused else []  # stopping: back at once
        more = (refill, self.plan.visibility) if refill and not back else None
        with tracing.span("ack", self.queue.name, ids=[m.id for m in ok if m.id]):
            tally = await self.queue.backend.drive(
                consuming.settle(
                    self.queue.ops, ok, failed, self.plan.retry, self.me, back=back, refill=more
                )
            )
        self.stats.add_tally(tally, seconds)
        self.handled(len(results), seconds)
        return tally.refilled

    async def _in_parts(self, msgs: list[Message], results: Results) -> tuple[float, bool]:
        """A batch handler's calls: the batch in one, or in parts the rate limit lets
        through (the outcomes go to ``results`` as they come). The seconds they took,
        and whether a part was refused its permits (the consumer stops)."""
        seconds, held = 0.0, Permits()
        while len(results) < len(msgs):
            part = msgs[len(results) :]
            k = await self._permits(held, len(part), whole=True)
            if not k:
                return seconds, True
            error, s = await self._call(part[:k], part[:k])
            seconds += s
            results.extend((m, error) for m in part[:k])
        return seconds, False

    async def _one_by_one(
        self, msgs: list[Message], results: Results, gone: Callable[[], bool]
    ) -> tuple[float, bool]:
        """A call for each message (the outcomes go to ``results`` as they come), until
        ``gone()`` says the rest is not this task's (see :meth:`concurrently`). The
        seconds the calls took, and whether a message was refused its permit (the
        consumer stops)."""
        seconds, held = 0.0, Permits()
        for i, msg in enumerate(msgs):
            if not await self._permits(held, len(msgs) - i):
                return seconds, True
            if gone():
                break
            err, s = await self._call(msg, (msg,))
            seconds += s
            results.append((msg, err))
        return seconds, False

    async def _permits(self, held: Permits, left: int, whole: bool = False) -> int:
        """How many of the next ``left`` messages may be called now: one (``whole``: all,
        in one call), or under the group's rate limit those its permits allow, waiting
        for them; 0 when the consumer stops meanwhile."""
        if self.gate is None:
            return left if whole else 1
        return await self.gate.take(held, left if whole else 1, left, whole)

    def handled(self, messages: int, seconds: float) -> None:
        """``messages`` were called in ``seconds``: the batch size and the rate limit's
        permits follow the handler's speed."""
        self.sizer.handled(messages, seconds)
        if self.gate is not None:
            self.gate.limit.called(messages, seconds)

    async def give_back(self, rest: Sequence[Message], handled: Iterable[Outcome] = ()) -> None:
        """Give ``rest`` back unhandled, at once (no attempt counted), and ack or retry
        the outcomes ``handled`` before it, in one round trip: a stalled batch the upkeep
        cut (board.DeliveryState.stalled), or messages a worker carried and will not
        handle. Shielded, so that the settling itself is not cut short. Raises
        DynoqError when the server cannot be reached (they expire and come again)."""
        ok, failed = outcomes(handled)
        flow = consuming.settle(self.queue.ops, ok, failed, self.plan.retry, self.me, back=rest)
        self.stats.add_tally(await asyncio.shield(self.queue.backend.drive(flow)))

    async def _bare(
        self,
        msgs: list[Message],
        results: Results,
        gone: Callable[[], bool],
        batch: InFlightBatch | None = None,
    ) -> float:
        # The no-middleware fast path: one clock read and one consume_timeout timer per
        # batch (Python 3.11+; a timer per call before), which also cuts a call short when
        # its message is cancelled (the upkeep hears it: batch.watch).
        t0 = time.perf_counter()
        if sys.version_info < (3, 11):
            for msg in msgs:
                if gone():
                    break
                token = logcontext.handling(self.queue.name, msg)
                try:
                    await self.invoker.handle(msg, (msg,))
                except Exception as exc:  # noqa: BLE001 - the failure is data for retries
                    results.append((msg, exc))
                else:
                    results.append((msg, None))
                finally:
                    logcontext.done(token)
            return time.perf_counter() - t0
        await self._watched(msgs, results, gone, batch)
        return time.perf_counter() - t0

    async def _watched(
        self,
        msgs: list[Message],
        results: Results,
        gone: Callable[[], bool],
        batch: InFlightBatch | None,
    ) -> None:
        """_bare's calls on 3.11+: one Watch for the batch."""
        handler, queue, own = self.invoker.handler, self.queue.name, self.invoker.timeout_of
        watch = Watch(self.invoker.timeout)
        if batch is not None:
            batch.watch = watch
        try:
            for msg in msgs:
                if gone():
                    break
                watch.start(msg, None if own is None else own((msg,)))
                token = logcontext.handling(queue, msg)
                try:
                    await handler(msg)
                    if watch.heard and watch.cancelled_here():  # it swallowed the cancel
                        results.append((msg, consuming.cancelled()))
                        continue
                except asyncio.CancelledError:
                    if watch.cancelled_here():
                        results.append((msg, consuming.cancelled()))
                        continue
                    if not watch.overran():
                        raise
                    await self.invoker.overran(None, (msg,))
                    results.append((msg, consuming.timed_out(watch.seconds)))
                except Exception as exc:  # noqa: BLE001 - the failure is data for retries
                    error: Exception = exc
                    if watch.heard:  # cut short, it raised something else
                        watch.cancelled_here()
                    if watch.overran():
                        await self.invoker.overran(None, (msg,))
                        error = consuming.timed_out(watch.seconds)
                    results.append((msg, error))
                else:
                    if watch.overran():  # it swallowed the cancellation, but ran over
                        await self.invoker.overran(None, (msg,))
                        results.append((msg, consuming.timed_out(watch.seconds)))
                    else:
                        results.append((msg, None))
                finally:
                    logcontext.done(token)
        finally:
            watch.close()

    async def orderly(self, msgs: list[Message]) -> bool:
        """In order; a failing message blocks the shard and is retried in place (the
        messages after it go back untouched). True if the shard waits for a retry.
        Raises LeaseLost when the shard's lease is gone or too close to its end to start
        another handler call (what was handled is acked first, if the lease allows)."""
        shard = msgs[0].shard
        assert shard is not None
        tenure = msgs[0].fence  # the lease's fence it was popped under
        done, error, seconds, short, refused, called = 0, None, 0.0, False, False, 0
        held = Permits()
        try:
            while done < len(msgs) and error is None:
                if self.leases.left(shard, tenure) < self.plan.lease_margin:
                    short = True
                    break
                # one message, or (a batch handler) the rest in parts the rate limit allows
                k = await self._permits(held, len(msgs) - done, whole=self.batch_handler)
                if not k:
                    refused = True
                    break
                part = msgs[done : done + k]
                error, s = await self._call(part if self.batch_handler else part[0], part)
                seconds, called = seconds + s, called + k
                if error is None:
                    done += k
        except asyncio.CancelledError:
            await self._cut_short(msgs, [(m, None) for m in msgs[:done]])
            raise
        with tracing.span("ack", self.queue.name, ids=[m.id for m in msgs[:done] if m.id]):
            tally, blocked = await self.queue.backend.drive(
                consuming.settle_in_order(
                    self.queue.ops,
                    msgs[:done] if short else msgs,
                    done,
                    None if short else error,
                    self.plan.retry,
                    self.me,
                )
            )
        self.stats.add_tally(tally, seconds)
        self.handled(called, seconds)
        if refused:  # stopping: what was not called goes back to its place at once
            await self._cut_short(msgs[done:], [])
        if short:
            raise LeaseLost(
                f"lease on shard {shard} of {self.queue.name!r} has less than "
                f"{self.plan.lease_margin:g}s left, or was lost and taken again "
                "since its batch was popped: not starting another handler"
            )
        return bool(blocked)

    async def _cut_short(self, mine: list[Message], results: Results, settled: int = 0) -> None:
        """Cancelled mid-batch (a stop that ran out of time): settle the outcomes
        (``results[settled:]``: the upkeep settled the ones before when it cut the batch)
        and give the rest of ``mine`` back at once, unhandled (no attempt counted),
        rather than leave it in flight until its visibility timeout."""
        seen = {id(m) for m, _ in results}
        with contextlib.suppress(DynoqError):  # fenced or unreachable: they expire instead
            await self.give_back([m for m in mine if id(m) not in seen], results[settled:])
