"""The pop planner: which shards a pop asks, in which order, for how many (pure: no I/O).

One :class:`Planner` a queue (its Queue object holds it) plans every pop: ``Queue.pop``
and a consumer's pops (:meth:`Planner.pop`: the shards one after another, waiting for a
wake-up when nothing was deliverable), and a concurrent consumer's look at its shards
(:meth:`Planner.fetch`: a probe of all of them, then the pops of the best ones together).
Both are :meth:`Planner.look` in a :class:`Mode`; both take the lowest priority values
first across shards, and remember whether the last look saw priorities above 0 (a hint
for the cost of the next one, never for the order).
"""

from __future__ import annotations

import enum
import itertools
import time
from collections.abc import Mapping, Sequence

from ..errors import InvalidType, RecordError
from ..message import Message
from . import reasons, validate
from .bounds import CALL_SHARDS
from .calls import Batch, Flow, Wake, together
from .plain import ANY, nonce
from .queue import QueueOps
from .schedules import ScheduleOps, occurrence_of

# A pop's lease: the lease's value ("" = none), or each shard's (a consumer holds each
# shard in a tenure of its own: _core/group.py).
Lease = str | Mapping[int, str]


class Mode(enum.Enum):
    """How a look takes from the shards that hold the best priority."""

    WALK = "walk"  # pop: one shard after another, the first first, until the batch is full
    SPREAD = "spread"  # fetch: a probe of every shard, then the best ones' pops together
    BACKLOG = "backlog"  # fetch after a full batch: the first shard's pop, then as SPREAD


