"""Handling one popped batch: call the handler, then settle it (ack, retry, dead-letter)
with the core's flows."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .. import tracing
from .._core import consuming
from .._core.board import InFlightBatch, Outcome, outcomes, ran_out
from .._core.sizing import BatchSizer
from ..errors import LeaseLost
from ..message import Message
from ..queue import Queue
from .lease import Leases
from .middleware import Invoker
from .stats import StatsCounter

log = logging.getLogger("dynoq.consumer")

# What handling a batch came to.
DONE, BLOCKED, ABANDONED = "done", "blocked", "abandoned"


class Processor:
    def __init__(self, queue: Queue, handler: Callable[..., Any], invoker: Invoker,
                 plan: consuming.Plan, stats: StatsCounter, leases: Leases) -> None:
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

    def _call(self, batch: InFlightBatch, arg: Any, msgs: Any) -> tuple[Exception | None, float]:
        batch.calling = msgs
        batch.call_started = started = time.monotonic()
        try:
            if tracing.active():
                with tracing.span("process", self.queue.name, ids=[m.id for m in msgs],
                                  parent=msgs[0].headers if len(msgs) == 1 else None,
                                  consumer=True):
                    return self._invoke(arg, msgs)
            return self._invoke(arg, msgs)
        finally:
            batch.call_started = math.inf  # no call runs: nothing for the watchdog
            if batch.overran:
                consuming.returned(log, self.queue.name, msgs, time.monotonic() - started)

    def _invoke(self, arg: Any, msgs: Any) -> tuple[Exception | None, float]:
        if not self.invoker.middleware:
            t0 = time.perf_counter()
            try:
                self.handler(arg)
            except Exception as exc:  # noqa: BLE001 - the handler's failure is data for retries
                return exc, time.perf_counter() - t0
            return None, time.perf_counter() - t0
        return self.invoker.call(arg, msgs)

    def concurrently(self, batch: InFlightBatch, settle: Callable[[], bool],
                     begin: Callable[[InFlightBatch], bool], refill: bool = False) -> str:
        """Each message on its own: a failure retries only that message, later.
        ``settle()`` says whether this worker may settle the batch (not abandoned);
        ``begin(batch)`` whether it may call the handler on the next message (not when
        the upkeep gave the rest of a stalled batch back: board.DeliveryState.stalled).
        ``refill``: on a keyed queue, the acks may bring the next batch of a hot key
        (``batch.refilled``: consuming.settle)."""
        msgs, seconds = batch.msgs, 0.0
        if self.batch_handler:
            error, seconds = self._call(batch, msgs, msgs)
            batch.results.extend((m, error) for m in msgs)
        else:
            keyed = self.queue.ops.keyed
            for msg in msgs:
                if batch.abandoned or (keyed and ran_out(batch, time.monotonic(),
                                                         self.plan.visibility)):
                    break
                if self.hands_back and not begin(batch):
                    break
                error, s = self._call(batch, msg, (msg,))
                seconds += s
                batch.results.append((msg, error))
        if not settle():
            return ABANDONED
        ok, failed = outcomes(batch.unsettled)
        more = (max(batch.permits, 1), self.plan.visibility) if refill else None
        with tracing.span("ack", self.queue.name, ids=[m.id for m in ok if m.id]):
            tally = self.queue.backend.drive(
                consuming.settle(self.queue.ops, ok, failed, self.plan.retry, self.me,
                                 refill=more))
        self.stats.add_tally(tally, seconds)
        self.sizer.handled(len(batch.results), seconds)
        batch.refilled = tally.refilled
        return DONE

    def give_back(self, rest: Sequence[Message], handled: Iterable[Outcome] = ()) -> None:
        """Give ``rest`` back unhandled, at once (no attempt counted), and ack or retry
        the outcomes ``handled`` before it, in one round trip: a stalled batch the upkeep
        cut (board.DeliveryState.stalled), messages a worker carried and will not
        handle, a batch still running when the consumer stops (:meth:`stopped`). Raises
        DynoqError when the server cannot be reached (they expire and come again)."""
        ok, failed = outcomes(handled)
        self.stats.add_tally(self.queue.backend.drive(consuming.settle(
            self.queue.ops, ok, failed, self.plan.retry, self.me, back=rest)))

    def orderly(self, batch: InFlightBatch, settle: Callable[[], bool]) -> str:
        """In order; a failing message blocks the shard and is retried in place (the
        messages after it go back untouched). BLOCKED when the shard waits for a retry.
        A call that ran past consume_timeout failed with ConsumeTimeout, however it
        ended: it is settled only now that it returned (the watchdog left the batch in
        flight), so nothing later of the shard was delivered while it ran.
        Raises LeaseLost when the shard's lease is gone or too close to its end to start
        another handler call (what was handled is acked first, if the lease allows)."""
        msgs, shard = batch.msgs, batch.shard
        assert shard is not None
        tenure = msgs[0].fence if msgs else None  # the lease's fence it was popped under
        done, error, seconds, short = 0, None, 0.0, False
        if self.batch_handler:
            short = self.leases.left(shard, tenure) < self.plan.lease_margin
            if not short:
                error, seconds = self._call(batch, msgs, msgs)
                done = len(msgs) if error is None else 0
        else:
            for msg in msgs:
                if batch.abandoned or batch.overran:
                    break
                if self.leases.left(shard, tenure) < self.plan.lease_margin:
                    short = True
                    break
                error, s = self._call(batch, msg, (msg,))
                seconds += s
                batch.results.append((msg, error))
                if error is not None or batch.overran:
                    break
                done += 1
        if not settle():
            return ABANDONED
        if batch.overran:  # the call that ran over is the last one made
            done = 0 if self.batch_handler else len(batch.results) - 1
            error, short = consuming.timed_out(self.plan.settings.consume_timeout), False
        with tracing.span("ack", self.queue.name, ids=[m.id for m in msgs[:done] if m.id]):
            tally, blocked = self.queue.backend.drive(consuming.settle_in_order(
                self.queue.ops, msgs[:done] if short else msgs, done,
                None if short else error, self.plan.retry, self.me))
        self.stats.add_tally(tally, seconds)
        called = len(msgs) if self.batch_handler and not short else len(batch.results)
        self.sizer.handled(called, seconds)
        if short:
            raise LeaseLost(f"lease on shard {shard} of {self.queue.name!r} has less than "
                            f"{self.plan.lease_margin:g}s left, or was lost and taken again "
                            "since its batch was popped: not starting another handler")
        return BLOCKED if blocked else DONE

    def give_up(self, batch: InFlightBatch) -> None:
        """Settle a concurrent queue's batch whose handler call ran over consume_timeout
        (the watchdog's part): what succeeded is acked, the running message failed
        (retried or dead-lettered, with why), the rest go back unhandled. (An ordered
        batch is settled by its worker when the call returns: see ``orderly``.)"""
        rest = batch.mine[len(batch.results):]
        running = rest if self.batch_handler else rest[:1]
        error = consuming.timed_out(self.plan.settings.consume_timeout)
        self.give_back([] if self.batch_handler else rest[1:],
                       [*batch.unsettled, *((m, error) for m in running)])

    def stopped(self, batch: InFlightBatch) -> None:
        """Settle a batch still running when the consumer stops (its worker overran the
        stop timeout): what succeeded is acked and the rest goes back unhandled, without
        an attempt counted, so another consumer takes it at once."""
        self.give_back(batch.mine[len(batch.results):], batch.unsettled)
