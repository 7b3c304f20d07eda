"""Prometheus metrics (needs the ``metrics`` extra: prometheus-client).

:class:`QueueCollector` reads queue depths from Redis on each scrape, so the numbers are
never stale and nothing polls Redis between scrapes. :class:`Metrics` holds the counters
the sweeper and consumers update (requeued, dead-lettered, handled, failed, handler
latency). :func:`start_metrics_server` serves a registry over HTTP.

A consumer hooks in with::

    m = dynoq.metrics.default_metrics()
    with m.time_handler(queue.name, group):
        handler(msg)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ._core.flows import counts as flow_counts
from ._core.sweeper import SweepReport
from .client import Client
from .errors import DynoqError, LayoutError, QueueGone
from .queue import Queue

log = logging.getLogger("dynoq.metrics")

STATES = ("ready", "delayed", "unacked", "dead", "prepared")
# Handler latency buckets (seconds): from fast in-memory handlers to slow external calls.
HANDLER_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)


class QueueCollector(Collector):
    """Depth of every registered queue (or of ``queues``) by shard and state, and the age
    of its oldest waiting message, read from Redis when scraped."""

    def __init__(self, client: Client, queues: Sequence[str] | None = None) -> None:
        self.client = client
        self.queues = list(queues) if queues is not None else None
        self._open: dict[str, Queue] = {}

    def _families(self) -> tuple[Any, ...]:
        return (
            GaugeMetricFamily(
                "dynoq_queue_messages",
                "Messages by queue, shard and state "
                "(ready, delayed, unacked = in flight, dead, prepared = "
                "transactional messages not committed nor rolled back)",
                labels=["queue", "shard", "state"],
            ),
            GaugeMetricFamily(
                "dynoq_topic_group_messages",
                "Messages of each topic group's queue (one per broadcasting member) by state",
                labels=["topic", "group", "queue", "state"],
            ),
            GaugeMetricFamily(
                "dynoq_queue_oldest_waiting_seconds",
                "Age of the oldest message that is due but not yet delivered (0 when none)",
                labels=["queue"],
            ),
            GaugeMetricFamily("dynoq_redis_up", "1 if the last scrape could read Redis"),
            CounterMetricFamily(
                "dynoq_transactions",
                "Transactional messages decided, by "
                "outcome (committed, rolled_back: a checker's max_checks "
                "included), since each shard was created",
                labels=["queue", "outcome"],
            ),
            GaugeMetricFamily(
                "dynoq_queue_unreadable",
                "1 for a queue or topic stored in "
                "a layout this version of dynoq does not read (run dynoq "
                "migrate, or upgrade dynoq)",
                labels=["queue"],
            ),
            CounterMetricFamily(
                "dynoq_flows",
                "Workflows (chains, groups, chords of tasks) under the prefix, by outcome: "
                "started, succeeded, failed, cancelled (counted by the process that started "
                "or ended each one)",
                labels=["outcome"],
            ),
            GaugeMetricFamily(
                "dynoq_queue_paused",
                "1 while a queue is paused (Queue.pause: nothing is delivered), else 0",
                labels=["queue"],
            ),
            CounterMetricFamily(
                "dynoq_queue_ended",
                "Messages that ended neither acked nor failed, by how: cancelled "
                "(Queue.cancel), expired (not delivered before the expiry of its push: "
                "dead-lettered), since each shard was created",
                labels=["queue", "how"],
            ),
        )

    def describe(self) -> Iterable[Metric]:
        # Names only: registering must not read Redis.
        return self._families()

    def collect(self) -> Iterable[Metric]:
        depth, groups, oldest, up, decided, unreadable, flows, paused, ended = self._families()
        try:
            names = self.queues if self.queues is not None else self.client.queue_names()
            now = self.client.server_time()  # the clock the records' timestamps are on
            for name in names:
                try:
                    queue = self._open.get(name) or self.client.open_existing(name)
                except LayoutError:  # another version's: said, and the others still read
                    unreadable.add_metric([name], 1)
                    continue
                if queue is None:
                    continue
                self._open[name] = queue
                try:
                    stats = queue.stats()
                except QueueGone:  # deleted or created anew: read again at the next scrape
                    self._open.pop(name, None)
                    continue
                for s in stats.shards:
                    for state in STATES:
                        depth.add_metric([name, str(s.shard), state], getattr(s, state))
                waiting = [
                    now - s.oldest_ready_at for s in stats.shards if s.oldest_ready_at is not None
                ]
                oldest.add_metric([name], max(0.0, *waiting) if waiting else 0.0)
                for outcome in ("committed", "rolled_back"):
                    decided.add_metric([name, outcome], stats.total(outcome))
                paused.add_metric([name], int(stats.paused))
                ended.add_metric([name, "cancelled"], stats.total("cancelled"))
                ended.add_metric([name, "expired"], stats.total("lapsed"))
            if self.queues is None:
                self._topics(groups, unreadable)
            counted = self.client.backend.run(flow_counts(self.client.prefix))
            for outcome, n in counted.items():
                flows.add_metric([outcome], n)
        except DynoqError as exc:
            log.warning("metrics scrape could not read Redis: %s", exc)
            up.add_metric([], 0)
            return [up]
        up.add_metric([], 1)
        return [depth, groups, oldest, up, decided, unreadable, flows, paused, ended]

    def _topics(self, groups: GaugeMetricFamily, unreadable: GaugeMetricFamily) -> None:
        """Each topic group's backlog by state (or the topic, unreadable)."""
        for name in self.client.topic_names():
            try:
                topic = self.client.open_existing_topic(name)
            except LayoutError:
                unreadable.add_metric([name], 1)
                continue
            if topic is None:
                continue
            for b in topic.backlog():
                for state in STATES:
                    groups.add_metric(
                        [topic.name, b.group, b.queue, state], getattr(b.stats, state)
                    )