class Planner:
    """The pops of one queue. Thread-safe: it holds no state but a rotation (where a pop
    of every shard starts) and whether the last look saw priorities (:attr:`ranked`)."""

    def __init__(self, ops: QueueOps) -> None:
        self.ops = ops
        self.kind = ops.kind
        self._rotation = itertools.count()
        self._ranked = False

    def pop(
        self,
        count: int = 1,
        *,
        wait: float = 0.0,
        visibility: float | None = None,
        shards: Sequence[int] | None = None,
        lease: Lease = "",
        margin: float = 0.0,
        consumer: str = "",
        until_woken: bool = False,
    ) -> Flow[list[Message]]:
        """Claim up to ``count`` due messages for ``visibility`` seconds; wait up to
        ``wait`` seconds for the first one (woken by pushes, never polling).
        ``until_woken``: return, even with nothing, after the first wake-up (a consumer
        waiting for some shards on behalf of others hands the rest to its workers).

        A lease holder passes its ``lease`` (the lease's value, or one per shard) and a
        ``margin`` (seconds): a lease with less time left counts as lost (LeaseLost). A
        record that cannot be read is dead-lettered with the reason (``consumer`` names
        who saw it) and the rest is delivered."""
        count = validate.check_count(count, high=validate.MAX_BATCH)
        wait = validate.check_seconds(wait, "wait")
        vis = (
            self.ops.settings.unack_timeout
            if visibility is None
            else (validate.check_seconds(visibility, "visibility", minimum=0.001))
        )
        order = self.shard_order(shards)
        margin_ms = validate.to_ms(validate.check_seconds(margin, "margin"))
        return self._pop(
            count, wait, validate.to_ms(vis), order, lease, margin_ms, consumer, until_woken
        )

    def _pop(
        self,
        count: int,
        wait: float,
        vis_ms: int,
        order: list[int],
        lease: Lease,
        margin_ms: int,
        consumer: str,
        until_woken: bool,
    ) -> Flow[list[Message]]:
        """:meth:`pop`, its arguments checked (before anything is asked)."""
        deadline = time.monotonic() + wait
        woken = False
        while True:
            got, hint = yield from self.look(
                count, order, vis_ms, Mode.WALK, lease, margin_ms, consumer
            )
            left = deadline - time.monotonic()
            if got or left <= 0 or (woken and until_woken):
                return got
            nap = left if hint < 0 else min(left, hint / 1000)  # no margin: see consuming.nap
            quiet = yield Wake(self.ops.wake, nap)
            if quiet is True and nap >= left:
                # Nothing was published and nothing fell due (the hint): looking again
                # would find what we found. An idle pop costs one pass, not two.
                return got
            woken = quiet is not True

    def fetch(
        self,
        count: int,
        shards: Sequence[int],
        *,
        visibility: float,
        consumer: str,
        backlog: bool = False,
    ) -> Flow[tuple[list[Message], float | None]]:
        """A concurrent consumer's look at ``shards`` for up to ``count`` due messages, in
        two round trips however many shards (:attr:`Mode.SPREAD`): one read-only probe says
        what each shard has deliverable (and in how many ms something may be, when none
        has), then the pops of the shards holding the lowest priority value go out
        together, ``count`` shared between them, the first of ``shards`` first. (A pop
        asks shards one after another, one round trip each, and returns at the end: under
        a steady stream of due messages what it found on the first shards waited for the
        last ones, several ms on 16 shards, more while other workers' passes compete for
        the server.) Returns the messages and, when there were none, the ms until
        something may be deliverable (-1: nothing is waiting); None when unknown.

        With a ``backlog`` (the last look filled its batch: :attr:`Mode.BACKLOG`) the
        first shard is asked for the whole ``count`` of priority 0 first (nothing goes
        before priority 0; after a look that saw priorities above 0, of what the other
        shards cannot beat): a deep queue fills the batch there, in one pop (sharing it
        out would cost throughput), and a broad shallow one (every shard a few messages
        behind, as after a pause of the process) gets the rest with a probe and the ready
        shards' pops together: three round trips, not one per shard as a pop would take
        (40-75 ms for 16 shards under load). On Redis Cluster (no probe across slots) and
        for one shard, this is :meth:`pop`."""
        if not self.ops.cross_slot or len(shards) < 2:
            msgs = yield from self.pop(
                count, visibility=visibility, shards=shards, consumer=consumer
            )
            return msgs, None
        mode = Mode.BACKLOG if backlog else Mode.SPREAD
        got, hint = yield from self.look(
            count, shards, validate.to_ms(visibility), mode, consumer=consumer
        )
        return got, None if got else hint

    def shard_order(self, shards: Sequence[int] | None) -> list[int]:
        """The shards to try, in order: the given ones, else all, starting from a rotating
        shard so that none starves."""
        n = self.ops.settings.shards
        if shards is None:
            start = next(self._rotation) % n
            return [(start + i) % n for i in range(n)]
        if isinstance(shards, (str, bytes)) or not isinstance(shards, Sequence):
            raise InvalidType("shards must be a sequence of shard numbers")
        for s in shards:
            validate.check_int(s, "shard", low=0, high=n - 1)
        return list(shards)

    def look(
        self,
        count: int,
        order: Sequence[int],
        vis_ms: int,
        mode: Mode,
        lease: Lease = "",
        margin_ms: int = 0,
        consumer: str = "",
    ) -> Flow[tuple[list[Message], float]]:
        """One look at ``order``'s shards for up to ``count`` messages, the lowest
        priority values first across shards (ties: in ``order``). Returns them and the ms
        until something may be deliverable (-1: unknown; 0 when a fetch's pops found
        nothing: others took it, look again at once).

        A shard's *rank* is what it may deliver: 0 nothing, 1 + a lower bound of its next
        message's priority (lib/rank.lua). Priority 0 goes first anywhere, so a WALK asks
        the first shard for that alone before the others are seen: with every priority 0
        (the default), a pop is one call, and two on an empty queue (that pop, then one
        probe of the others). Otherwise each pop's ceiling is the best rank known, and
        each reply says what its shard still holds. When the last look saw priorities
        above 0 (:attr:`ranked`), the first pop names the other shards' keys on one
        server: it claims nothing above what they may deliver, and says what they hold
        (one call when the first shard holds the best); on Redis Cluster a WALK probes
        every shard first (two calls, where the optimistic pop makes three)."""
        got: list[Message] = []
        ranks: dict[int, int] = {}
        hint = -1.0
        first, others = order[0], order[1:]
        ahead = others if others and self.ranked else []
        unseen: Sequence[int] = order
        if self._opens(mode, ahead):
            got, ranks[first], hint, seen = yield from self.take(
                first,
                count,
                ANY if ahead or not others else 0,
                vis_ms,
                _lease_of(lease, first),
                margin_ms,
                consumer,
                others=ahead,
            )
            if len(got) >= count and mode is Mode.BACKLOG:
                self.note(seen, got)
                return got, hint
            if len(got) >= count and not ahead:
                return got, hint  # the common case: priority 0, unbeatable (and unranked)
            ranks.update(seen)
            if ranks[first] < 0 and mode is Mode.WALK:  # a full batch, some unreadable:
                ranks[first] = 1  # it may hold more
            unseen = [] if ahead or len(got) >= count else others
        if unseen:
            found, h = yield from self.probed(unseen)
            ranks.update(found)
            hint = h if mode is Mode.BACKLOG else _sooner(hint, h)
        if mode is not Mode.WALK:
            return (yield from self._spread(got, count, order, ranks, hint, vis_ms, consumer))
        walk = self._walk(got, count, order, ranks, hint, vis_ms, lease, margin_ms, consumer)
        return (yield from walk)

    def _opens(self, mode: Mode, ahead: Sequence[int]) -> bool:
        """Whether a look starts with a pop of its first shard, before any probe. A fetch
        does after a full batch only (BACKLOG). A WALK does (priority 0 goes first
        anywhere) unless it must name the other shards (``ahead``: the last look saw
        priorities) and they cannot go in that pop's call: on Redis Cluster (no keys
        across slots), or more than a call carries; then a probe comes first."""
        if mode is not Mode.WALK:
            return mode is Mode.BACKLOG
        return not (ahead and (not self.ops.cross_slot or len(ahead) >= CALL_SHARDS))

    def _walk(
        self,
        got: list[Message],
        count: int,
        order: Sequence[int],
        ranks: dict[int, int],
        hint: float,
        vis_ms: int,
        lease: Lease,
        margin_ms: int,
        consumer: str,
    ) -> Flow[tuple[list[Message], float]]:
        """Pop the best shard, then the next best, one round trip each, until the batch
        is full or no shard has anything."""
        while len(got) < count:
            live = {s: r for s, r in ranks.items() if r > 0}
            if not live:
                break
            best = min(live.values())
            shard = next(s for s in order if live.get(s) == best)
            msgs, rest, h, _ = yield from self.take(
                shard,
                count - len(got),
                best - 1,
                vis_ms,
                _lease_of(lease, shard),
                margin_ms,
                consumer,
            )
            got += msgs
            hint = _sooner(hint, h)
            # rest > best, or 0: each shard is asked at most once per priority it holds
            ranks[shard] = rest if rest >= 0 else best
        self.note(ranks, got)
        return got, hint

    def _spread(
        self,
        got: list[Message],
        count: int,
        order: Sequence[int],
        ranks: dict[int, int],
        hint: float,
        vis_ms: int,
        consumer: str,
    ) -> Flow[tuple[list[Message], float]]:
        """Pop every shard holding the best priority at once, what is left of ``count``
        shared between them (the first of ``order`` first): one round trip."""
        live = {s: r for s, r in ranks.items() if r > 0}
        if not live:
            self.note(ranks, got)
            return got, hint
        best = min(live.values())  # a round takes the lowest priority value only
        ready = [s for s in order if live.get(s) == best]
        left = count - len(got)
        k = min(len(ready), left)
        share, extra = divmod(left, k)
        parts = yield from together(
            [
                self.take(s, share + (i < extra), best - 1, vis_ms, consumer=consumer)
                for i, s in enumerate(ready[:k])
            ]
        )
        msgs = got + [m for part, *_ in parts for m in part]
        self.note(ranks, msgs)
        # Others may have taken them meanwhile: look again at once rather than wait.
        return msgs, 0.0

    @property
    def ranked(self) -> bool:
        """Whether the last look saw a priority above 0 (then a look across shards starts
        with a probe, or names the other shards: see :meth:`look`)."""
        return self._ranked

    def note(self, ranks: dict[int, int], got: Sequence[Message]) -> None:
        """Remember whether a look saw priorities above 0 (shard ranks, messages)."""
        self._ranked = not self.ops.settings.ordered and (
            any(r > 1 for r in ranks.values()) or any(m.priority for m in got)
        )

    def take(
        self,
        shard: int,
        count: int,
        ceiling: int,
        vis_ms: int,
        lease: str = "",
        margin_ms: int = 0,
        consumer: str = "",
        *,
        others: Sequence[int] = (),
    ) -> Flow[tuple[list[Message], int, float, dict[int, int]]]:
        """One pop of ``shard``: up to ``count`` messages of priority ``ceiling`` or a lower
        value, and (one server only) no higher than what the shards ``others`` may
        deliver. Returns them, the shard's rank after (-1: not looked at, the batch was
        full), the ms until something may be deliverable (-1: unknown) and the ranks of
        ``others``."""
        kind, made = self.kind, nonce()
        reply = yield kind.pop_call(shard, count, ceiling, vis_ms, made, lease, margin_ms, others)
        msgs, rest, hint, seen, unreadable = kind.popped(reply, shard, made, lease, others)
        if unreadable:
            msgs = yield from quarantine(self.ops, msgs, consumer)
        if kind.recurring:
            skipped: list[Message] = []
            for m in msgs:  # a recurring message's occurrence: push the next one now
                sched = occurrence_of(m) if m.headers else None  # most have no headers
                if sched is not None and not (
                    yield from ScheduleOps(self.ops).delivered(m, sched, shard)
                ):
                    skipped.append(m)  # overlap="skip": the last occurrence still runs
            if skipped:
                yield Batch(self.ops.ack_calls(skipped))
                gone = {id(m) for m in skipped}
                msgs = [m for m in msgs if id(m) not in gone]
        return msgs, rest, hint, seen

    def probed(self, shards: Sequence[int]) -> Flow[tuple[dict[int, int], float]]:
        """Each shard's rank (see :meth:`look`) and the ms until something may be
        deliverable (-1: unknown): one probe call (CALL_SHARDS shards a call), or on Redis
        Cluster (a script's keys share a slot) one probe per shard, pipelined."""
        ops = self.ops
        if ops.cross_slot and len(shards) <= CALL_SHARDS:
            *ranks, hint = yield ops.probe(shards)
            return dict(zip(shards, (int(r) for r in ranks), strict=True)), float(hint)
        step = CALL_SHARDS if ops.cross_slot else 1
        groups = [shards[i : i + step] for i in range(0, len(shards), step)]
        replies = yield Batch([ops.probe(g) for g in groups])
        found: dict[int, int] = {}
        hint = -1.0
        for group, (*seen, h) in zip(groups, replies, strict=True):
            found.update(zip(group, (int(r) for r in seen), strict=True))
            hint = _sooner(hint, float(h))
        return found, hint


def quarantine(ops: QueueOps, msgs: list[Message], consumer: str) -> Flow[list[Message]]:
    """Dead-letter the unreadable messages of a pop's (``codec.readable``), each with why
    (a RecordError, recorded as ``consumer``'s), in one round trip; the others. A record
    no consumer can read would otherwise come back at every visibility timeout and never
    reach its retry limit (no handler fails it). By id alone: whichever delivery of that
    record is current cannot be read either, and a delivery state written raw may not
    give back the token it made."""
    bad = [m for m in msgs if m.unreadable is not None]
    if bad:
        yield Batch(
            [
                ops.kind.nack_call(
                    ops.shard_of(m),
                    m.id or "",
                    "",
                    m.lease or "",
                    0.0,
                    "dead",
                    reasons.why(RecordError(m.unreadable), consumer),
                )
                for m in bad
            ]
        )
    return [m for m in msgs if m.unreadable is None]


def _lease_of(lease: Lease, shard: int) -> str:
    return lease if isinstance(lease, str) else lease[shard]


def _sooner(hint: float, other: float) -> float:
    """The nearer of two "ms until something may be deliverable" hints (-1: unknown)."""
    return other if other >= 0 and (hint < 0 or other < hint) else hint
