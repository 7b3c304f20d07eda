"""The sweeper: background upkeep of every registered queue (DESIGN.md §4).

Per queue and shard it requeues expired deliveries (dead-lettering what spent its retries),
promotes due delayed messages, trims the dedupe window, and reaps consumer-group members
that stopped heartbeating. Every step is one bounded Lua script, so any number of sweepers
may run at once and a killed one loses nothing: nothing is held outside Redis.

An idle queue costs one command per pass: the read-only ``due`` script checks a batch of
shards at once (all of them on one Redis; one shard per call on Redis Cluster, where a
script's keys must share a slot), and only the shards it flags get the work scripts.
"""

from __future__ import annotations

import importlib
import logging
import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

import redis
from redis.cluster import RedisCluster

from . import codec
from .connection import translated
from .errors import ConnectionFailed, DynoqError, InvalidArgument, InvalidType
from .keys import QueueKeys, registry_key
from .queue import Queue
from .settings import QueueSettings

if TYPE_CHECKING:
    from .client import Client
    from .metrics import Metrics

log = logging.getLogger("dynoq.sweeper")

DEFAULT_INTERVAL = 1.0
STEP_LIMIT = 1000  # messages or ids one script call moves: keeps each script short
BATCH_SHARDS = 256  # shards one `due` call checks on a single Redis
REFRESH_INTERVAL = 10.0  # seconds between registry re-reads and member reaping
WORK_LOG_GAP = 10.0  # at most one "did something" line per this many seconds
IDLE_LOG_GAP = 60.0  # a heartbeat line when there was nothing to do
BACKOFF_BASE, BACKOFF_CAP = 0.1, 10.0

REQUEUE, PROMOTE, TRIM = 1, 2, 4  # the `due` script's bits

# What means "Redis is not reachable right now": retried with backoff, never fatal.
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    ConnectionFailed, redis.ConnectionError, redis.TimeoutError)

@dataclass
class QueueSweep:
    """What one pass did to one queue."""

    requeued: int = 0
    dead_lettered: int = 0
    promoted: int = 0
    trimmed: int = 0
    reaped: int = 0

    def add(self, other: QueueSweep) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    @property
    def busy(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))

    def summary(self) -> str:
        return " ".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self))


@dataclass
class SweepReport:
    """What one pass (or several, added up) did, by queue."""

    queues: dict[str, QueueSweep] = field(default_factory=dict)
    errors: int = 0  # queues whose sweep failed (logged; retried next pass)
    passes: int = 0

    def total(self) -> QueueSweep:
        out = QueueSweep()
        for s in self.queues.values():
            out.add(s)
        return out

    @property
    def busy(self) -> bool:
        return any(s.busy for s in self.queues.values())

    def add(self, other: SweepReport) -> None:
        for name, s in other.queues.items():
            self.queues.setdefault(name, QueueSweep()).add(s)
        self.errors += other.errors
        self.passes += other.passes

    def summary(self) -> str:
        return f"{self.total().summary()} queues={len(self.queues)} passes={self.passes}"


def existing_queue(client: Client, name: str) -> Queue | None:
    """The registered queue ``name``, or None. Unlike ``client.queue`` it never creates one."""
    with translated():
        pipe = client.redis.pipeline(transaction=False)
        pipe.sismember(registry_key(client.prefix), name)
        pipe.hgetall(QueueKeys(client.prefix, name).meta)
        member, raw = pipe.execute()
    if not member or not raw:
        return None
    settings = QueueSettings.from_hash({k.decode(): v.decode() for k, v in raw.items()})
    return Queue(client, name, settings)


@dataclass(frozen=True)
class _Groups:
    reap: Callable[[Any, str], int]  # dynoq.group.reap_stale_members
    key: Callable[[str, str], str]  # dynoq.group.groups_key: a queue's set of groups


def _load_groups() -> _Groups | None:
    # dynoq.group is optional here: without it the sweeper still does everything else.
    try:
        module = importlib.import_module("dynoq.group")
        return _Groups(module.reap_stale_members, module.groups_key)
    except (ImportError, AttributeError) as exc:
        log.info("consumer-group member reaping is off: %s", exc)
        return None


