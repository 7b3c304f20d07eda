"""Handling one popped batch: call the handler, then settle it (ack, retry, dead-letter)
with the core's flows."""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .. import tracing
from .._core import consuming, logcontext
from .._core.board import InFlightBatch, Outcome, outcomes, ran_out
from .._core.callables import not_awaitable
from .._core.rates import Permits
from .._core.sizing import BatchSizer
from ..errors import DynoqError, LeaseLost
from ..message import Message
from ..queue import Queue
from .lease import Leases
from .middleware import Invoker
from .rates import RateGate
from .stats import StatsCounter

log = logging.getLogger("dynoq.consumer")

# What handling a batch came to.
DONE, BLOCKED, ABANDONED = "done", "blocked", "abandoned"


class Processor:
    def __init__(
        self,
        queue: Queue,
        handler: Callable[..., Any],
        invoker: Invoker,
        plan: consuming.Plan,
        stats: StatsCounter,
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

    def _call(self, batch: InFlightBatch, arg: Any, msgs: Any) -> tuple[Exception | None, float]:
        batch.calling = msgs
        batch.call_started = started = time.monotonic()
        token = logcontext.handling(self.queue.name, msgs[0]) if len(msgs) == 1 else None
        try:
            if tracing.active():
                with tracing.span(
                    "process",
                    self.queue.name,
                    ids=[m.id for m in msgs],
                    parent=msgs[0].headers if len(msgs) == 1 else None,
                    consumer=True,
                ):
                    return self._invoke(arg, msgs)
            return self._invoke(arg, msgs)
        finally:
            if token is not None:
                logcontext.done(token)
            batch.call_started = math.inf  # no call runs: nothing for the watchdog
            if batch.overran:
                consuming.returned(log, self.queue.name, msgs, time.monotonic() - started)

    def _invoke(self, arg: Any, msgs: Any) -> tuple[Exception | None, float]:
        if not self.invoker.middleware:
            t0 = time.perf_counter()
            try:
                not_awaitable(self.handler(arg), self.handler)  # nothing here awaits it
            except Exception as exc:  # noqa: BLE001 - the handler's failure is data for retries
                return exc, time.perf_counter() - t0
            return None, time.perf_counter() - t0
        return self.invoker.call(arg, msgs)

    def concurrently(
        self,
        batch: InFlightBatch,
        settle: Callable[[], bool],
        begin: Callable[[InFlightBatch], bool],
        refill: bool = False,
    ) -> str:
        """Each message on its own: a failure retries only that message, later.
        ``settle()`` says whether this worker may settle the batch (not abandoned);
        ``begin(batch)`` whether it may call the handler on the next message (not when
        the upkeep gave the rest of a stalled batch back: board.DeliveryState.stalled).
        ``refill``: on a keyed queue, the acks may bring the next batch of a hot key
        (``batch.refilled``: consuming.settle)."""
        if self.batch_handler:
            seconds, refused = self._in_parts(batch)
        else:
            seconds, refused = self._one_by_one(batch, begin)
        if not settle():
            return ABANDONED
        ok, failed = outcomes(batch.unsettled)
        back = batch.mine[len(batch.results) :] if refused else []  # stopping: back at once
        more = (max(batch.permits, 1), self.plan.visibility) if refill and not back else None
        with tracing.span("ack", self.queue.name, ids=[m.id for m in ok if m.id]):
            tally = self.queue.backend.drive(
                consuming.settle(
                    self.queue.ops, ok, failed, self.plan.retry, self.me, back=back, refill=more
                )
            )
        self.stats.add_tally(tally, seconds)
        self.handled(len(batch.results), seconds)
        batch.refilled = tally.refilled
        return DONE

    def _in_parts(self, batch: InFlightBatch) -> tuple[float, bool]:
        """A batch handler's calls: the batch in one, or in parts the rate limit lets
        through (the outcomes go to ``batch.results`` as they come). The seconds they
        took, and whether a part was refused its permits (the consumer stops)."""
        msgs, seconds, held = batch.msgs, 0.0, Permits()
        while len(batch.results) < len(msgs):
            part = msgs[len(batch.results) :]
            k = self._permits(held, len(part), whole=True)
            if not k:
                return seconds, True
            error, s = self._call(batch, part[:k], part[:k])
            seconds += s
            batch.results.extend((m, error) for m in part[:k])
        return seconds, False

    def _one_by_one(
        self, batch: InFlightBatch, begin: Callable[[InFlightBatch], bool]
    ) -> tuple[float, bool]:
        """A call for each message (the outcomes go to ``batch.results`` as they come),
        until the batch is abandoned, its deliveries may have run out (a keyed queue:
        board.ran_out), or ``begin`` refuses the next (see :meth:`concurrently`). The
        seconds the calls took, and whether a message was refused its permit (the
        consumer stops)."""
        msgs, seconds, held, keyed = batch.msgs, 0.0, Permits(), self.queue.ops.keyed
        for i, msg in enumerate(msgs):
            if batch.abandoned or (
                keyed and ran_out(batch, time.monotonic(), self.plan.visibility)
            ):
                break
            if not self._permits(held, len(msgs) - i):
                return seconds, True
            if self.hands_back and not begin(batch):
                break
            error, s = self._call(batch, msg, (msg,))
            seconds += s
            batch.results.append((msg, error))
        return seconds, False

    def _permits(self, held: Permits, left: int, whole: bool = False) -> int:
        """How many of the next ``left`` messages may be called now: one (``whole``: all,
        in one call), or under the group's rate limit those its permits allow, waiting
        for them; 0 when the consumer stops meanwhile."""
        if self.gate is None:
            return left if whole else 1
        return self.gate.take(held, left if whole else 1, left, whole)

    def handled(self, messages: int, seconds: float) -> None:
        """``messages`` were called in ``seconds``: the batch size and the rate limit's
        permits follow the handler's speed."""
        self.sizer.handled(messages, seconds)
        if self.gate is not None:
            self.gate.limit.called(messages, seconds)

    def give_back(self, rest: Sequence[Message], handled: Iterable[Outcome] = ()) -> None:
        """Give ``rest`` back unhandled, at once (no attempt counted), and ack or retry
        the outcomes ``handled`` before it, in one round trip: a stalled batch the upkeep
        cut (board.DeliveryState.stalled), messages a worker carried and will not
        handle, a batch still running when the consumer stops (:meth:`stopped`). Raises
        DynoqError when the server cannot be reached (they expire and come again)."""
        ok, failed = outcomes(handled)
        self.stats.add_tally(
            self.queue.backend.drive(
                consuming.settle(self.queue.ops, ok, failed, self.plan.retry, self.me, back=rest)
            )
        )

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
        done, error, seconds, short, refused = 0, None, 0.0, False, False
        called = last = 0  # messages called; where the last call's messages begin
        held = Permits()
        while done < len(msgs) and error is None and not (batch.abandoned or batch.overran):
            if self.leases.left(shard, tenure) < self.plan.lease_margin:
                short = True
                break
            # one message, or (a batch handler) the rest in parts the rate limit allows
            k = self._permits(held, len(msgs) - done, whole=self.batch_handler)
            if not k:
                refused = True
                break
            part = msgs[done : done + k]
            error, s = self._call(batch, part if self.batch_handler else part[0], part)
            seconds, called, last = seconds + s, called + k, done
            if not self.batch_handler:
                batch.results.append((part[0], error))
            if error is None:
                done += k
        if not settle():
            return ABANDONED
        if batch.overran:  # the call that ran over is the last one made
            done, short = last, False
            error = consuming.timed_out(self.plan.timeout_of(batch.calling))
        with tracing.span("ack", self.queue.name, ids=[m.id for m in msgs[:done] if m.id]):
            tally, blocked = self.queue.backend.drive(
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
            with contextlib.suppress(DynoqError):  # else it comes back with the lease
                self.give_back(msgs[done:])
        if short:
            raise LeaseLost(
                f"lease on shard {shard} of {self.queue.name!r} has less than "
                f"{self.plan.lease_margin:g}s left, or was lost and taken again "
                "since its batch was popped: not starting another handler"
            )
        return BLOCKED if blocked else DONE

    def give_up(self, batch: InFlightBatch) -> None:
        """Settle a concurrent queue's batch whose handler call ran over consume_timeout
        (the watchdog's part): what succeeded is acked, the running message failed
        (retried or dead-lettered, with why), the rest go back unhandled. (An ordered
        batch is settled by its worker when the call returns: see ``orderly``.)"""
        rest = batch.mine[len(batch.results) :]
        running = rest if self.batch_handler else rest[:1]
        error = consuming.timed_out(self.plan.timeout_of(running))
        self.give_back(
            [] if self.batch_handler else rest[1:],
            [*batch.unsettled, *((m, error) for m in running)],
        )

    def stopped(self, batch: InFlightBatch) -> None:
        """Settle a batch still running when the consumer stops (its worker overran the
        stop timeout): what succeeded is acked and the rest goes back unhandled, without
        an attempt counted, so another consumer takes it at once."""
        self.give_back(batch.mine[len(batch.results) :], batch.unsettled)
