"""The README demo (``dynoq demo``): orders through Spark into dynoq, consumed and checked.

Synthetic order events (created, paid, shipped, completed) go into an ORDERED queue keyed
by order id, and one "cancel if unpaid" timer per order into a delay queue, each with one
``format("dynoq")`` Spark job. Consumers, started first, apply the events in order and
fire the timers when due: an unpaid order is cancelled, a paid order's timer is acked as
a no-op. The report says what each stage took and did (Spark's start-up apart from the
jobs' throughput) and checks that every order was seen once and in order, and that
every cancellation fired, never before its due time (Redis clock).

Without pyspark the same rows go in with ``ensure_many``. It uses dynoq's public API
only; the job wrapper is ``python -m spark.demo_pipeline``.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from ..client import Client, connect
from ..message import Message
from ..retry import Retry

EVENTS_QUEUE, CANCEL_QUEUE = "demo.order-events", "demo.order-cancel"
EVENT_TYPES = ("created", "paid", "shipped", "completed")
EVENT_SCHEMA = (
    "event_id string, order_id string, seq int, type string, amount decimal(10,2), at timestamp"
)
CANCEL_SCHEMA = "cancel_id string, order_id string, kind string, cancel_after double"
INSTALL_HINT = "pip install 'dynoq[spark]'"
PREFIX = "dynoq-demo"  # its own prefix: the demo clears its two queues, nothing else


@dataclass(frozen=True)
class DemoConfig:
    orders: int = 1000
    unpaid_every: int = 5  # every 5th order is never paid: its cancel timer fires
    cancel_after: float = 3.0  # seconds from push to each order's cancel timer
    event_shards: int = 8
    cancel_shards: int = 4
    consumers: int = 4  # worker threads per queue
    use_spark: bool = True
    master: str | None = None  # default: dynoq.spark's (local[2,4])
    timeout: float = 60.0  # give up waiting for the consumers after this long


def is_paid(order: int, unpaid_every: int) -> bool:
    return order % unpaid_every != 0


def order_events(order: int, unpaid_every: int, base: dt.datetime) -> list[tuple[Any, ...]]:
    """The events of one order, in order (rows of :data:`EVENT_SCHEMA`)."""
    types = EVENT_TYPES if is_paid(order, unpaid_every) else EVENT_TYPES[:1]
    oid = f"order-{order}"
    amount = Decimal(order % 500) + Decimal("0.99")
    return [
        (f"{oid}/{seq}", oid, seq, kind, amount, base + dt.timedelta(minutes=seq))
        for seq, kind in enumerate(types)
    ]


def cancel_row(order: int, cancel_after: float) -> tuple[Any, ...]:
    return (f"cancel/order-{order}", f"order-{order}", "cancel-if-unpaid", cancel_after)


# -- producing --------------------------------------------------------------------------


@dataclass(frozen=True)
class Produced:
    """One producing step: what it wrote and how long it took."""

    what: str
    rows: int
    seconds: float
    pushed: int
    skipped: int
    refused: int

    def line(self) -> str:
        rate = self.rows / self.seconds if self.seconds else 0.0
        return (
            f"{self.rows:,} {self.what} in {self.seconds:.2f} s ({rate:,.0f} rows/s): "
            f"pushed {self.pushed}, skipped {self.skipped}, refused {self.refused}"
        )


def produce_with_spark(spark: Any, client: Client, cfg: DemoConfig) -> list[Produced]:
    """One Spark job per queue (``dynoq.spark.write``: Arrow, counted). Each order's
    events sit in one partition, in order, so the ordered queue delivers them in order."""
    from ..spark import write

    base = dt.datetime.now(dt.timezone.utc)
    unpaid, after = cfg.unpaid_every, cfg.cancel_after
    orders = spark.sparkContext.parallelize(range(cfg.orders), 4)
    events = spark.createDataFrame(
        orders.flatMap(lambda o: order_events(o, unpaid, base)), EVENT_SCHEMA
    ).cache()
    timers = spark.createDataFrame(
        orders.map(lambda o: cancel_row(o, after)), CANCEL_SCHEMA
    ).cache()
    rows = events.count(), timers.count()  # built before the clock starts
    steps: list[tuple[Any, str, str, dict[str, Any]]] = [
        (
            events,
            EVENTS_QUEUE,
            "events (ordered queue, key = order id)",
            {"id_col": "event_id", "key_col": "order_id"},
        ),
        (
            timers,
            CANCEL_QUEUE,
            f"cancel timers (delay queue, due in {after:g} s)",
            {
                "id_col": "cancel_id",
                "delay_col": "cancel_after",
                "payload_cols": ["order_id", "kind"],
            },
        ),
    ]
    out = []
    for (df, queue, what, options), n in zip(steps, rows, strict=True):
        start = time.monotonic()
        done = write(df, client, queue, **options)
        out.append(
            Produced(what, n, time.monotonic() - start, done.pushed, done.skipped, done.refused)
        )
    return out


def produce_plain(client: Client, cfg: DemoConfig) -> list[Produced]:
    """The same messages as :func:`produce_with_spark`, with ``ensure_many``."""
    base = dt.datetime.now(dt.timezone.utc)
    names = [c.split()[0] for c in EVENT_SCHEMA.split(", ")]
    events = []
    for o in range(cfg.orders):
        for row in order_events(o, cfg.unpaid_every, base):
            p = dict(zip(names, row, strict=True))
            p["amount"], p["at"] = str(p["amount"]), p["at"].isoformat()
            events.append(Message(p, id=p["event_id"], key=p["order_id"]))
    timers = [
        Message(
            {"order_id": f"order-{o}", "kind": "cancel-if-unpaid"},
            id=f"cancel/order-{o}",
            delay=cfg.cancel_after,
        )
        for o in range(cfg.orders)
    ]
    out = []
    for queue, msgs, what in (
        (EVENTS_QUEUE, events, "events (ordered queue)"),
        (CANCEL_QUEUE, timers, "cancel timers (delay queue)"),
    ):
        start = time.monotonic()
        pushed = client.queue(queue).ensure_many(msgs)
        out.append(
            Produced(what, len(msgs), time.monotonic() - start, pushed, len(msgs) - pushed, 0)
        )
    return out


# -- consuming --------------------------------------------------------------------------


@dataclass
class OrderBook:
    """What the handlers know (a stand-in for the shop's database). Thread-safe."""

    server_ms: Callable[[], int]
    lock: threading.Lock = field(default_factory=threading.Lock)
    next_seq: dict[str, int] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)
    paid: set[str] = field(default_factory=set)
    completed: set[str] = field(default_factory=set)
    out_of_order: int = 0
    twice: int = 0
    events: int = 0
    cancelled: dict[str, int] = field(default_factory=dict)  # order -> ms after due time
    noop: int = 0
    last_event: float = 0.0  # time.monotonic() of the last event handled

    def handle_event(self, msg: Message) -> None:
        p = msg.payload
        with self.lock:
            self.last_event = time.monotonic()
            if msg.id in self.seen:
                self.twice += 1
                return
            self.seen.add(msg.id or "")
            self.events += 1
            order, seq = p["order_id"], p["seq"]
            if self.next_seq.get(order, 0) != seq:
                self.out_of_order += 1
            self.next_seq[order] = seq + 1
            if p["type"] == "paid":
                self.paid.add(order)
            elif p["type"] == "completed":
                self.completed.add(order)

    def handle_cancel(self, msg: Message) -> None:
        order = msg.payload["order_id"]
        late_ms = self.server_ms() - round((msg.deliver_at or 0) * 1000)
        with self.lock:
            if order in self.paid:
                self.noop += 1  # paid in time: the timer is acked and does nothing
            elif order not in self.next_seq:
                raise Retry(0.5)  # the order's events are not in yet: look again soon
            else:
                self.cancelled.setdefault(order, late_ms)

    def done(self, events: int, orders: int) -> bool:
        with self.lock:
            return self.events >= events and self.noop + len(self.cancelled) >= orders


