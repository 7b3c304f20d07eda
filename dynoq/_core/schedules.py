"""Recurring messages: ``every`` N seconds or on a ``cron`` expression (pure: no I/O).

A schedule lives in one shard of its queue (the shard of its id, or of its key on an
ordered queue): its definition in the shard's ``sched`` hash, its latest tick pushed in the
``marks`` zset. Each tick's occurrence has a deterministic id (``<schedule>@<tick ms>``,
plus a suffix that makes it hash to the schedule's shard), and the ``schedule-fire`` script
pushes it only if no later tick was pushed: so exactly one occurrence per tick, however
many consumers and sweepers fire it.

Who fires the next tick: the pop that delivers an occurrence (at once), and the sweeper
for any schedule whose latest tick has come (a consumer killed in between, or nobody
consuming). Ticks come from the definition, never from delivery times, so nothing
drifts. A tick at most ``MISFIRE_GRACE`` late (a stalled process, a busy server) is still
pushed, at once; ticks missed for longer (nothing ran) are skipped, not replayed. Times are
the server's.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import zoneinfo
from dataclasses import dataclass
from typing import Any

import cronsim
import msgpack

from ..errors import InvalidArgument, OrderedQueueError
from ..message import Message
from . import validate
from .calls import Batch, Cmd, Flow, pairs, server_time, text
from .lua import script
from .queue import QueueOps

log = logging.getLogger("dynoq.schedules")
SCHEDULE, TICK = "dynoq.schedule", "dynoq.tick"  # headers of an occurrence
MAX_SCHEDULES = 10_000  # per shard
# A tick this late is pushed late rather than skipped: a pause of a second must not lose
# an occurrence, an outage of an hour must not replay it (bounded: grace / every at most).
MISFIRE_GRACE_MS = 1000
_FIRE, _START = script("schedule-fire"), script("schedule-start")
OVERLAPS = ("allow", "skip")  # what an occurrence does while the last one waits or runs


@dataclass(frozen=True)
class Schedule:
    """A recurring message: its id, when it recurs (``every`` seconds or ``cron``), what
    each occurrence carries, and the latest tick pushed (seconds, server clock)."""

    id: str
    every: float | None
    cron: str | None
    payload: Any
    priority: int
    key: str | None
    headers: dict[str, Any] | None
    last_tick: float | None
    anchor: float  # when it was scheduled: `every` ticks are anchor + k * every
    tz: str | None = None  # the IANA time zone of `cron` (None: UTC)
    overlap: str = "allow"  # "skip": no occurrence runs while the last one waits or runs

    def next_tick(self, after_ms: int, now_ms: int) -> int:
        """The first tick after ``after_ms`` that is at most ``MISFIRE_GRACE_MS`` in the
        past (ticks missed for longer are skipped), in ms."""
        start = max(after_ms, now_ms - MISFIRE_GRACE_MS - 1)
        if self.every is not None:
            every_ms, anchor_ms = round(self.every * 1000), round(self.anchor * 1000)
            return anchor_ms + (math.floor((start - anchor_ms) / every_ms) + 1) * every_ms
        assert self.cron is not None
        # cronsim walks wall-clock times in the zone: a time skipped by a spring-forward
        # runs once at the jump, one repeated by a fall-back once (its first)
        after = dt.datetime.fromtimestamp(start / 1000, zone(self.tz))
        return round(next(cronsim.CronSim(self.cron, after)).timestamp() * 1000)


def zone(tz: str | None) -> dt.tzinfo:
    """The time zone of an IANA name (None: UTC)."""
    return dt.timezone.utc if tz is None else zoneinfo.ZoneInfo(tz)


def check_overlap(overlap: object) -> str:
    if overlap not in OVERLAPS:
        raise InvalidArgument(f"overlap must be one of {', '.join(map(repr, OVERLAPS))}")
    return str(overlap)


def check_when(
    every: object, cron: object, tz: object = None
) -> tuple[float | None, str | None, str | None]:
    """Exactly one of ``every`` (seconds, at least 1 ms) and ``cron`` (a 5-field cron
    expression, in the IANA time zone ``tz``: default UTC; only with cron)."""
    if (every is None) == (cron is None):
        raise InvalidArgument("give exactly one of every= (seconds) and cron= (an expression)")
    if every is not None:
        if tz is not None:
            raise InvalidArgument("tz= goes with cron= (every= counts seconds, in no zone)")
        return validate.check_seconds(every, "every", minimum=0.001), None, None
    expr = validate.check_text(cron, "cron")
    if tz is not None:
        tz = validate.check_text(tz, "tz", max_length=64)
        try:
            zone(tz)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise InvalidArgument(
                f"tz {tz!r} is not a time zone: give an IANA name (Europe/Berlin, "
                "America/New_York, UTC)"
            ) from None
    try:
        next(cronsim.CronSim(expr, dt.datetime.now(zone(tz))))
    except (cronsim.CronSimError, StopIteration, ValueError) as exc:
        raise InvalidArgument(f"cron {expr!r} is invalid: {exc}") from None
    return None, expr, tz


class ScheduleOps:
    """The recurring messages of one queue."""

    def __init__(self, queue: QueueOps) -> None:
        self.q = queue

    def home(self, sched_id: str, key: str | None) -> int:
        return self.q.shard_for(key if self.q.settings.ordered and key else sched_id)

    def occurrence_id(self, sched_id: str, tick_ms: int, shard: int) -> str:
        """``<schedule>@<tick>``, suffixed so that it hashes to ``shard`` (by-id operations
        find a concurrent queue's message in the shard of its id)."""
        base = f"{sched_id}@{tick_ms}"
        if self.q.settings.ordered or self.q.shard_for(base) == shard:
            return base
        n = 1
        while self.q.shard_for(f"{base}.{n}") != shard:
            n += 1
        return f"{base}.{n}"

    def schedule(
        self,
        sched_id: str,
        payload: Any,
        *,
        every: float | None = None,
        cron: str | None = None,
        tz: str | None = None,
        overlap: str = "allow",
        priority: int = 0,
        key: str | None = None,
        headers: dict[str, Any] | None = None,
    ) -> Flow[float]:
        """Store (or replace) a schedule and push its first occurrence; returns its first
        tick (seconds)."""
        sched_id = validate.check_id(sched_id, "schedule id")
        if "@" in sched_id:
            raise InvalidArgument(
                "a schedule id may not contain '@' (its occurrences' ids are <schedule id>@<tick>)"
            )
        every, cron, tz = check_when(every, cron, tz)
        overlap = check_overlap(overlap)
        if self.q.settings.keyed:
            raise OrderedQueueError(
                "recurring messages are not supported on a queue with "
                'ordered="key" yet: push each occurrence from a '
                "schedule on another queue"
            )
        # What each occurrence will be, checked now (delay and priority rules included).
        self.q.prepare(
            Message(payload, id=f"{sched_id}@0", priority=priority, key=key, headers=headers)
        )
        shard = self.home(sched_id, validate.check_key(key))
        keys = self.q.shard_keys[shard]
        checks = self.q.epoch_checks([shard], f"schedule on {self.q.name!r}")
        *_, held = yield Batch([*checks, Cmd(("HLEN", keys.sched))])
        if int(held) >= MAX_SCHEDULES:
            raise InvalidArgument(f"at most {MAX_SCHEDULES} schedules per shard")
        yield from self._forget(sched_id)  # a replaced schedule starts afresh
        now = yield server_time()
        # (a zone and an overlap stored only when given: a schedule without them reads as
        # before, at every version)
        spec = [every, cron, now, priority, key, headers, payload]
        spec += [tz, overlap] if overlap != "allow" else [tz] if tz else []
        yield Batch([Cmd(("HSET", keys.sched, sched_id, msgpack.packb(spec, use_bin_type=True)))])
        s = _decode(sched_id, spec, None)
        tick = s.next_tick(round(now * 1000), round(now * 1000))
        yield self._fire(s, shard, tick)
        return tick / 1000

    def _fire(self, s: Schedule, shard: int, tick_ms: int) -> Any:
        msg = Message(
            s.payload,
            id=self.occurrence_id(s.id, tick_ms, shard),
            priority=s.priority,
            key=s.key,
            headers={**(s.headers or {}), SCHEDULE: s.id, TICK: tick_ms},
        )
        out = self.q.prepare(msg)
        return _FIRE.call(
            self.q.shard_keys[shard],
            [
                self.q.epoch,
                s.id,
                tick_ms,
                out.id,
                out.priority,
                out.body,
                self.q.wake,
                validate.to_ms(self.q.settings.dedupe_window),
            ],
            self.q.checked(f"schedule {s.id!r} on {self.q.name!r}", int),
        )

    def fire_next(self, sched_id: str, shard: int) -> Flow[int]:
        """Push the next occurrence once the latest one pushed has come due (never further
        ahead); returns 1 when this call pushed it."""
        _, fired = yield from self._fire_next(sched_id, shard)
        return fired

    def delivered(self, msg: Message, sched_id: str, shard: int) -> Flow[bool]:
        """A pop delivered an occurrence of schedule ``sched_id``: push the next one (see
        :meth:`fire_next`) and say whether this one runs: False on an overlap="skip"
        schedule while the last occurrence that ran still waits or runs."""
        s, _ = yield from self._fire_next(sched_id, shard)
        if s is None or s.overlap != "skip":
            return True
        running = yield _START.call(
            self.q.shard_keys[shard],
            [self.q.epoch, sched_id, msg.id],
            self.q.checked(f"schedule {sched_id!r} on {self.q.name!r}"),
        )
        if running == 1:
            return True
        log.info(
            "schedule %r of queue %r: occurrence %s skipped, %s still waits or runs",
            sched_id,
            self.q.name,
            msg.id,
            text(running),
        )
        return False

    def _fire_next(self, sched_id: str, shard: int) -> Flow[tuple[Schedule | None, int]]:
        """The schedule (None: gone, or unreadable) and whether its next occurrence was
        pushed by this call (1) or not (0)."""
        keys = self.q.shard_keys[shard]
        raw, mark = yield Batch(
            [Cmd(("HGET", keys.sched, sched_id)), Cmd(("ZSCORE", keys.marks, sched_id))]
        )
        if raw is None:
            return None, 0
        now_ms = round((yield server_time()) * 1000)
        after = round(float(mark)) if mark is not None else now_ms
        try:
            s = _decode(sched_id, msgpack.unpackb(raw, raw=False), mark)
            tick = s.next_tick(after, now_ms)
        except (ValueError, TypeError, cronsim.CronSimError, zoneinfo.ZoneInfoNotFoundError):
            # a definition dynoq did not write: it fires nothing, and stops no pop
            log.warning("schedule %r of queue %r cannot be read: not fired", sched_id, self.q.name)
            return None, 0
        if after > now_ms:
            return s, 0  # the latest occurrence is still waiting for its tick
        return s, int((yield self._fire(s, shard, tick)))

    def fire_due(self, shard: int) -> Flow[int]:
        """The sweeper's step: fire the next tick of every schedule of ``shard`` whose
        latest tick has come."""
        now_ms = round((yield server_time()) * 1000)
        due = yield Cmd(
            ("ZRANGEBYSCORE", self.q.shard_keys[shard].marks, "-inf", now_ms, "LIMIT", 0, 1000)
        )
        fired = 0
        for raw in due:
            fired += yield from self.fire_next(text(raw), shard)
        return fired

    def unschedule(self, sched_id: str) -> Flow[bool]:
        """Stop a schedule; its occurrence waiting for its tick is removed too."""
        sched_id = validate.check_id(sched_id, "schedule id")
        return (yield from self._forget(sched_id))

    def _forget(self, sched_id: str) -> Flow[bool]:
        found = False
        for shard, keys in enumerate(self.q.shard_keys):
            checks = self.q.epoch_checks([shard], f"unschedule on {self.q.name!r}")
            *_, raw, mark = yield Batch(
                [
                    *checks,
                    Cmd(("HGET", keys.sched, sched_id)),
                    Cmd(("ZSCORE", keys.marks, sched_id)),
                ]
            )
            if raw is None:
                continue
            found = True
            yield Batch(
                [
                    Cmd(("HDEL", keys.sched, sched_id)),
                    Cmd(("ZREM", keys.marks, sched_id)),
                    Cmd(("HDEL", keys.control, f"run:{sched_id}")),  # overlap="skip"'s
                ]
            )
            if mark is not None:  # the pending occurrence, if it is still waiting
                occurrence = self.occurrence_id(sched_id, round(float(mark)), shard)
                yield self.q.kind.remove_call(shard, occurrence)
        return found

    def schedules(self) -> Flow[list[Schedule]]:
        """Every schedule of the queue, sorted by id."""
        checks = self.q.epoch_checks(range(len(self.q.shard_keys)), f"schedules of {self.q.name!r}")
        replies = yield Batch(
            [
                *checks,
                *(
                    c
                    for k in self.q.shard_keys
                    for c in (
                        Cmd(("HGETALL", k.sched)),
                        Cmd(("ZRANGE", k.marks, 0, -1, "WITHSCORES")),
                    )
                ),
            ]
        )
        replies = replies[len(checks) :]
        out = []
        for defs, marks in zip(replies[::2], replies[1::2], strict=True):
            ticks = {text(m): s for m, s in pairs(marks)}
            for sid, raw in pairs(defs):
                name = text(sid)
                out.append(_decode(name, msgpack.unpackb(raw, raw=False), ticks.get(name)))
        return sorted(out, key=lambda s: s.id)


def _decode(sched_id: str, spec: list[Any], mark: Any) -> Schedule:
    every, cron, anchor, priority, key, headers, payload, *more = spec
    more += [None, "allow"][len(more) :]
    return Schedule(
        sched_id,
        every,
        cron,
        payload,
        priority,
        key,
        headers,
        None if mark is None else float(mark) / 1000,
        float(anchor),
        more[0],
        "skip" if more[1] == "skip" else "allow",
    )


def occurrence_of(msg: Message) -> str | None:
    """The schedule a delivered message is an occurrence of, if it is one."""
    h = msg.headers
    return h.get(SCHEDULE) if h and isinstance(h.get(SCHEDULE), str) else None


__all__ = ["Schedule", "ScheduleOps", "check_overlap", "check_when", "occurrence_of"]
