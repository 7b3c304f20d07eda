"""The live numbers: one thread samples every overview queue's counts at a fixed interval
and keeps the last minutes of them for the charts.

One sample is one batch (one round trip per server node) of ``stats`` on every shard of
every sampled queue, then the server's clock. Rates (pushed, acked, failed per second) are
the deltas of the shards' cumulative counts between two samples over the server-clock
time between them; so however many browsers watch, Redis sees one sampler.
"""

from __future__ import annotations

import collections
import itertools
import logging
import threading
import time
from dataclasses import dataclass, field

from .._core import inspect, logs
from ..errors import DynoqError, QueueGone
from ..message import QueueStats
from .data import Reader, Source, Sources

log = logging.getLogger("dynoq.dashboard")

# Cumulative counts, then gauges, per sampled queue.
COUNTS = ("pushed", "acked", "failed")
GAUGES = ("ready", "delayed", "in_flight", "dead")


def _counts(stats: QueueStats) -> tuple[int, ...]:
    failed = stats.total("retried") + stats.total("expired") + stats.total("dead_lettered")
    return (
        stats.total("pushed"),
        stats.total("acked"),
        failed,
        stats.ready,
        stats.delayed,
        stats.unacked,
        stats.dead,
    )


@dataclass(frozen=True)
class Snapshot:
    """One sample: the server time, the queues sampled and their stats."""

    at: float
    sources: Sources
    stats: dict[str, QueueStats]
    error: str | None = None


@dataclass
class _Point:
    at: float
    values: dict[str, tuple[int, ...]] = field(default_factory=dict)


class Sampler:
    """Samples every ``interval`` seconds, keeps ``window`` seconds. Thread-safe."""

    def __init__(self, reader: Reader, *, interval: float, window: float, limit: int) -> None:
        self.reader = reader
        self.interval = interval
        self.limit = limit
        self._points: collections.deque[_Point] = collections.deque(
            maxlen=max(int(window / interval), 2) + 1
        )
        self._latest: Snapshot | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None  # None: not sampling
        self._starting = threading.Lock()
        self._idle: float | None = None
        self._seen = time.monotonic()
        self._stopped = False

    # -- running -------------------------------------------------------------------------

    def start(self, *, idle: float | None = None) -> None:
        """Start sampling; a no-op while it runs. Its own server's lifespan (or a host's,
        entering the dashboard's) starts it for good (``idle`` None); a mounted dashboard
        without one starts it at a request with ``idle`` seconds: the sampling pauses
        when no request came for that long, and the next request starts it again."""
        with self._starting:
            self._seen = time.monotonic()
            if idle is None:
                self._stopped = False
            elif self._stopped:  # stopped by its lifespan: a late request is no reason
                return
            if self._thread is not None:
                if idle is None:
                    self._idle = None  # a lifespan now owns a lazily started sampler
                return
            self._idle = idle
            with self._lock:  # after a pause, the last sample is old: the next read takes one
                self._latest = None
            self._stop.clear()
            self._start_thread()

    def touch(self) -> None:
        """A request came: a lazily started sampler goes on sampling (see start)."""
        self._seen = time.monotonic()

    @property
    def running(self) -> bool:
        return self._thread is not None

    def _start_thread(self) -> None:
        self._thread = threading.Thread(
            target=self._loop, daemon=True, name="dynoq-dashboard-sampler"
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling (the lifespan's end): a request no longer starts it again."""
        with self._starting:
            self._stopped = True
            self._stop.set()
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample()
            except Exception as exc:  # noqa: BLE001 - a bug must not stop the live numbers for good
                logs.error(log, logging.ERROR, "dynoq dashboard: sample failed", exc=exc)
            self._stop.wait(self.interval)
            with self._starting:  # decided under the lock start() takes: none is lost
                if self._idle is not None and time.monotonic() - self._seen > self._idle:
                    if self._thread is threading.current_thread():
                        self._thread = None
                    return

    def sample(self) -> Snapshot:
        """Take one sample now (the loop does this every interval); on a failure keep
        the last numbers and say why."""
        try:
            sources = self.reader.sources(self.limit)
            stats = self.reader.backend.run(
                inspect.together([s.ops.stats() for s in sources.queues])
            )
            now = self.reader.server_time()  # alone: on a cluster TIME goes to any node
        except DynoqError as exc:
            if isinstance(exc, QueueGone):  # deleted or created anew: read them again
                self.reader.forget()
            log.warning("dynoq dashboard: sample failed: %s", exc)
            with self._lock:
                last = self._latest
                snap = Snapshot(
                    last.at if last else 0.0,
                    last.sources if last else Sources([], 0, 0, 0),
                    last.stats if last else {},
                    str(exc),
                )
                self._latest = snap
            return snap
        by_name = {s.name: st for s, st in zip(sources.queues, stats, strict=True)}
        snap = Snapshot(float(now), sources, by_name)
        with self._lock:
            self._latest = snap
            self._points.append(_Point(snap.at, {n: _counts(st) for n, st in by_name.items()}))
        return snap

    # -- reading -------------------------------------------------------------------------

    def latest(self) -> Snapshot:
        """The last sample (one is taken now if there is none yet)."""
        with self._lock:
            snap = self._latest
        return snap if snap is not None else self.sample()

    def source(self, name: str) -> Source | None:
        return next((s for s in self.latest().sources.queues if s.name == name), None)

    def series(self, name: str | None = None) -> dict[str, list[float]]:
        """The chart data of one queue (or, with None, of all sampled queues summed): the
        time of each point (seconds, server clock), the rates per second of pushed, acked
        and failed messages between a point and the one before, and the gauges."""
        with self._lock:
            points = list(self._points)
        out: dict[str, list[float]] = {k: [] for k in ("t", *COUNTS, *GAUGES)}
        for before, after in itertools.pairwise(points):
            dt = after.at - before.at
            if dt <= 0:
                continue
            names = [name] if name is not None else list(after.values)
            sums = [0.0] * (len(COUNTS) + len(GAUGES))
            seen = False
            for n in names:
                now_v, then_v = after.values.get(n), before.values.get(n)
                if now_v is None:
                    continue
                seen = True
                for i in range(len(COUNTS)):
                    if then_v is not None:  # a count that fell (a queue remade) counts 0
                        sums[i] += max(now_v[i] - then_v[i], 0) / dt
                for j in range(len(GAUGES)):
                    sums[len(COUNTS) + j] += now_v[len(COUNTS) + j]
            if not seen:
                continue
            out["t"].append(round(after.at, 3))
            for key, value in zip((*COUNTS, *GAUGES), sums, strict=True):
                out[key].append(round(value, 3))
        return out