# -- the run and its report -------------------------------------------------------------


@dataclass
class Report:
    cfg: DemoConfig
    startup: list[str]
    produced: list[Produced]
    book: OrderBook
    events: int
    drain_seconds: float  # from the end of producing to the last event handled
    finished: bool
    errors: list[str]
    with_spark: bool = False

    def _checks(self) -> dict[str, int]:
        paid = {f"order-{o}" for o in range(self.cfg.orders) if is_paid(o, self.cfg.unpaid_every)}
        b = self.book
        return {
            "paid": len(paid),
            "completed": len(b.completed & paid),
            "wrong": len(b.cancelled.keys() & paid),
            "missing": self.cfg.orders - len(paid) - len(b.cancelled.keys() - paid),
            "early": sum(1 for ms in b.cancelled.values() if ms < 0),
        }

    @property
    def ok(self) -> bool:
        c, b = self._checks(), self.book
        return (
            self.finished
            and not self.errors
            and b.events == self.events
            and b.out_of_order == b.twice == 0
            and c["completed"] == c["paid"]
            and c["wrong"] == c["missing"] == c["early"] == 0
            and len(b.cancelled) + b.noop == self.cfg.orders
        )

    def summary(self) -> dict[str, Any]:
        """The report as JSON-ready data (``dynoq demo --json``)."""
        c, b, cfg = self._checks(), self.book, self.cfg
        late = sorted(b.cancelled.values()) or [0]
        return {
            "ok": self.ok,
            "finished": self.finished,
            "spark": self.with_spark,
            "orders": cfg.orders,
            "events": self.events,
            "unpaid": cfg.orders - c["paid"],
            "produced": [
                {
                    "what": p.what,
                    "rows": p.rows,
                    "seconds": round(p.seconds, 3),
                    "pushed": p.pushed,
                    "skipped": p.skipped,
                    "refused": p.refused,
                }
                for p in self.produced
            ],
            "handled": b.events,
            "drain_seconds": round(self.drain_seconds, 3),
            "out_of_order": b.out_of_order,
            "handled_twice": b.twice,
            "completed": c["completed"],
            "paid": c["paid"],
            "cancelled": len(b.cancelled),
            "cancelled_by_mistake": c["wrong"],
            "timers_noop": b.noop,
            "fired_early": c["early"],
            "lateness_ms": {"median": statistics.median(late), "max": max(late)},
            "errors": self.errors,
        }

    def lines(self) -> list[str]:
        c, b, cfg = self._checks(), self.book, self.cfg
        unpaid = cfg.orders - c["paid"]
        late = sorted(b.cancelled.values()) or [0]
        out = [
            f"dynoq demo: {cfg.orders} orders, {self.events} events, {unpaid} never paid",
            *(f"  {line}" for line in self.startup),
            *(f"  produce   {p.line()}" for p in self.produced),
            *(
                [
                    "            (jobs this small measure Spark's per-job overhead, not its "
                    "throughput: see benchmarks/bench_spark.py)"
                ]
                if self.with_spark
                else []
            ),
            f"  consume   {b.events:,} events handled while producing ran, the last "
            f"{self.drain_seconds:.2f} s after it ended; {len(b.cancelled) + b.noop:,} "
            f"timers handled as they fell due",
            f"  in order  {c['completed']}/{c['paid']} paid orders completed, "
            f"{b.out_of_order} events out of order, {b.twice} handled twice",
            f"  cancels   {len(b.cancelled)}/{unpaid} unpaid orders cancelled "
            f"({c['wrong']} paid orders cancelled by mistake), {b.noop} paid orders' "
            "timers acked as no-ops",
            f"  on time   {c['early']} fired early; lateness after due time: median "
            f"{statistics.median(late):.0f} ms, max {max(late):.0f} ms (Redis clock)",
        ]
        out += [f"  error     {e}" for e in self.errors]
        if not self.finished:
            out.append("  TIMED OUT waiting for the consumers")
        out.append("  OK" if self.ok else "  FAILED")
        return out


