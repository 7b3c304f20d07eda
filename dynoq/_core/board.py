"""Which ordered shards a consumer's workers may take now (pure bookkeeping, no locks).

A shard is processed by one worker at a time. A worker *claims* a held shard that may have
messages; when every free shard was found empty, one worker claims them all and blocks
in ``pop(wait=...)`` on their behalf, so idle workers do not poll. A shard that moved away
to another member is released only once its worker is done. The thread consumer guards
this state with a ``threading.Condition``, the asyncio one with an ``asyncio.Condition``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..message import Message

Outcome = tuple[Message, "BaseException | None"]  # a message and what its handler raised
Results = list[Outcome]  # a batch's handler outcomes


class BoardState:
    def __init__(self) -> None:
        self.held: set[int] = set()  # leased and open to workers
        self.busy: set[int] = set()  # claimed by a worker
        self.empty: set[int] = set()  # the last pop found nothing deliverable
        self.releasing: set[int] = set()  # moved away: release once its worker is done
        self.retrying: set[int] = set()  # blocked by a message waiting to be retried
        self.waiting: set[int] = set()  # claimed by the worker that waits for the rest
        self._turn = 0

    def leased(self) -> set[int]:
        """Shards whose lease this consumer holds (including ones being handed over)."""
        return self.held | self.releasing

    def add(self, shard: int) -> None:
        """A lease was taken: hand the shard out."""
        self.releasing.discard(shard)
        self.retrying.discard(shard)
        self.held.add(shard)
        self.empty.discard(shard)

    def drop(self, shard: int) -> None:
        """The lease is gone (expired or taken over): stop handing the shard out."""
        self.held.discard(shard)
        self.releasing.discard(shard)

    def move_away(self, shard: int) -> bool:
        """Stop handing ``shard`` out; True if it may be released now (no worker on it)."""
        self.held.discard(shard)
        if shard in self.busy:
            self.releasing.add(shard)
            return False
        self.releasing.discard(shard)
        return True

    def reclaim(self, shard: int) -> bool:
        """Keep a shard that was being handed over (it came back); True if it was."""
        if shard in self.releasing:
            self.releasing.discard(shard)
            self.held.add(shard)
            return True
        return False

    def rebalance(self, target: set[int]) -> list[int]:
        """Keep the leased shards in ``target`` (taking back any being handed over) and
        stop handing out the others; returns those whose lease may be released now (no
        worker on them: the rest are released when their worker is done)."""
        release = []
        for shard in sorted(self.leased()):
            if shard in target:
                self.reclaim(shard)
            elif self.move_away(shard):
                release.append(shard)
        return release

    def claim(self) -> tuple[list[int], bool] | None:
        """(shards, wait): one shard that may have messages, or every free shard when all
        of them were found empty (wait=True: block on their behalf); None when no shard
        is free."""
        free = sorted(self.held - self.busy)
        if not free:
            return None
        self._turn += 1
        k = self._turn % len(free)
        free = free[k:] + free[:k]
        ready = [s for s in free if s not in self.empty]
        if not ready and self.waiting:
            # One worker waits at a time; it is woken by any push and then hands its
            # shards back, so together with these they go to one worker again.
            return None
        picked = ready[:1] or free
        self.busy.update(picked)
        if not ready:
            self.waiting = set(picked)
        return picked, not ready

    def done(self, shard: int, found: bool | None) -> bool:
        """A worker is finished with ``shard``; ``found``: whether it had messages (None:
        unknown). True if the shard was moved away and its lease should be released now."""
        self.busy.discard(shard)
        self.waiting.discard(shard)
        if found is False:
            self.empty.add(shard)
        else:
            self.empty.discard(shard)
        if shard in self.releasing:
            self.releasing.discard(shard)
            return True
        return False

    def wake(self, shards: Iterable[int] | None = None) -> None:
        """Something may have arrived: try these (default: all) shards again."""
        if shards is None:
            self.empty.clear()
        else:
            self.empty.difference_update(shards)


class InFlightBatch:
    """A batch a worker is handling. The worker writes ``call_started`` and ``results``
    without a lock (single assignments and appends are atomic); the abandon / settle
    decision is taken under the registry's lock (threads) or on the event loop (asyncio).

    A handler call past consume_timeout makes the batch ``overran``. On a concurrent
    queue the watchdog then settles it at once (``abandoned``: its worker must not). On an
    ordered shard it stays with its worker, in flight and extended, so that nothing later
    of its shard is delivered while the call may still run; the worker settles it (the
    call failed with ConsumeTimeout) when the call returns.

    A plain concurrent batch sized "auto" whose running call stalls gives the messages it
    has not begun back to the queue (``cut``: see :meth:`DeliveryState.stalled`).
    """

    __slots__ = (
        "abandoned",
        "begun",
        "call_started",
        "calling",
        "cut",
        "lapsed",
        "looked",
        "msgs",
        "overran",
        "permits",
        "refilled",
        "results",
        "settled",
        "settling",
        "shard",
        "started",
        "watch",
    )

    def __init__(self, msgs: list[Message], shard: int | None, now: float, permits: int) -> None:
        self.msgs = msgs
        self.shard = shard
        self.permits = permits  # flow-control permits it holds (concurrent queues)
        self.started = now  # for extending slow batches (restarts when extended)
        self.looked = now  # the consumer's last look at it (_core/steering.py)
        # asyncio: the worker's consume_timeout watch (events.Watch), which also cuts a
        # coroutine handler short when its message was cancelled (None: not that path)
        self.watch: Any = None
        self.lapsed = False  # an extension found a delivery no longer in flight
        self.call_started = math.inf  # when the running handler call began (inf: none)
        self.calling: Sequence[Message] = ()  # the messages of that call
        self.results: Results = []
        self.overran = False  # a handler call of it ran past consume_timeout
        self.abandoned = False  # the watchdog (or a stop) settles it, not its worker
        self.settling = False  # the worker is settling it (too late to abandon)
        self.refilled: list[Message] = []  # delivered with its acks (keyed queues)
        self.begun = 0  # messages whose handler call began
        self.cut: int | None = None  # msgs[cut:] were given back: not this worker's
        self.settled = 0  # results[:settled] were settled at the cut: not this worker's

    @property
    def unsettled(self) -> Results:
        """The outcomes this worker still settles."""
        return self.results[self.settled :]

    @property
    def mine(self) -> list[Message]:
        """The messages still this worker's to handle or settle (all, unless cut)."""
        return self.msgs if self.cut is None else self.msgs[: self.cut]


