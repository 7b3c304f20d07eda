"""The sweeper's passes as flows (pure: no I/O).

Per queue and shard, a pass requeues expired deliveries (dead-lettering what spent its
retries), promotes due delayed messages, trims the dedupe window, and reaps consumer-group
members that stopped heartbeating. Every step is one bounded script, so any number of
sweepers may run at once and a killed one loses nothing.

An idle queue costs one call per pass: the read-only ``due`` script checks a batch of
shards at once (all of them where one script may span hash tags; one shard per call on
Redis Cluster), and only the shards it flags get the work scripts.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, fields
from typing import Protocol

from ..errors import (
    ConnectionFailed,
    DynoqError,
    InvalidArgument,
    LayoutError,
    PermissionDenied,
    QueueGone,
)
from . import codec, logs, validate
from .bounds import CALL_SHARDS, SWEEP_LIMIT
from .calls import Batch, Call, Cmd, Flow, pairs, server_time
from .group import reap
from .lua import script
from .opening import queue_names, read_queue
from .queue import QueueOps
from .reconcile import look
from .retry import backoff
from .schedules import ScheduleOps
from .settings import QueueSettings, TopicSettings
from .topics import TopicOps, read_topic, topic_names

log = logging.getLogger("dynoq.sweeper")

DEFAULT_INTERVAL = 1.0  # seconds between a sweeper's passes
REFRESH_INTERVAL = 10.0  # seconds between registry re-reads and member reaping
WORK_LOG_GAP = 10.0  # at most one "did something" line per this many seconds
IDLE_LOG_GAP = 60.0  # a heartbeat line when there was nothing to do
REQUEUE, PROMOTE, TRIM, FIRE = 1, 2, 4, 8  # the `due` script's bits


@dataclass
class QueueSweep:
    """What one pass did to one queue."""

    requeued: int = 0
    dead_lettered: int = 0
    promoted: int = 0
    trimmed: int = 0
    reaped: int = 0
    fired: int = 0  # recurring messages' occurrences pushed

    def add(self, other: QueueSweep) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    @property
    def busy(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))

    def summary(self) -> str:
        return " ".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self))


@dataclass
class TopicSweep:
    """What one pass did to one topic: per group queue, and members reaped."""

    queues: dict[str, QueueSweep] = field(default_factory=dict)
    members_removed: int = 0
    # gone broadcasting members left as they are: this user may not delete their queues
    members_kept: int = 0


@dataclass
class SweepReport:
    """What one pass (or several, added up) did, by queue."""

    queues: dict[str, QueueSweep] = field(default_factory=dict)
    errors: int = 0  # queues whose sweep failed (logged; retried next pass)
    passes: int = 0
    flow_calls: int = 0  # flows' calls a reconcile ended or pushed (reconcile.look)

    def total(self) -> QueueSweep:
        out = QueueSweep()
        for s in self.queues.values():
            out.add(s)
        return out

    @property
    def busy(self) -> bool:
        return self.flow_calls > 0 or any(s.busy for s in self.queues.values())

    def add(self, other: SweepReport) -> None:
        for name, s in other.queues.items():
            self.queues.setdefault(name, QueueSweep()).add(s)
        self.errors += other.errors
        self.passes += other.passes
        self.flow_calls += other.flow_calls

    def summary(self) -> str:
        return (
            f"{self.total().summary()} flow_calls={self.flow_calls} "
            f"queues={len(self.queues)} passes={self.passes}"
        )


class SweepObserver(Protocol):
    """What the sweeper reports to (dynoq.metrics.Metrics is one)."""

    def record_sweep(self, report: SweepReport) -> None: ...

    def sweep_failed(self) -> None: ...


def registered(prefix: str) -> Flow[dict[str, tuple[QueueSettings, str] | None]]:
    """Every registered queue and its settings and epoch token (None: registered but its
    settings are missing or unreadable, so it cannot be swept)."""
    names = yield queue_names(prefix)
    out: dict[str, tuple[QueueSettings, str] | None] = {}
    for name in names:
        try:
            out[name] = yield from read_queue(prefix, name)
        except (InvalidArgument, LayoutError):  # a bad name, settings it cannot read
            out[name] = None
    return out


def sweep_queue(
    q: QueueOps, *, reap_members: bool, cross_slot: bool, out: QueueSweep | None = None
) -> Flow[QueueSweep]:
    """One pass over one queue, counted into ``out`` as it goes (so what a pass did
    before it failed is still counted)."""
    out = QueueSweep() if out is None else out
    shards = q.settings.shards
    batch = CALL_SHARDS if cross_slot else 1  # shards one `due` call checks
    due = script("due")
    window = validate.to_ms(q.settings.dedupe_window)
    # Where a script may span hash tags, the first call also counts the queue's consumer
    # groups, so an idle queue without groups costs no reaping command (on Redis Cluster
    # that key is in another slot: reap unconditionally).
    count_groups = reap_members and cross_slot
    has_groups = reap_members and not cross_slot
    for start in range(0, shards, batch):
        group = range(start, min(start + batch, shards))
        keys = [k for i in group for k in due.key_list(q.shard_keys[i])]
        if count_groups:
            keys.append(q.keys.groups)
        masks = yield Call(due, keys, [window])
        if count_groups:
            has_groups, count_groups = int(masks.pop()) > 0, False
        for shard, mask in zip(group, masks, strict=True):
            if int(mask):
                yield from _sweep_shard(q, shard, int(mask), window, out)
    if has_groups:
        out.reaped = yield from reap(q.keys)
    return out


def _sweep_shard(q: QueueOps, shard: int, mask: int, window: int, out: QueueSweep) -> Flow[None]:
    keys = q.shard_keys[shard]
    if q.keyed and mask & (REQUEUE | PROMOTE):
        # A keyed shard's expired deliveries and due retries go back to the head of their
        # key (lua/krequeue-15.lua), never to `ready`.
        back, buried = yield from q.kind.requeue(shard)
        out.requeued += back
        out.dead_lettered += buried
        mask &= ~(REQUEUE | PROMOTE)
    if mask & REQUEUE:
        back, buried = yield from q.kind.requeue(shard)
        out.requeued += back
        out.dead_lettered += buried
        mask |= PROMOTE  # given-back deliveries wait in `delayed`, due now
    if mask & PROMOTE:
        more = 1
        while more:
            moved, more = yield script("promote").call(
                keys, [q.epoch, SWEEP_LIMIT], q.checked(f"promote on {q.name!r}")
            )
            out.promoted += int(moved)
    if mask & FIRE:
        out.fired += yield from ScheduleOps(q).fire_due(shard)
    if mask & TRIM:
        more = 1
        while more:
            dropped, more = yield script("trim").call(
                keys, [q.epoch, window, SWEEP_LIMIT], q.checked(f"trim on {q.name!r}")
            )
            out.trimmed += int(dropped)


def requeue_expired(q: QueueOps) -> Flow[int]:
    """Give back every expired delivery of every shard, or dead-letter it when its retries
    are spent (Dyno's processUnacks: ``Queue.requeue_expired``, one step of a pass)."""
    total = 0
    for shard in range(q.settings.shards):
        back, buried = yield from q.kind.requeue(shard)
        total += back + buried
    return total


def registered_topics(prefix: str) -> Flow[dict[str, tuple[TopicSettings, str] | None]]:
    """Every registered topic and its settings and epoch token (None: unreadable)."""
    names = yield topic_names(prefix)
    out: dict[str, tuple[TopicSettings, str] | None] = {}
    for name in names:
        try:
            out[name] = yield from read_topic(prefix, name)
        except (InvalidArgument, LayoutError):
            out[name] = None
    return out


def sweep_topic(t: TopicOps, *, reap_members: bool, cross_slot: bool) -> Flow[TopicSweep]:
    """One pass over a topic: sweep every group queue like a queue; with ``reap_members``,
    remove the queue (with its messages) of every broadcasting member that has not
    heartbeated for the topic's member_grace (nor subscribed within it)."""
    out = TopicSweep()
    targets = yield from t.targets()
    if reap_members:
        now = yield server_time()
        gone = []
        for target, (group, mode, since) in targets.items():
            if mode != "broadcasting":
                continue
            g = t.target_queue(target).keys.group(group)
            scores, ttls = yield Batch(
                [Cmd(("ZRANGE", g.members, 0, -1, "WITHSCORES")), Cmd(("HVALS", g.ttls))]
            )
            # Alive until its heartbeat's own lifetime ran out; reaped member_grace later.
            ends = [
                float(s) / 1000 + max((int(x) for x in ttls), default=0) / 1000
                for _, s in pairs(scores)
            ]
            if max([since, *ends]) + t.settings.member_grace < now:
                gone.append(target)
        if gone:
            try:
                # Their queues first: a user that may not delete a queue's keys (the
                # sweeper role) is refused before anything changed, and the members stay
                # routed, for an admin's sweeper to reap. drop() deletes them again, with
                # what a publish put there meanwhile.
                yield t.delete_queues(gone)
            except PermissionDenied:
                out.members_kept = len(gone)
                gone = []
        if gone:
            yield from t.drop(gone)
            groups = [t.target_queue(name).keys.group(targets[name][0]) for name in gone]
            yield Batch(
                [Cmd(("UNLINK", g.members, g.ttls, g.claim, g.registry, g.history)) for g in groups]
            )
            out.members_removed = len(gone)
            targets = {k: v for k, v in targets.items() if k not in gone}
    for target in targets:
        out.queues[target] = yield from sweep_queue(
            t.target_queue(target), reap_members=reap_members, cross_slot=cross_slot
        )
    return out


# -- a sweeper's passes and bookkeeping, shared by the sync and asyncio sweepers -----------


class Sweeps:
    """What a sweeper sweeps, and one pass over it as a flow (:meth:`run_once`): the
    registries of queues and topics re-read every ``refresh_interval`` seconds (new ones
    swept, removed ones forgotten); a failure confined to one queue or topic is counted
    and logged at most once a minute each, and the pass goes on."""

    def __init__(
        self,
        prefix: str,
        refresh_interval: float,
        *,
        cross_slot: bool,
        observer: SweepObserver | None,
    ) -> None:
        self.prefix = prefix
        self.refresh_interval = refresh_interval
        self.cross_slot = cross_slot
        self.observer = observer
        self.queues: dict[str, QueueOps] = {}
        self.topics: dict[str, TopicOps] = {}
        self.partial: SweepReport | None = None  # what a pass cut short by an outage did
        self._next_refresh = 0.0
        self._warned: dict[str, float] = {}
        self._flows_seen: dict[str, int] = {}  # reconcile.look's memory

    def run_once(self) -> Flow[SweepReport]:
        """One pass; raises ConnectionFailed when Redis is away (what the pass did until
        then is in ``partial``, and told to the observer)."""
        report = SweepReport(passes=1)
        now = time.monotonic()
        refresh = now >= self._next_refresh
        if refresh:
            self._next_refresh = now + self.refresh_interval
            yield from self._refresh()
        for name, queue in list(self.queues.items()):
            done = report.queues[name] = QueueSweep()  # kept even if the pass fails
            try:
                yield from sweep_queue(
                    queue, reap_members=refresh, cross_slot=self.cross_slot, out=done
                )
            except ConnectionFailed:
                if self.observer is not None:
                    self.observer.record_sweep(report)
                self.partial = report
                raise
            except QueueGone:
                # Deleted, or created anew: the registry says which on the next pass.
                self._gone(report, name, done)
            except DynoqError as exc:
                if not done.busy:
                    del report.queues[name]
                self._failed(report, f"queue {name!r}", exc)
        yield from self._sweep_topics(report, refresh)
        if refresh:  # the running flows: each looked at every refresh_interval
            yield from self._look_at_flows(report)
        if self.observer is not None:
            self.observer.record_sweep(report)
        return report

    def _sweep_topics(self, report: SweepReport, refresh: bool) -> Flow[None]:
        for name, topic in list(self.topics.items()):
            try:
                swept = yield from sweep_topic(
                    topic, reap_members=refresh, cross_slot=self.cross_slot
                )
            except ConnectionFailed:
                raise
            except QueueGone:
                self.topics.pop(name, None)
                self._next_refresh = 0.0
                log.debug("topic %r is gone or was created anew: read again next pass", name)
                continue
            except DynoqError as exc:
                self._failed(report, f"topic {name!r}", exc)
                continue
            report.queues.update(swept.queues)  # group queues are named <topic>:<group>
            if swept.members_kept:
                self._kept(name, swept.members_kept)
            if swept.members_removed:
                report.queues.setdefault(name, QueueSweep()).reaped += swept.members_removed

    def _look_at_flows(self, report: SweepReport) -> Flow[None]:
        try:
            settled, failed = yield from look(
                self.prefix,
                codec.DEFAULT_MAX_PAYLOAD_BYTES,
                self.queues.get,
                self._flows_seen,
                self.refresh_interval,
            )
        except ConnectionFailed:
            self.partial = report
            raise
        except DynoqError as exc:
            self._failed(report, "the running flows", exc)
            return
        report.flow_calls += settled
        for flow_id, why in failed:
            self._failed(report, f"flow {flow_id!r}", why)

    def take_partial(self) -> SweepReport | None:
        partial, self.partial = self.partial, None
        return partial

    def _gone(self, report: SweepReport, name: str, done: QueueSweep) -> None:
        """A queue vanished or was created anew under this pass: forget it, and read the
        registry again at the next pass (a vanished queue just leaves the walk)."""
        self.queues.pop(name, None)
        self._next_refresh = 0.0
        if not done.busy:
            del report.queues[name]
        log.debug("queue %r is gone or was created anew: read again next pass", name)

    def _failed(self, report: SweepReport, what: str, exc: DynoqError) -> None:
        report.errors += 1
        now = time.monotonic()
        if now - self._warned.get(what, -IDLE_LOG_GAP) >= IDLE_LOG_GAP:
            self._warned[what] = now  # once a minute per queue, not every pass
            log.warning("sweeping %s failed (retried every pass): %s", what, exc)

    def _kept(self, topic: str, members: int) -> None:
        what = f"members of topic {topic!r}"
        now = time.monotonic()
        if now - self._warned.get(what, -IDLE_LOG_GAP) >= IDLE_LOG_GAP:
            self._warned[what] = now  # once a minute per topic, not every pass
            log.warning(
                "topic %r: %d gone broadcasting member(s) left with their queues: "
                "this sweeper's user may not delete a queue (the sweeper role); "
                "run a sweeper as an admin user to reap them (docs/security.md)",
                topic,
                members,
            )

    def _refresh(self) -> Flow[None]:
        found = yield from registered(self.prefix)
        for gone in self.queues.keys() - found.keys():
            del self.queues[gone]
        for name, stored in sorted(found.items()):
            if stored is None:
                if name not in self._warned:  # once
                    self._warned[name] = time.monotonic()
                    log.warning("queue %r has no readable settings, not swept", name)
                continue
            settings, epoch = stored
            known = self.queues.get(name)
            if known is None or known.settings != settings or known.epoch != epoch:
                self.queues[name] = QueueOps(self.prefix, name, settings, epoch=epoch)
        topics = yield from registered_topics(self.prefix)
        kept = {}
        for name, topic in topics.items():
            if topic is None:
                continue
            known_topic = self.topics.get(name)
            if (
                known_topic is None
                or known_topic.settings != topic[0]
                or known_topic.epoch != topic[1]
            ):
                known_topic = TopicOps(self.prefix, name, topic[0], epoch=topic[1])
            kept[name] = known_topic
        self.topics = kept


class Progress:
    """What ``run_forever`` adds up and logs: totals, a line when work was done (at most
    every 10 s) or a heartbeat (every minute), and the backoff after failed passes."""

    def __init__(self, prefix: str, interval: float, observer: SweepObserver | None) -> None:
        self.observer = observer
        self.totals, self._pending = SweepReport(), SweepReport()
        self._failures = 0
        self._since = time.monotonic()  # start of what `_pending` covers
        self._last_log = self._since - WORK_LOG_GAP  # so the first work is logged at once
        log.info("sweeper started: prefix=%r interval=%.3gs", prefix, interval)

    def failed(self, exc: BaseException, partial: SweepReport | None) -> float:
        """Count what a failed pass did (``partial``) and log the failure; returns the
        seconds to wait before the next pass."""
        if partial is not None:
            self.totals.add(partial)
            self._pending.add(partial)
        self._failures += 1
        delay = backoff(self._failures)
        if self.observer is not None:
            self.observer.sweep_failed()
        unexpected = not isinstance(exc, DynoqError)
        level = (
            logging.WARNING if self._failures == 1 or self._failures % 10 == 0 else logging.DEBUG
        )
        logs.error(
            log,
            logging.ERROR if unexpected else level,
            "sweep failed (attempt %d, retrying in %.1fs)",
            self._failures,
            delay,
            exc=exc,
        )
        return delay

    def done(self, report: SweepReport) -> None:
        if self._failures:
            log.info("Redis reachable again after %d failed attempt(s)", self._failures)
            self._failures = 0
        self.totals.add(report)
        self._pending.add(report)
        now = time.monotonic()
        gap = now - self._last_log
        if (self._pending.busy and gap >= WORK_LOG_GAP) or gap >= IDLE_LOG_GAP:
            log.info("swept in the last %.1fs: %s", now - self._since, self._pending.summary())
            self._pending, self._last_log, self._since = SweepReport(), now, now

    def stopped(self) -> SweepReport:
        if self._pending.passes and self._pending.busy:
            log.info(
                "swept in the last %.1fs: %s",
                time.monotonic() - self._since,
                self._pending.summary(),
            )
        log.info("sweeper stopped; totals: %s", self.totals.summary())
        return self.totals