def spark_available() -> bool:
    return importlib.util.find_spec("pyspark") is not None


def run(
    client: Client,
    cfg: DemoConfig = DemoConfig(),
    spark: Any = None,
    startup: list[str] | None = None,
) -> Report:
    """Run the pipeline on ``client`` (its two queues are cleared first) and report."""
    # A dedupe window: ids acked in the last minute are refused if written again.
    events_q = client.queue(EVENTS_QUEUE, shards=cfg.event_shards, ordered=True, dedupe_window=60)
    cancel_q = client.queue(CANCEL_QUEUE, shards=cfg.cancel_shards, dedupe_window=60)
    events_q.clear()
    cancel_q.clear()
    book = OrderBook(lambda: round(client.server_time() * 1000))
    n_events = sum(
        len(order_events(o, cfg.unpaid_every, dt.datetime.now())) for o in range(cfg.orders)
    )
    # RocketMQ-style consumers: the ordered one leases every shard of the events queue
    # (one group member), the other takes cancel timers as they fall due.
    consumers = [
        client.consumer(q, handler, group="demo", concurrency=cfg.consumers, batch_size=50).start()
        for q, handler in ((events_q, book.handle_event), (cancel_q, book.handle_cancel))
    ]
    try:
        produced = (
            produce_with_spark(spark, client, cfg)
            if spark is not None
            else produce_plain(client, cfg)
        )
        ended = time.monotonic()
        deadline = ended + cfg.timeout
        while not book.done(n_events, cfg.orders) and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        for c in consumers:
            c.stop()
    dead = sum(c.stats().dead_lettered for c in consumers)
    events_q.clear()
    cancel_q.clear()
    return Report(
        cfg,
        startup or [],
        produced,
        book,
        n_events,
        max(0.0, book.last_event - ended),
        book.done(n_events, cfg.orders),
        [f"{dead} message(s) dead-lettered"] if dead else [],
        spark is not None,
    )