class DeliveryState:
    """The batch each worker is handling: the upkeep extends the visibility of slow ones
    (so nobody else gets them, and ordered shards stay blocked) and abandons a batch whose
    handler call ran over consume_timeout."""

    def __init__(self) -> None:
        self._by_worker: dict[int, InFlightBatch] = {}

    def start(self, worker: int, batch: InFlightBatch) -> None:
        self._by_worker[worker] = batch

    def settle(self, worker: int) -> bool:
        """The worker is about to settle its batch: True unless it was abandoned."""
        batch = self._by_worker.get(worker)
        if batch is None or batch.abandoned:
            return False
        batch.settling = True
        return True

    def finish(self, worker: int) -> InFlightBatch | None:
        """The worker's batch ended (settled, given back or abandoned): it is
        forgotten, and returned (None when it had none)."""
        return self._by_worker.pop(worker, None)

    def interrupt(self, msgs: Sequence[Message]) -> None:
        """Cut short the coroutine handler calls running on ``msgs`` (asyncio: each
        batch's watch knows the message its call runs on)."""
        for b in self._by_worker.values():
            if b.watch is not None:
                for m in msgs:
                    b.watch.interrupt(m)

    def to_look(self, now: float, every: float) -> list[Message]:
        """The messages to look at now (dynoq._core.steering): of each batch in flight
        ``every`` seconds since its last look (its clock restarts), those not yet handled
        (the running one and those after it)."""
        out: list[Message] = []
        for b in self._by_worker.values():
            if b.abandoned or b.settling or now - b.looked < every:
                continue
            b.looked = now
            out += b.mine[len(b.results) :]
        return out

    def slow(self, now: float, older_than: float) -> list[InFlightBatch]:
        """The batches started (or last extended) more than ``older_than`` seconds ago,
        for the caller to extend (then ``extended``). A batch whose extension failed
        keeps its clock running, so that ``ran_out`` sees its deliveries may be gone,
        and the next look tries again."""
        return [
            b for b in self._by_worker.values() if now - b.started >= older_than and not b.abandoned
        ]

    def stalled(self, now: float, after: float) -> list[tuple[list[Message], Results]]:
        """Concurrent batches whose running handler call began more than ``after``
        seconds ago, once each: the messages after it are cut from them, for the caller
        to give back, so that other workers take them now rather than after the call;
        and the outcomes of the calls before it, for the caller to settle now (the worker
        settles only the rest: ``settled``)."""
        out = []
        for b in self._by_worker.values():
            if (
                b.shard is None
                and b.cut is None
                and not b.abandoned
                and not b.settling
                and now - b.call_started >= after
            ):
                b.cut, b.settled = b.begun, len(b.results)
                rest, handled = b.msgs[b.cut :], b.results[: b.settled]
                if rest or handled:
                    out.append((rest, handled))
        return out

    def overdue(
        self, now: float, timeout_of: Callable[[Sequence[Message]], float], *, ordered: bool
    ) -> list[tuple[int, InFlightBatch]]:
        """The batches whose running handler call started more than its timeout ago
        (``timeout_of`` its messages: consuming.Plan.timeout_of) and that are not being
        settled: marked overran, and (concurrent queues) abandoned, for the caller to
        settle now."""
        out = []
        for worker, batch in self._by_worker.items():
            if (
                not batch.overran
                and not batch.abandoned
                and not batch.settling
                and batch.call_started < now
                and now - batch.call_started > timeout_of(batch.calling)
            ):
                batch.overran = True
                batch.abandoned = not ordered
                out.append((worker, batch))
        return out

    def abandon_all(self, keep: Any = None) -> list[tuple[int, InFlightBatch]]:
        """Every batch not being settled (but ``keep``'s, a worker that stops its own
        consumer), marked abandoned: the consumer stops, and gives them back."""
        out = []
        for worker, batch in self._by_worker.items():
            if worker != keep and not batch.abandoned and not batch.settling:
                batch.abandoned = True
                out.append((worker, batch))
        return out


