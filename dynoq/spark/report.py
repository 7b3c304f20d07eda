"""A write's counts, on the driver: one log line (logger ``dynoq.spark``, INFO) and the
``dynoq_spark_rows_total`` Prometheus counter (when prometheus-client is installed).

Spark runs a data source's commit, and every task, in Python processes of their own, not
in the driver's, where the user's logging and Prometheus registry live. A
:class:`Channel` carries what they have to it: a Spark accumulator made on the driver,
whose updates Spark hands to the driver's Python process when each task or commit ends.
There, :class:`Reports` (its accumulator parameter) logs and counts each report as it
arrives and keeps nothing; Spark hands over only the updates of tasks that succeeded, so
this is also where a task's record of what its attempts pushed is deleted
(:func:`send_done`).
``dynoq.spark.register(spark)`` gives the session's ``format("dynoq")`` one;
``partition_sink`` takes one when made on a driver.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import threading
import uuid
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .._core.batches import Counts
from .rows import Rejection

log = logging.getLogger("dynoq.spark")
MAX_SAMPLES = 5  # refused rows described per task (the counts have them all)
MAX_SHOWN = 20  # refused rows described per write in the log line

_here: set[str] = set()  # the Reports tokens made in this process (so: on the driver)
_channels: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_lock = threading.Lock()
_counters: dict[str, Any] = {}


@dataclass(frozen=True)
class WriteResult:
    """What one write (a job, or a micro-batch) did: in total and per partition, and the
    first refused rows, with why (``(partition, Rejection)``, at most MAX_SHOWN)."""

    total: Counts
    partitions: tuple[tuple[int, Counts], ...] = ()
    rejected: tuple[tuple[int, Rejection], ...] = ()

    @property
    def pushed(self) -> int:
        return self.total.pushed

    @property
    def skipped(self) -> int:
        return self.total.skipped

    @property
    def refused(self) -> int:
        return self.total.refused

    @property
    def invalid(self) -> int:
        return self.total.invalid

    @classmethod
    def of(
        cls, parts: Iterable[tuple[int, Counts]], rejected: Iterable[tuple[int, Rejection]] = ()
    ) -> WriteResult:
        """From (partition, Counts) pairs (a partition may repeat: they add up) and
        (partition, Rejection) pairs."""
        merged: dict[int, Counts] = {}
        for part, counts in parts:
            merged[part] = merged.get(part, Counts()) + counts
        total = sum(merged.values(), Counts())
        return cls(
            total,
            tuple(sorted(merged.items())),
            tuple(sorted(rejected, key=lambda pr: (pr[0], pr[1].row)))[:MAX_SHOWN],
        )


@dataclass(frozen=True)
class Report:
    """One write's result for the driver's log and counter."""

    queue: str
    where: str  # the queue and server, without secrets (Target.where)
    what: str  # 'format("dynoq") write', "micro-batch 3 of query q", ...
    result: WriteResult


Note = Report | Callable[[], None]  # what a channel carries


def emit(report: Report) -> None:
    """Log ``report`` (logger dynoq.spark, INFO) and count it in Prometheus."""
    t = report.result.total
    parts = report.result.partitions
    log.info(
        "dynoq.spark: %s to %s: pushed %d, skipped %d as duplicates, refused %d%s "
        "(%d partitions: %s)%s",
        report.what,
        report.where,
        t.pushed,
        t.skipped,
        t.refused,
        f" ({t.invalid} invalid rows)" if t.invalid else "",
        len(parts),
        ", ".join(f"{p}={c.pushed}/{c.skipped}/{c.refused}" for p, c in parts[:50]),
        _rejections(report.result),
    )
    counter = _prometheus_counter()
    if counter is not None:
        for outcome in ("pushed", "skipped", "refused"):
            counter.labels(report.queue, outcome).inc(getattr(t, outcome))


def _rejections(result: WriteResult) -> str:
    if not result.rejected:
        return ""
    shown = "; ".join(f"partition {p} {r}" for p, r in result.rejected)
    more = result.total.invalid - len(result.rejected)
    return f"; refused rows: {shown}" + (f" (and {more} more)" if more > 0 else "")


def _prometheus_counter() -> Any:
    return _made(
        "dynoq_spark_rows",
        "Rows written by dynoq's Spark writers, by queue and outcome (pushed, skipped as "
        "duplicates, refused)",
        ["queue", "outcome"],
    )


def stream_counter() -> Any:
    """The Prometheus counter of what streaming reads read (None without
    prometheus-client)."""
    return _made(
        "dynoq_spark_stream_messages",
        "Messages read by dynoq's streaming source, by queue, group and outcome (read, "
        "redelivered: read after an earlier delivery)",
        ["queue", "group", "outcome"],
    )


def _made(name: str, doc: str, labels: list[str]) -> Any:
    """A counter of this process, made once (None without prometheus-client)."""
    with _lock:
        if name not in _counters:
            if importlib.util.find_spec("prometheus_client") is None:
                _counters[name] = None
            else:
                prom = importlib.import_module("prometheus_client")
                _counters[name] = prom.Counter(name, doc, labels)
        return _counters[name]


class Reports:
    """The accumulator parameter of a :class:`Channel` (pyspark's AccumulatorParam
    protocol). Where it was made (the driver) each update is emitted and nothing is
    kept; anywhere else (a Python worker) updates pile up until Spark sends them."""

    def __init__(self) -> None:
        self.token = uuid.uuid4().hex
        _here.add(self.token)

    def zero(self, value: list[Note]) -> list[Note]:
        return []

    def addInPlace(self, value1: list[Note], value2: list[Note]) -> list[Note]:
        if self.token in _here:
            for note in value2:
                _arrived(note)
            return []
        return value1 + value2


def _arrived(note: Note) -> None:
    """A report or a task's clean-up, on the driver: the task that sent it succeeded."""
    if isinstance(note, Report):
        emit(note)
        return
    try:
        note()
    except Exception:  # a clean-up fails no job
        log.warning("dynoq.spark: a Spark task's clean-up failed", exc_info=True)


def channel(spark_context: Any) -> Any:
    """The accumulator that carries reports to this driver, one per SparkContext; None
    where Spark has no accumulators (Spark Connect)."""
    with _lock:
        found = _channels.get(spark_context)
    if found is None:
        try:
            found = spark_context.accumulator([], Reports())
        except Exception:  # noqa: BLE001 - no accumulators here: report where we run
            return None
        with _lock:
            found = _channels.setdefault(spark_context, found)
    return found


def send(acc: Any, report: Report) -> None:
    """Hand ``report`` to the driver through accumulator ``acc`` (None: no channel, so
    emit it here: a log line where this runs)."""
    if acc is None:
        emit(report)
    else:
        acc.add([report])


def send_done(acc: Any, done: Callable[[], None]) -> bool:
    """Have ``done`` (picklable) run on the driver once Spark counted the task that calls
    this as succeeded; False when there is no channel (nothing is sent)."""
    if acc is None:
        return False
    acc.add([done])
    return True