def _start_spark(cfg: DemoConfig, say: Callable[[str], None]) -> tuple[Any, bool, str]:
    """(SparkSession or None, whether we started it, a report line)."""
    if not cfg.use_spark:
        return None, False, "spark     not used: push_many instead"
    if not spark_available():
        say(
            f"pyspark is not installed ({INSTALL_HINT} to run the Spark part); "
            "pushing the same events with push_many instead."
        )
        return None, False, "spark     not installed: push_many instead"
    from ..spark import spark_session

    start = time.monotonic()
    try:
        spark, started = spark_session("dynoq-demo", cfg.master, quiet=True)
        # Start the Python workers too (plain and Arrow), so the jobs' rates below are
        # the jobs' own.
        spark.range(1).mapInArrow(lambda batches: batches, "id long").count()
    except Exception as exc:  # noqa: BLE001 - no Java, etc.: the demo still runs
        say(
            f"Spark could not start ({exc.__class__.__name__}: {str(exc)[:200]}); "
            "pushing the same events with push_many instead."
        )
        return None, False, "spark     failed to start: push_many instead"
    line = (
        f"spark     {spark.sparkContext.master} ready in "
        f"{time.monotonic() - start:.1f} s (JVM, Python workers; not in the rates below)"
    )
    return spark, started, line


def main(
    url: str | None = None,
    cfg: DemoConfig | None = None,
    *,
    prefix: str = PREFIX,
    as_json: bool = False,
) -> int:
    """Run the demo end to end (embedded server unless ``url`` or $DYNOQ_URL is set);
    print the report (``as_json``: as one JSON object on stdout, progress on stderr);
    return 0 if every check passed, else 1."""
    cfg = cfg or DemoConfig()
    url = url or os.environ.get("DYNOQ_URL") or "embedded://"
    start = time.monotonic()
    client = connect(url, prefix=prefix)

    def say(text: str) -> None:
        print(text, file=sys.stderr if as_json else sys.stdout)

    say(f"dynoq demo on {client!r}: starting ...")
    startup = [f"server    {url.split('://')[0]}:// ready in {time.monotonic() - start:.1f} s"]
    spark, started, line = _start_spark(cfg, say)
    startup.append(line)
    try:
        report = run(client, cfg, spark, startup)
    finally:
        if started:
            spark.stop()
        client.close()
    if as_json:
        print(json.dumps(report.summary()))
    else:
        say("\n".join(report.lines()))
    return 0 if report.ok else 1