class Metrics:
    """Counters and histograms of the sweeper and of consumers, in one registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        reg = REGISTRY if registry is None else registry
        self.registry = reg
        self.requeued = Counter(
            "dynoq_requeued",
            "Expired deliveries given back by the sweeper",
            ["queue"],
            registry=reg,
        )
        self.dead_lettered = Counter(
            "dynoq_dead_lettered",
            "Deliveries the sweeper moved to the dead-letter set (retries spent)",
            ["queue"],
            registry=reg,
        )
        self.promoted = Counter(
            "dynoq_promoted", "Due delayed messages the sweeper made ready", ["queue"], registry=reg
        )
        self.trimmed = Counter(
            "dynoq_dedupe_trimmed", "Acked ids dropped from dedupe windows", ["queue"], registry=reg
        )
        self.reaped = Counter(
            "dynoq_reaped_members",
            "Consumer-group members reaped after they stopped heartbeating",
            ["queue"],
            registry=reg,
        )
        self.sweeps = Counter(
            "dynoq_sweeps", "Sweeper passes by outcome", ["outcome"], registry=reg
        )
        self.handled = Counter(
            "dynoq_handled",
            "Messages whose handler returned (acked)",
            ["queue", "group"],
            registry=reg,
        )
        self.failed = Counter(
            "dynoq_failed", "Messages whose handler raised", ["queue", "group"], registry=reg
        )
        self.checks = Counter(
            "dynoq_transaction_checks",
            "Answers of transaction checkers "
            "(commit, rollback, unknown, invalid, error, stale, buried)",
            ["queue", "group", "outcome"],
            registry=reg,
        )
        self.handler_seconds = Histogram(
            "dynoq_handler_seconds",
            "Handler latency",
            ["queue", "group"],
            buckets=HANDLER_BUCKETS,
            registry=reg,
        )

    def record_sweep(self, report: SweepReport) -> None:
        self.sweeps.labels("ok" if not report.errors else "partial").inc()
        for name, s in report.queues.items():
            for counter, value in (
                (self.requeued, s.requeued),
                (self.dead_lettered, s.dead_lettered),
                (self.promoted, s.promoted),
                (self.trimmed, s.trimmed),
                (self.reaped, s.reaped),
            ):
                if value:
                    counter.labels(name).inc(value)

    def sweep_failed(self) -> None:
        self.sweeps.labels("error").inc()

    def observe_handler(self, queue: str, group: str, seconds: float, *, ok: bool) -> None:
        """Record one handler call: its latency, and handled or failed."""
        self.handler_seconds.labels(queue, group).observe(seconds)
        (self.handled if ok else self.failed).labels(queue, group).inc()

    def observe_check(self, queue: str, group: str, outcome: str) -> None:
        """Count one transaction check by outcome: give it to a checker as
        ``client.checker(q, check, observer=metrics.observe_check)``."""
        self.checks.labels(queue, group, outcome).inc()

    @contextmanager
    def time_handler(self, queue: str, group: str) -> Iterator[None]:
        """Time the block as one handler call; an exception counts it failed (and
        propagates)."""
        started = time.perf_counter()
        ok = False
        try:
            yield
            ok = True
        finally:
            self.observe_handler(queue, group, time.perf_counter() - started, ok=ok)


_default: Metrics | None = None
_default_lock = threading.Lock()


def default_metrics() -> Metrics:
    """The process-wide :class:`Metrics` on prometheus-client's global registry."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Metrics()
        return _default


def start_metrics_server(
    port: int,
    *,
    addr: str = "127.0.0.1",
    registry: CollectorRegistry | None = None,
    client: Client | None = None,
) -> tuple[WSGIServer, threading.Thread]:
    """Serve ``registry`` (default: the global one) on ``addr:port`` in a daemon thread
    (loopback by default: pass ``addr="0.0.0.0"`` for a scraper on another host).
    With ``client``, queue depths are added (read from Redis on each scrape). Port 0 picks
    a free port: read it from ``server.server_port``. Stop with ``server.shutdown()``."""
    reg = REGISTRY if registry is None else registry
    if client is not None:
        reg.register(QueueCollector(client))
    return start_http_server(port, addr=addr, registry=reg)
