"""The chaos soak's checker: a pure function over what the soak recorded (no I/O).

What the producers confirmed (:class:`Pushed`), every handler call (:class:`Handling`,
written by the handler itself, in Redis, before it does anything else), the ids left in
the dead letters, and what the harness did (:class:`Event`: kills, restarts, failovers)
go in; a :class:`Report` comes out, whose ``failures()`` are the figures that must be 0.

Times are microseconds on the server's clock (``TIME``), so every process's handlings
compare on one clock. Record formats (``|``-separated; ids, keys and names hold no ``|``)
are parsed here too, so that the format is written once.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

# Causes of a duplicate handling, in the order they are tried (the first that fits).
PLANNED = "retry after a planned handler failure"
SIGKILL = "after a SIGKILL of the consumer that handled it"
TAKEOVER = "after a lease takeover"
RESTART = "after a server restart or failover"
EXPIRY = "after a visibility expiry"
OTHER = "other"
CAUSES = (PLANNED, SIGKILL, TAKEOVER, RESTART, EXPIRY, OTHER)

# Event kinds (what the harness did).
KILL_CONSUMER, KILL_PRODUCER, KILL_SWEEPER = (
    "sigkill consumer",
    "sigkill producer",
    "sigkill sweeper",
)
KILL_CONNECTION, SERVER_RESTART, FAILOVER = "connection killed", "server restart", "master failover"
EVENT_KINDS = (
    KILL_CONSUMER,
    KILL_PRODUCER,
    KILL_SWEEPER,
    KILL_CONNECTION,
    SERVER_RESTART,
    FAILOVER,
)
_EVENT_ROWS = {
    KILL_CONSUMER: "consumers SIGKILLed (and restarted)",
    KILL_PRODUCER: "producers SIGKILLed (and restarted)",
    KILL_SWEEPER: "sweepers SIGKILLed (and restarted)",
    KILL_CONNECTION: "connections killed (CLIENT KILL)",
    SERVER_RESTART: "server restarts (SIGKILL, AOF replay)",
    FAILOVER: "master failovers (SIGKILL, replica promoted)",
}


@dataclass(frozen=True)
class Pushed:
    """A push a producer saw confirmed. ``key``/``seq``: ordering key and its per-key
    sequence number (None on the concurrent queue)."""

    id: str
    queue: str
    key: str | None = None
    seq: int | None = None


@dataclass(frozen=True)
class Handling:
    """One handler call, as the handler recorded it on entry.

    ``held``: whether the delivery's fence was still current at that moment (an ordered
    shard's lease value, a message group's key fence; None when the message came
    unfenced: a concurrent queue). ``fence``:
    ``msg.fence`` (None without a lease). ``planned``: the handler then failed on purpose.
    """

    at: int  # server time at handler start, microseconds
    consumer: str  # the consumer process incarnation ("c1.0", "c1.1" after a restart, ...)
    queue: str
    id: str
    shard: int
    key: str | None = None
    seq: int | None = None
    fence: int | None = None
    held: bool | None = None
    refused: bool = False  # its write was refused by the fenced store (taken over)
    attempts: int = 1
    planned: bool = False
    ended: int | None = None  # server time the handler was done (keyed queues; None: unknown)


@dataclass(frozen=True)
class Event:
    at: int  # server time, microseconds
    kind: str  # one of EVENT_KINDS
    target: str = ""  # the process incarnation or node it hit
    until: int | None = None  # an outage's end (a restart or failover), microseconds


@dataclass
class Report:
    pushed: int = 0
    handled: int = 0  # unique confirmed ids handled at least once
    handled_unconfirmed: int = 0  # unique ids handled that no producer saw confirmed
    lost: int = 0
    lost_ids: list[str] = field(default_factory=list)
    order_violations: int = 0
    violation_examples: list[str] = field(default_factory=list)
    overlaps: int = 0  # keyed queues: a key handled twice at once, with no takeover
    overlap_examples: list[str] = field(default_factory=list)
    without_lease: int = 0
    stale_fence: int = 0
    stale_examples: list[str] = field(default_factory=list)
    refused: Counter[str] = field(default_factory=Counter)  # by queue: writes the fenced
    # store refused (their handler failed: retried)
    dead: int = 0
    duplicates: Counter[str] = field(default_factory=Counter)
    unexplained: list[str] = field(default_factory=list)  # a few duplicates of cause OTHER
    left_in_flight: int = 0
    left_waiting: int = 0
    events: Counter[str] = field(default_factory=Counter)
    calls: Counter[str] = field(default_factory=Counter)  # handler calls by consumer name

    def failures(self) -> list[str]:
        """The must-be-0 figures that are not 0, named."""
        figures = {
            "lost": self.lost,
            "order violations": self.order_violations,
            "same-key overlaps": self.overlaps,
            "handled without the lease": self.without_lease,
            "handled with a stale fence": self.stale_fence,
            "left in flight": self.left_in_flight,
            "left waiting": self.left_waiting,
        }
        return [f"{name} = {n}" for name, n in figures.items() if n]

    def rows(self) -> list[tuple[str, str, str]]:
        must = "must be 0"
        dup_total = sum(n for c, n in self.duplicates.items() if c != PLANNED)
        rows = [
            ("pushed (confirmed)", str(self.pushed), ""),
            ("handled (unique)", str(self.handled), ""),
            ("handled, push never confirmed", str(self.handled_unconfirmed), ""),
            ("lost", str(self.lost), must),
            ("per-key order violations", str(self.order_violations), must),
            ("same-key overlaps (message groups)", str(self.overlaps), must),
            ("handled without the lease", str(self.without_lease), must),
            ("handled with a stale fence", str(self.stale_fence), must),
            ("writes refused by the fence (taken over)", str(self.refused.total()), ""),
            *((f"  on {q}", str(n), "") for q, n in sorted(self.refused.items())),
            ("dead-lettered", str(self.dead), ""),
            ("duplicates", str(dup_total), ""),
        ]
        rows += [(f"  {c}", str(self.duplicates[c]), "") for c in CAUSES if c != PLANNED]
        rows += [
            (PLANNED, str(self.duplicates[PLANNED]), ""),
            ("left in flight", str(self.left_in_flight), must),
            ("left waiting", str(self.left_waiting), must),
        ]
        rows += [(_EVENT_ROWS[kind], str(self.events[kind]), "") for kind in EVENT_KINDS]
        rows += [
            (f"handler calls by {name} (every incarnation)", str(n), "")
            for name, n in sorted(self.calls.items())
        ]
        return rows


def check(
    pushed: Iterable[Pushed],
    handlings: Iterable[Handling],
    dead: Iterable[str],
    events: Iterable[Event],
    *,
    visibility: float,
    left_in_flight: int = 0,
    left_waiting: int = 0,
    keyed: Iterable[str] = (),
) -> Report:
    """Judge a soak from its records.

    ``keyed``: the queues with ordered="key" (message groups). Their fences are per key
    (not per shard), and a key may not be handled by two calls at once: a handling that
    starts before another of its key ended, with no takeover between them (a higher
    fence), is a same-key overlap.

    lost: confirmed ids never handled and not dead-lettered. Order: for each key, a seq
    whose first handling started before the first handling of the seq before it.
    Without the lease: a handling whose lease token was no longer the shard's lease.
    Stale fence: a handling whose fence is lower than one an earlier handling of that
    shard already had. Each handling of an id after its first is a duplicate, with the
    first cause that fits, judged against the handling before it: a planned failure of
    that one; a SIGKILL of its consumer in between; a grown fence; a server restart or
    failover whose outage overlaps the time in between; ``visibility`` seconds (90 %) or
    more in between; else other.
    """
    pushed = list(pushed)
    handlings = list(handlings)
    refused = Counter(h.queue for h in handlings if h.refused)
    handlings = [h for h in handlings if not h.refused]  # they did nothing
    dead_ids = set(dead)
    events = sorted(events, key=lambda e: e.at)
    by_id: dict[str, list[Handling]] = defaultdict(list)
    for h in sorted(handlings, key=lambda h: h.at):
        by_id[h.id].append(h)
    confirmed = {p.id for p in pushed}
    report = Report(
        pushed=len(confirmed),
        left_in_flight=left_in_flight,
        left_waiting=left_waiting,
        events=Counter(e.kind for e in events),
    )
    report.refused = refused
    report.calls = Counter(h.consumer.split(".")[0] for h in handlings)
    report.handled = sum(1 for i in confirmed if i in by_id)
    report.handled_unconfirmed = sum(1 for i in by_id if i not in confirmed)
    report.lost_ids = sorted(i for i in confirmed if i not in by_id and i not in dead_ids)
    report.lost = len(report.lost_ids)
    report.dead = len(dead_ids)
    _order(report, pushed, by_id)
    all_handlings = [h for hs in by_id.values() for h in hs]
    keyed = set(keyed)
    report.without_lease = sum(1 for h in all_handlings if h.held is False)
    _stale_fences(report, all_handlings, keyed)
    _overlaps(report, [h for h in all_handlings if h.queue in keyed])
    vis_us = int(visibility * 0.9 * 1_000_000)
    for hs in by_id.values():
        for before, again in itertools.pairwise(hs):
            cause = _cause(before, again, events, vis_us)
            report.duplicates[cause] += 1
            if cause == OTHER and len(report.unexplained) < 5:
                report.unexplained.append(f"{again.id}: {_show(before)}, then {_show(again)}")
    return report


def _order(report: Report, pushed: list[Pushed], by_id: Mapping[str, list[Handling]]) -> None:
    # (queue, key) -> seq -> (at, id)
    first: dict[tuple[str, str], dict[int, tuple[int, str]]] = defaultdict(dict)
    for p in pushed:
        if p.key is not None and p.seq is not None and p.id in by_id:
            first[(p.queue, p.key)][p.seq] = (by_id[p.id][0].at, p.id)
    for (_, key), seqs in first.items():
        for seq, (at, msg_id) in seqs.items():
            prev = seqs.get(seq - 1)
            if prev is not None and at < prev[0]:
                report.order_violations += 1
                if len(report.violation_examples) < 5:
                    report.violation_examples.append(
                        f"{key}: seq {seq} ({msg_id}) first handled {(prev[0] - at) / 1000:.1f}"
                        f" ms before seq {seq - 1} ({prev[1]})"
                    )


def _overlaps(report: Report, handlings: list[Handling]) -> None:
    by_key: dict[tuple[str, str], list[Handling]] = defaultdict(list)
    for h in handlings:
        if h.key is not None:
            by_key[(h.queue, h.key)].append(h)
    for (_, key), hs in by_key.items():
        hs.sort(key=lambda h: h.at)
        for j, later in enumerate(hs):
            for before in hs[:j]:
                if (
                    before.ended is not None
                    and later.at < before.ended
                    and (later.fence or 0) <= (before.fence or 0)
                ):
                    report.overlaps += 1
                    if len(report.overlap_examples) < 5:
                        report.overlap_examples.append(
                            f"{key}: {later.id} ({_show(later)}) started while {before.id} "
                            f"({_show(before)}) ran"
                        )
                    break


def _stale_fences(
    report: Report, handlings: list[Handling], keyed: AbstractSet[str] = frozenset()
) -> None:
    # A shard's fence, or a keyed queue's key's fence: each may only grow.
    by_shard: dict[tuple[str, int | str | None], list[Handling]] = defaultdict(list)
    for h in handlings:
        if h.fence is not None:
            by_shard[(h.queue, h.key if h.queue in keyed else h.shard)].append(h)
    for hs in by_shard.values():
        highest: Handling | None = None
        for h in sorted(hs, key=lambda h: h.at):
            assert h.fence is not None
            if highest is not None and h.fence < (highest.fence or 0):
                report.stale_fence += 1
                if len(report.stale_examples) < 5:
                    report.stale_examples.append(
                        f"{h.queue} {h.id} ({_show(h)}) after {highest.id} ({_show(highest)})"
                    )
            if highest is None or h.fence > (highest.fence or 0):
                highest = h


def _show(h: Handling) -> str:
    fence = "" if h.fence is None else f" fence {h.fence}"
    return f"{h.consumer} at {h.at / 1e6:.3f} (shard {h.shard}{fence}, attempt {h.attempts})"


def _between(
    events: list[Event], lo: int, hi: int, kinds: tuple[str, ...], target: str | None = None
) -> bool:
    """Whether such an event (or a part of its outage) falls between ``lo`` and ``hi``."""
    return any(
        e.at <= hi
        and (e.until or e.at) >= lo
        and e.kind in kinds
        and (target is None or e.target == target)
        for e in events
    )


def _cause(before: Handling, again: Handling, events: list[Event], vis_us: int) -> str:
    if before.planned:
        return PLANNED
    if _between(events, before.at, again.at, (KILL_CONSUMER,), before.consumer):
        return SIGKILL
    if before.fence is not None and again.fence is not None and again.fence > before.fence:
        return TAKEOVER
    if _between(events, before.at, again.at, (SERVER_RESTART, FAILOVER)):
        return RESTART
    if again.at - before.at >= vis_us:
        return EXPIRY
    return OTHER


# -- record formats (written by the soak's processes, read back here) ---------------------


def handling_value(
    consumer: str,
    queue: str,
    msg_id: str,
    key: str | None,
    seq: int | None,
    shard: int,
    fence: int | None,
    attempts: int,
    planned: bool,
) -> str:
    """The part of a handling record the handler knows; the recording script prepends
    ``<server time us>|<held: 1, r (refused), or empty unfenced>|``."""
    return "|".join(
        [
            consumer,
            queue,
            msg_id,
            key or "",
            "" if seq is None else str(seq),
            str(shard),
            "" if fence is None else str(fence),
            str(attempts),
            "1" if planned else "0",
        ]
    )


def parse_handling(raw: str, ended: str | None = None) -> Handling:
    """A handling record; ``ended``: the end record of the same call, if any (its
    server time first, as the recording script writes it)."""
    at, held, consumer, queue, msg_id, key, seq, shard, fence, attempts, planned = raw.split("|")
    return Handling(
        at=int(at),
        consumer=consumer,
        queue=queue,
        id=msg_id,
        shard=int(shard),
        key=key or None,
        seq=int(seq) if seq else None,
        fence=int(fence) if fence else None,
        held=None if held in ("", "r") else held == "1",
        refused=held == "r",
        attempts=int(attempts),
        planned=planned == "1",
        ended=int(ended.split("|", 1)[0]) if ended else None,
    )


def pushed_value(queue: str, key: str | None, seq: int | None) -> str:
    return f"{queue}|{key or ''}|{'' if seq is None else seq}"


def parse_pushed(msg_id: str, raw: str) -> Pushed:
    queue, key, seq = raw.split("|")
    return Pushed(msg_id, queue, key or None, int(seq) if seq else None)
