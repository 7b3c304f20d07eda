"""The README demo (``dynoq demo``): orders through Spark into dynoq, consumed and checked.

Synthetic order events (created, paid, shipped, completed) go into an ORDERED queue keyed
by order id, and one "cancel if unpaid" timer per order into a delay queue. Consumers
apply the events in order and fire the timers when due: an unpaid order is cancelled, a
paid order's timer is acked as a no-op. The report checks that every order was seen in
order and that every cancellation fired, never before its due time (Redis clock).

Spark (local mode) produces the messages when pyspark is installed; otherwise the same
rows go in with ``push_many``. The job wrapper is ``python -m spark.demo_pipeline``.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import os
import secrets
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from .client import Client, connect
from .message import Message
from .retry import Retry
from .spark_rows import RowSpec, to_messages

EVENTS_QUEUE, CANCEL_QUEUE = "demo.order-events", "demo.order-cancel"
EVENT_TYPES = ("created", "paid", "shipped", "completed")
EVENT_SCHEMA = ("event_id string, order_id string, seq int, type string, "
                "amount decimal(10,2), at timestamp")
CANCEL_SCHEMA = "cancel_id string, order_id string, kind string, cancel_after double"
EVENT_SPEC = RowSpec.of("event_id", key_col="order_id")
CANCEL_SPEC = RowSpec.of("cancel_id", delay_col="cancel_after",
                         payload_cols=["order_id", "kind"])
INSTALL_HINT = "pip install 'dynoq[spark]'"


@dataclass(frozen=True)
class DemoConfig:
    orders: int = 1000
    unpaid_every: int = 5  # every 5th order is never paid: its cancel timer fires
    cancel_after: float = 3.0  # seconds from push to each order's cancel timer
    event_shards: int = 8
    cancel_shards: int = 4
    consumers: int = 4  # polling threads per queue
    use_spark: bool = True
    master: str = "local[2]"
    timeout: float = 60.0  # give up waiting for the consumers after this long


def is_paid(order: int, unpaid_every: int) -> bool:
    return order % unpaid_every != 0


def order_events(order: int, unpaid_every: int, base: dt.datetime) -> list[tuple[Any, ...]]:
    """The events of one order, in order (rows of :data:`EVENT_SCHEMA`)."""
    types = EVENT_TYPES if is_paid(order, unpaid_every) else EVENT_TYPES[:1]
    oid = f"order-{order}"
    amount = Decimal(order % 500) + Decimal("0.99")
    return [(f"{oid}/{seq}", oid, seq, kind, amount, base + dt.timedelta(minutes=seq))
            for seq, kind in enumerate(types)]


def cancel_row(order: int, cancel_after: float) -> tuple[Any, ...]:
    return (f"cancel/order-{order}", f"order-{order}", "cancel-if-unpaid", cancel_after)


# -- producing --------------------------------------------------------------------------

def produce_with_spark(spark: Any, client: Client, cfg: DemoConfig) -> None:
    """Events via ``foreachPartition`` (each order's events sit in one partition, in
    order, so the ordered queue keeps them in order), timers via the Arrow ``write``."""
    from .spark import partition_sink, write

    base = dt.datetime.now(dt.timezone.utc)
    unpaid, after = cfg.unpaid_every, cfg.cancel_after
    orders = spark.sparkContext.parallelize(range(cfg.orders), 4)
    events = spark.createDataFrame(
        orders.flatMap(lambda o: order_events(o, unpaid, base)), EVENT_SCHEMA)
    events.foreachPartition(partition_sink(client.url, EVENTS_QUEUE, id_col="event_id",
                                           key_col="order_id", prefix=client.prefix))
    timers = spark.createDataFrame(orders.map(lambda o: cancel_row(o, after)), CANCEL_SCHEMA)
    write(timers, client.url, CANCEL_QUEUE, id_col="cancel_id", delay_col="cancel_after",
          payload_cols=["order_id", "kind"], prefix=client.prefix)


def produce_plain(client: Client, cfg: DemoConfig) -> None:
    """The same rows and payloads as :func:`produce_with_spark`, with push-if-absent."""
    base = dt.datetime.now(dt.timezone.utc)
    names = [c.split()[0] for c in EVENT_SCHEMA.split(", ")]
    rows = [dict(zip(names, r, strict=True))
            for o in range(cfg.orders) for r in order_events(o, cfg.unpaid_every, base)]
    client.queue(EVENTS_QUEUE).ensure_many(to_messages(EVENT_SPEC, rows, time.time))
    names = [c.split()[0] for c in CANCEL_SCHEMA.split(", ")]
    rows = [dict(zip(names, cancel_row(o, cfg.cancel_after), strict=True))
            for o in range(cfg.orders)]
    client.queue(CANCEL_QUEUE).ensure_many(to_messages(CANCEL_SPEC, rows, time.time))


# -- consuming --------------------------------------------------------------------------

@dataclass
class OrderBook:
    """What the handlers know (a stand-in for the shop's database). Thread-safe."""

    server_ms: Callable[[], int]
    lock: threading.Lock = field(default_factory=threading.Lock)
    next_seq: dict[str, int] = field(default_factory=dict)
    paid: set[str] = field(default_factory=set)
    completed: set[str] = field(default_factory=set)
    out_of_order: list[str] = field(default_factory=list)
    events: int = 0
    cancelled: dict[str, int] = field(default_factory=dict)  # order -> ms after due time
    noop: int = 0
    retried: int = 0
    first_event: float = 0.0
    last_event: float = 0.0

    def handle_event(self, msg: Message) -> None:
        p = msg.payload
        with self.lock:
            now = time.monotonic()
            self.first_event = self.first_event or now
            self.last_event, self.events = now, self.events + 1
            order, seq = p["order_id"], p["seq"]
            if self.next_seq.get(order, 0) != seq:
                self.out_of_order.append(msg.id or "")
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
                self.retried += 1  # the order's events are not in yet: look again soon
                raise Retry(0.5)
            else:
                self.cancelled.setdefault(order, late_ms)

    @property
    def cancels_handled(self) -> int:
        with self.lock:
            return self.noop + len(self.cancelled)


# -- the run and its report -------------------------------------------------------------

@dataclass
class Report:
    orders: int
    events: int
    paid: int
    producer: str
    produce_seconds: float
    consumed: int
    consume_seconds: float
    completed: int
    out_of_order: int
    cancels_fired: int
    wrong_cancels: int  # fired for orders that were paid
    missing_cancels: int  # unpaid orders not cancelled
    noop_timers: int
    early: int  # fired before their due time (must be 0)
    late_ms_median: float
    late_ms_max: float
    finished: bool
    errors: list[str]

    @property
    def ok(self) -> bool:
        return (self.finished and not self.errors and self.consumed == self.events
                and self.out_of_order == 0 and self.completed == self.paid
                and self.wrong_cancels == self.missing_cancels == self.early == 0
                and self.cancels_fired + self.noop_timers == self.orders)

    def lines(self) -> list[str]:
        rate = self.consumed / self.consume_seconds if self.consume_seconds else 0.0
        push_rate = (self.events + self.orders) / max(self.produce_seconds, 1e-9)
        unpaid = self.orders - self.paid
        out = [
            f"dynoq demo: {self.orders} orders, {self.events} events, {unpaid} never paid",
            f"  produced  {self.events} events (ordered queue, key = order id) + "
            f"{self.orders} cancel timers with {self.producer} in "
            f"{self.produce_seconds:.1f} s ({push_rate:,.0f} msgs/s)",
            f"  consumed  {self.consumed} events in {self.consume_seconds:.2f} s "
            f"({rate:,.0f} events/s)",
            f"  in order  {self.completed}/{self.paid} paid orders completed, "
            f"{self.out_of_order} events out of order",
            f"  cancels   {self.cancels_fired}/{unpaid} unpaid orders cancelled "
            f"({self.wrong_cancels} paid orders cancelled by mistake), "
            f"{self.noop_timers} paid orders' timers acked as no-ops",
            f"  on time   {self.early} fired early; lateness after due time: median "
            f"{self.late_ms_median:.0f} ms, max {self.late_ms_max:.0f} ms (Redis clock)",
        ]
        out += [f"  error     {e}" for e in self.errors]
        if not self.finished:
            out.append("  TIMED OUT waiting for the consumers")
        out.append("  OK" if self.ok else "  FAILED")
        return out


# (phase, events consumed, events in all, timers handled, timers in all)
Progress = Callable[[str, int, int, int, int], None]


def spark_available() -> bool:
    return importlib.util.find_spec("pyspark") is not None


def run(client: Client, cfg: DemoConfig = DemoConfig(),
        progress: Progress | None = None, spark: Any = None) -> Report:
    """Run the pipeline on ``client`` (its queues are cleared first) and report."""
    show = progress or (lambda *_: None)
    events_q = client.queue(EVENTS_QUEUE, shards=cfg.event_shards, ordered=True)
    cancel_q = client.queue(CANCEL_QUEUE, shards=cfg.cancel_shards)
    events_q.clear()
    cancel_q.clear()

    def server_ms() -> int:
        seconds, micros = client.redis.time()
        return int(seconds) * 1000 + int(micros) // 1000

    book = OrderBook(server_ms)
    n_events = sum(len(order_events(o, cfg.unpaid_every, dt.datetime.now()))
                   for o in range(cfg.orders))
    phase = ["starting consumers"]
    done = threading.Event()

    def tick() -> None:  # the display follows the consumers while Spark pushes
        while not done.wait(0.1):
            show(phase[0], book.events, n_events, book.cancels_handled, cfg.orders)

    # RocketMQ-style consumers: the ordered one leases every shard of the events queue
    # (one group member), the other takes cancel timers as they fall due.
    consumers = [client.consumer(q, handler, group="demo", concurrency=cfg.consumers,
                                 batch_size=50).start()
                 for q, handler in ((events_q, book.handle_event),
                                    (cancel_q, book.handle_cancel))]
    ticker = threading.Thread(target=tick, daemon=True, name="dynoq-demo-display")
    ticker.start()
    try:
        start = time.monotonic()
        if spark is not None:
            producer = f"Spark {spark.sparkContext.master}"
            phase[0] = f"{producer}: pushing"
            produce_with_spark(spark, client, cfg)
        else:
            producer = "push_many"
            phase[0] = "push_many: pushing"
            produce_plain(client, cfg)
        produced = time.monotonic() - start
        phase[0] = "consuming"
        deadline = time.monotonic() + cfg.timeout
        while time.monotonic() < deadline:
            if book.events >= n_events and book.cancels_handled >= cfg.orders:
                break
            time.sleep(0.05)
    finally:
        done.set()
        ticker.join()
        for c in consumers:
            c.stop()
    dead = sum(c.stats().dead_lettered for c in consumers)
    return _report(book, cfg, n_events, producer, produced,
                   [f"{dead} message(s) dead-lettered"] if dead else [])


def _report(book: OrderBook, cfg: DemoConfig, n_events: int, producer: str,
            produced: float, errors: list[str]) -> Report:
    paid = {f"order-{o}" for o in range(cfg.orders) if is_paid(o, cfg.unpaid_every)}
    unpaid = {f"order-{o}" for o in range(cfg.orders)} - paid
    lateness = list(book.cancelled.values()) or [0]
    return Report(
        orders=cfg.orders, events=n_events, paid=len(paid), producer=producer,
        produce_seconds=produced, consumed=book.events,
        consume_seconds=book.last_event - book.first_event,
        completed=len(book.completed & paid), out_of_order=len(book.out_of_order),
        cancels_fired=len(book.cancelled), wrong_cancels=len(book.cancelled.keys() & paid),
        missing_cancels=len(unpaid - book.cancelled.keys()), noop_timers=book.noop,
        early=sum(1 for ms in lateness if ms < 0),
        late_ms_median=statistics.median(lateness), late_ms_max=max(lateness),
        finished=book.events >= n_events and book.cancels_handled >= cfg.orders,
        errors=errors)


# -- the command ------------------------------------------------------------------------

@contextmanager
def _display() -> Iterator[Progress]:
    """A rich progress display if rich is installed, else a line per phase."""
    try:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )
    except ImportError:
        last: list[str] = []

        def plain(phase: str, events: int, n_events: int, timers: int, n_timers: int) -> None:
            if not last or last[-1] != phase:
                last.append(phase)
                print(f"... {phase}", flush=True)

        yield plain
        return
    with Progress(SpinnerColumn(), TextColumn("{task.description:<24}"), BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(), transient=True) as bar:
        ev_task = bar.add_task("events consumed", total=None)
        tm_task = bar.add_task("cancel timers handled", total=None)
        shown: list[str] = []

        def fancy(phase: str, events: int, n_events: int, timers: int, n_timers: int) -> None:
            if not shown or shown[-1] != phase:  # phases as lines above the bars
                shown.append(phase)
                bar.console.print(f"[bold]>[/bold] {phase}")
            bar.update(ev_task, completed=events, total=n_events)
            bar.update(tm_task, completed=timers, total=n_timers)

        yield fancy