def extended(batch: InFlightBatch, sent: float, results: Sequence[bool]) -> None:
    """Record the extension of ``batch`` asked at ``sent`` (monotonic): its clock
    restarts; a delivery that was no longer in flight makes the batch lapsed (on a keyed
    queue its key may be someone else's now: nothing more of the batch is handled)."""
    batch.started = sent
    if not all(results):
        batch.lapsed = True


def outcomes(
    results: Iterable[Outcome],
) -> tuple[list[Message], list[tuple[Message, BaseException]]]:
    """Handler outcomes split for settling: the messages to ack, and those that failed
    (with why)."""
    ok: list[Message] = []
    failed: list[tuple[Message, BaseException]] = []
    for m, e in results:
        if e is None:
            ok.append(m)
        else:
            failed.append((m, e))
    return ok, failed


def begin(batch: InFlightBatch, now: float) -> bool:
    """Whether a worker may call the handler on the next message of ``batch`` (not when
    it was cut and given back); if so, that call is counted as begun at ``now``."""
    if batch.cut is not None and batch.begun >= batch.cut:
        return False
    batch.begun += 1
    batch.call_started = now
    return True


def ran_out(batch: InFlightBatch, now: float, visibility: float) -> bool:
    """Whether the batch's deliveries may have run out (their visibility restarts at
    each extension; a tenth as a margin for the round trips). On a keyed queue a
    delivery is its key's lock: a later message of the batch is then not handled by
    this worker; it comes back at the head of its key to whoever holds it next."""
    return batch.lapsed or now >= batch.started + visibility * 0.9


class Abandoned:
    """Handler calls left running past consume_timeout while another worker takes the
    place of theirs: at most ``cap`` at a time (a thread cannot be stopped; without a
    bound a handler that always hangs would make one thread per delivery). At the cap
    a worker whose call overruns is not replaced: it waits for its call, so a consumer
    whose every worker is stuck stops fetching until one returns."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.count = 0

    def take(self) -> bool:
        """True: one more call is abandoned (its worker is replaced); False: at the cap."""
        if self.count >= self.cap:
            return False
        self.count += 1
        return True

    def returned(self) -> None:
        self.count -= 1