class Sweeper:
    """Sweeps every queue registered under ``client``'s prefix.

    ``run_once()`` does one pass; ``run_forever()`` repeats it every ``interval`` seconds
    until ``stop_event`` is set (or :meth:`stop` is called), riding out Redis outages.
    """

    def __init__(self, client: Client, *, interval: float = DEFAULT_INTERVAL,
                 refresh_interval: float = REFRESH_INTERVAL,
                 metrics: Metrics | None = None) -> None:
        for value, what in ((interval, "interval"), (refresh_interval, "refresh_interval")):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InvalidType(f"{what} must be a number of seconds")
            if not math.isfinite(value) or value <= 0:
                raise InvalidArgument(f"{what} must be a finite number of seconds > 0, "
                                      f"got {value!r}")
        self.client = client
        self.interval = float(interval)
        self.refresh_interval = float(refresh_interval)
        self.metrics = metrics
        self._queues: dict[str, Queue] = {}
        self._next_refresh = 0.0
        self._batch = 1 if isinstance(client.redis, RedisCluster) else BATCH_SHARDS
        self._groups = _load_groups()
        self._stop = threading.Event()
        self._warned: dict[str, float] = {}

    def stop(self) -> None:
        """Ask ``run_forever`` to return after the current step."""
        self._stop.set()

    # -- one pass ------------------------------------------------------------------------

    def run_once(self) -> SweepReport:
        """One pass over every registered queue. Raises on connection failures (the caller
        retries); a failure confined to one queue is logged and counted in ``errors``."""
        report = SweepReport(passes=1)
        with translated():
            refresh = time.monotonic() >= self._next_refresh
            if refresh:
                self._refresh()
                self._next_refresh = time.monotonic() + self.refresh_interval
            for name, queue in list(self._queues.items()):
                try:
                    report.queues[name] = self._sweep_queue(queue, reap=refresh)
                except CONNECTION_ERRORS:
                    raise
                except (DynoqError, redis.RedisError) as exc:
                    report.errors += 1
                    now = time.monotonic()
                    if now - self._warned.get(name, -IDLE_LOG_GAP) >= IDLE_LOG_GAP:
                        self._warned[name] = now  # once a minute per queue, not every pass
                        log.warning("sweeping queue %r failed (retried every pass): %s",
                                    name, exc)
        if self.metrics is not None:
            self.metrics.record_sweep(report)
        return report

    def _refresh(self) -> None:
        """Re-read the registry: sweep new queues, forget removed ones."""
        names = {n.decode() for n in self.client.redis.smembers(registry_key(self.client.prefix))}
        for gone in self._queues.keys() - names:
            del self._queues[gone]
        for name in sorted(names - self._queues.keys()):
            try:
                queue = existing_queue(self.client, name)
            except (KeyError, ValueError, TypeError) as exc:  # malformed metadata: skip
                log.warning("queue %r has unreadable settings, not swept: %s", name, exc)
                continue
            if queue is not None:
                self._queues[name] = queue

    def _sweep_queue(self, queue: Queue, *, reap: bool) -> QueueSweep:
        out = QueueSweep()
        shards = queue.settings.shards
        window = codec.to_ms(queue.settings.dedupe_window)
        # On one Redis the first call also counts the queue's consumer groups, so an idle
        # queue without groups costs no reaping command (on Cluster that key is in
        # another slot: reap unconditionally).
        groups_key = None
        if reap and self._groups is not None and self._batch > 1:
            groups_key = self._groups.key(self.client.prefix, queue.name)
        has_groups = reap and self._groups is not None and self._batch == 1
        for start in range(0, shards, self._batch):
            group = range(start, min(start + self._batch, shards))
            flat: list[str] = []
            for i in group:
                ks = queue.shard_keys(i)
                flat += [ks.unack, ks.delayed, ks.done]
            if groups_key is not None:
                flat.append(groups_key)
            masks = self.client.scripts.run_raw("due", flat, [window])
            if groups_key is not None:
                has_groups, groups_key = int(masks.pop()) > 0, None
            for shard, mask in zip(group, masks, strict=True):
                if int(mask):
                    self._sweep_shard(queue, shard, int(mask), window, out)
        if has_groups and self._groups is not None:
            out.reaped = int(self._groups.reap(self.client, queue.name))
        return out

    def _sweep_shard(self, queue: Queue, shard: int, mask: int, window: int,
                     out: QueueSweep) -> None:
        keys, scripts = queue.shard_keys(shard), self.client.scripts
        if mask & REQUEUE:
            back, buried = queue.requeue_counts(shard)
            out.requeued += back
            out.dead_lettered += buried
            mask |= PROMOTE  # requeued deliveries wait in `delayed`, due now
        if mask & PROMOTE:
            more = 1
            while more:
                moved, more = scripts.run("promote", keys, [STEP_LIMIT])
                out.promoted += int(moved)
        if mask & TRIM:
            more = 1
            while more:
                dropped, more = scripts.run("trim", keys, [window, STEP_LIMIT])
                out.trimmed += int(dropped)

    # -- forever -------------------------------------------------------------------------

    def run_forever(self, stop_event: threading.Event | None = None) -> SweepReport:
        """Sweep every ``interval`` seconds until ``stop_event`` (or :meth:`stop`) is set.
        Connection failures are logged and retried with capped exponential backoff; this
        never raises for them. Returns the totals."""
        if stop_event is not None:
            self._stop = stop_event  # so stop() and the caller's event are one
        stop = self._stop
        totals, pending = SweepReport(), SweepReport()
        failures = 0
        since = time.monotonic()  # start of what `pending` covers
        last_log = since - WORK_LOG_GAP  # so the first work is logged at once
        log.info("sweeper started: prefix=%r interval=%.3gs", self.client.prefix, self.interval)
        while not stop.is_set():
            started = time.monotonic()
            try:
                report = self.run_once()
            except Exception as exc:  # a daemon logs and retries, never exits
                failures += 1
                delay = min(BACKOFF_CAP, BACKOFF_BASE * 2 ** min(failures - 1, 20))
                delay *= random.uniform(0.5, 1.0)  # jitter: sweepers do not retry in step
                if self.metrics is not None:
                    self.metrics.sweep_failed()
                level = logging.WARNING if failures == 1 or failures % 10 == 0 else logging.DEBUG
                unexpected = not isinstance(exc, (*CONNECTION_ERRORS, redis.RedisError,
                                                  DynoqError))
                log.log(logging.ERROR if unexpected else level,
                        "sweep failed (attempt %d, retrying in %.1fs): %s", failures, delay, exc,
                        exc_info=unexpected)
                stop.wait(delay)
                continue
            if failures:
                log.info("Redis reachable again after %d failed attempt(s)", failures)
                failures = 0
            totals.add(report)
            pending.add(report)
            now = time.monotonic()
            gap = now - last_log
            if (pending.busy and gap >= WORK_LOG_GAP) or gap >= IDLE_LOG_GAP:
                log.info("swept in the last %.1fs: %s", now - since, pending.summary())
                pending, last_log, since = SweepReport(), now, now
            stop.wait(max(0.0, self.interval - (time.monotonic() - started)))
        if pending.passes and pending.busy:
            log.info("swept in the last %.1fs: %s", time.monotonic() - since,
                     pending.summary())
        log.info("sweeper stopped; totals: %s", totals.summary())
        return totals