def _quiet_log4j() -> str:
    """A log4j2 config showing only errors (the demo's output is its progress display)."""
    path = os.path.join(tempfile.gettempdir(), "dynoq-demo-log4j2.properties")
    with open(path, "w", encoding="utf-8") as f:
        f.write("rootLogger.level = error\nrootLogger.appenderRef.stderr.ref = console\n"
                "appender.console.type = Console\nappender.console.name = console\n"
                "appender.console.target = SYSTEM_ERR\n"
                "appender.console.layout.type = PatternLayout\n"
                "appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n\n")
    return path


def _start_spark(cfg: DemoConfig, say: Callable[[str], None]) -> tuple[Any, bool]:
    """(SparkSession or None, whether we started it)."""
    if not cfg.use_spark:
        return None, False
    if not spark_available():
        say(f"pyspark is not installed ({INSTALL_HINT} to run the Spark part); "
            "pushing the same events with push_many instead.")
        return None, False
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors: this Python
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # local mode: no address warning
    try:
        from pyspark.sql import SparkSession

        active = SparkSession.getActiveSession()
        if active is not None:
            return active, False
        spark = (SparkSession.builder.master(cfg.master).appName("dynoq-demo")
                 .config("spark.driver.extraJavaOptions",
                         f"-Dlog4j2.configurationFile={_quiet_log4j()}")
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        return spark, True
    except Exception as exc:  # noqa: BLE001 - no Java, etc.: the demo still runs
        say(f"Spark could not start ({exc.__class__.__name__}: {str(exc)[:200]}); "
            "pushing the same events with push_many instead.")
        return None, False


def _cleanup(client: Client) -> None:
    keys = list(client.redis.scan_iter(match=f"{client.prefix}:*", count=1000))
    for i in range(0, len(keys), 500):
        client.redis.delete(*keys[i:i + 500])


def main(url: str | None = None, cfg: DemoConfig | None = None) -> int:
    """Run the demo end to end (embedded server unless ``url`` or $DYNOQ_URL is set);
    print the report; return 0 if every check passed, else 1."""
    cfg = cfg or DemoConfig()
    url = url or os.environ.get("DYNOQ_URL") or "embedded://"
    print(f"dynoq demo on {url.split('@')[-1]}: starting ...", flush=True)
    spark, started = _start_spark(cfg, lambda text: print(text, flush=True))
    # A fresh prefix: the demo never touches other keys on a shared server.
    client = connect(url, prefix=f"dynoq-demo-{secrets.token_hex(4)}")
    try:
        with _display() as progress:
            report = run(client, cfg, progress, spark)
    finally:
        if started:
            spark.stop()
        _cleanup(client)
        client.close()
    print("\n".join(report.lines()), flush=True)
    return 0 if report.ok else 1
