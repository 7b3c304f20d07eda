"""The one write path under every Spark sink: rows -> messages -> counted pushes.

:class:`RowWriter` holds picklable settings (a :class:`~.target.Target`, a
:class:`~.rows.RowSpec`, a batch size and, for streaming, the query id). On the driver,
:meth:`RowWriter.check` validates them against the data's columns and the queue before any
task starts; on the executors, :meth:`RowWriter.push_rows` / :meth:`RowWriter.push_arrow`
push a partition in batches of ``batch_size`` rows and count what happened
(:class:`Counts`: pushed, skipped as duplicates, refused). A micro-batch's pushes carry
its (query, batch id), and the driver commits the batch when every task has written
(:mod:`dynoq._core.batches`).

:func:`write_dataframe` runs one Spark job over a DataFrame and returns a
:class:`WriteResult` (per partition and in total); :func:`report` logs it on the driver
(logger ``dynoq.spark``) and adds it to the ``dynoq_spark_rows_total`` Prometheus counter
when prometheus-client is installed.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import threading
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from .._core.batches import RETENTION, BatchOps, Counts, Progress, check_batch, check_query
from .._core.validate import check_int
from ..errors import ConnectionFailed, InvalidArgument, OrderedQueueError, QueueGone
from ..queue import Queue
from .rows import RowSpec, to_messages
from .target import Target

log = logging.getLogger("dynoq.spark")
MAX_BATCH_SIZE = 100_000
COUNTS_SCHEMA = "partition long, pushed long, skipped long, refused long"
_warned: set[str] = set()
_warned_lock = threading.Lock()


@dataclass(frozen=True)
class WriteResult:
    """What one write (a job, or a micro-batch) did: in total and per partition."""

    total: Counts
    partitions: tuple[tuple[int, Counts], ...] = ()

    @property
    def pushed(self) -> int:
        return self.total.pushed

    @property
    def skipped(self) -> int:
        return self.total.skipped

    @property
    def refused(self) -> int:
        return self.total.refused

    @classmethod
    def of(cls, parts: Iterable[tuple[int, Counts]]) -> WriteResult:
        merged: dict[int, Counts] = {}
        for part, counts in parts:
            merged[part] = merged.get(part, Counts()) + counts
        total = sum(merged.values(), Counts())
        return cls(total, tuple(sorted(merged.items())))


def check_spec(q: Queue, spec: RowSpec, where: str) -> None:
    """Refuse a column mapping the queue cannot honour (before anything is written)."""
    if spec.key_col is not None and not q.settings.ordered:
        raise InvalidArgument(
            f"key_col {spec.key_col!r} given, but {where} is not ordered: keys only route "
            "messages on ordered queues (open it with ordered=True), so drop key_col or "
            "write to an ordered queue")
    if q.settings.ordered:
        for what in ("delay_col", "priority_col"):
            if getattr(spec, what) is not None:
                raise OrderedQueueError(
                    f"{what} given, but {where} is ordered: ordered queues deliver in push "
                    "order, without delay or priority")


@dataclass(frozen=True)
class RowWriter:
    """Picklable settings of a write; see the module docstring."""

    target: Target
    spec: RowSpec
    batch_size: int = 1000
    query: str = ""  # a streaming query's id or name; "" for one-shot writes
    retention: float = RETENTION

    def __post_init__(self) -> None:
        check_int(self.batch_size, "batch_size", low=1, high=MAX_BATCH_SIZE)
        if self.query:
            check_query(self.query)

    def for_query(self, query: str) -> RowWriter:
        return replace(self, query=check_query(query))

    # -- on the driver ---------------------------------------------------------------------

    def check(self, columns: Collection[str] | None = None, *,
              streaming: bool = False) -> Queue:
        """Validate the columns (when known) and the queue, on the driver; the queue.
        Warns once when a one-shot write goes to a queue without a dedupe window."""
        if columns is not None:
            self.spec.check_columns(columns)
        q = self.target.open()
        check_spec(q, self.spec, self.target.where)
        if not streaming and not self.query and not q.settings.dedupe_window:
            _warn_once(self.target)
        return q

    def commit(self, batch: int) -> bool:
        """Record micro-batch ``batch`` of the query as written (True if it was not yet)."""
        q = self.target.open()
        return bool(q.backend.run(self._ops(q).commit(batch)))

    def progress(self) -> Progress:
        q = self.target.open()
        return q.backend.run(self._ops(q).progress())  # type: ignore[no-any-return]

    # -- on the executors ------------------------------------------------------------------

    def push_rows(self, rows: Iterable[Mapping[str, Any]], batch: int | None = None) -> Counts:
        """Push rows (mappings) in batches of ``batch_size``; what happened to them."""
        total = Counts()
        chunk: list[Mapping[str, Any]] = []
        for row in rows:
            chunk.append(row)
            if len(chunk) >= self.batch_size:
                total += self._push(chunk, batch)
                chunk = []
        if chunk:
            total += self._push(chunk, batch)
        return total

    def push_arrow(self, record_batches: Iterable[Any], batch: int | None = None) -> Counts:
        """Push Arrow record batches (each turned into rows with ``to_pylist``)."""
        total = Counts()
        size = self.batch_size
        for rb in record_batches:
            rows = rb.to_pylist()
            for i in range(0, len(rows), size):
                total += self._push(rows[i:i + size], batch)
        return total

    def _ops(self, q: Queue) -> BatchOps:
        return BatchOps(q.ops, self.query, self.retention)

    def _push(self, rows: list[Mapping[str, Any]], batch: int | None) -> Counts:
        if batch is not None:
            check_batch(batch)
        try:
            q = self.target.open()
            # The queue this process knows may have been read after the driver checked
            # the mapping (created anew since): check it against what is written.
            check_spec(q, self.spec, self.target.where)
            client = self.target.client()
            prepare = q.ops.prepare
            outs = [prepare(m) for m in to_messages(self.spec, rows, client.server_time)]
            return q.backend.run(self._ops(q).push(outs, batch))  # type: ignore[no-any-return]
        except ConnectionFailed:
            self.target.forget()  # the retried task reconnects
            raise
        except QueueGone:
            # Written nowhere: the shards refused this process's old view of the queue.
            # Spark retries the task, which reads the queue again (or fails if it is gone).
            self.target.forget_queue()
            raise


def _warn_once(target: Target) -> None:
    with _warned_lock:
        if target.where in _warned:
            return
        _warned.add(target.where)
    log.warning(
        "dynoq.spark: %s has no dedupe_window. Rows whose id is in the queue are skipped, "
        "but an id that consumers already acked is pushed again if it is written again "
        "(a re-run job, a retried task of this write). Open the queue with "
        "dedupe_window=<seconds> to refuse ids acked within that window; streaming writes "
        "need no window for their own replays.", target.where)


# -- one Spark job ---------------------------------------------------------------------------

def has_arrow() -> bool:
    """mapInArrow needs pyarrow and (for its UDF machinery) pandas on the driver."""
    return all(importlib.util.find_spec(m) is not None for m in ("pandas", "pyarrow"))


def _partition() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return -1 if ctx is None else ctx.partitionId()


def _arrow_task(writer: RowWriter, batch: int | None,
                record_batches: Iterable[Any]) -> Iterator[Any]:
    pa = importlib.import_module("pyarrow")  # untyped; present wherever Arrow runs
    c = writer.push_arrow(record_batches, batch)
    yield pa.RecordBatch.from_pydict({"partition": [_partition()], "pushed": [c.pushed],
                                      "skipped": [c.skipped], "refused": [c.refused]})


def _rows_task(writer: RowWriter, batch: int | None, part: int,
               rows: Iterable[Any]) -> list[tuple[int, int, int, int]]:
    c = writer.push_rows((r.asDict() for r in rows), batch)
    return [(part, c.pushed, c.skipped, c.refused)]


def write_dataframe(df: Any, writer: RowWriter, batch: int | None = None) -> WriteResult:
    """Push a DataFrame in one Spark job (Arrow when available); per-partition counts.
    Validates on the driver first. Does not commit ``batch``: the caller does, once this
    returned."""
    writer.check(df.columns, streaming=batch is not None)
    df = df.select(*writer.spec.needed(df.columns))
    if has_arrow():
        rows = df.mapInArrow(partial(_arrow_task, writer, batch), COUNTS_SCHEMA).collect()
        parts = [(r.partition, Counts(r.pushed, r.skipped, r.refused)) for r in rows]
    else:
        got = df.rdd.mapPartitionsWithIndex(partial(_rows_task, writer, batch)).collect()
        parts = [(p, Counts(a, b, c)) for p, a, b, c in got]
    return WriteResult.of(parts)


# -- reporting on the driver -----------------------------------------------------------------

_counter: list[Any] = []


def report(target: Target, result: WriteResult, what: str) -> None:
    """Log ``result`` (logger dynoq.spark, INFO) and count it in Prometheus if installed."""
    t = result.total
    log.info("dynoq.spark: %s to %s: pushed %d, skipped %d as duplicates, refused %d "
             "(%d partitions: %s)", what, target.where, t.pushed, t.skipped, t.refused,
             len(result.partitions),
             ", ".join(f"{p}={c.pushed}/{c.skipped}/{c.refused}"
                       for p, c in result.partitions[:50]))
    counter = _prometheus_counter()
    if counter is not None:
        for outcome in ("pushed", "skipped", "refused"):
            counter.labels(target.queue, outcome).inc(getattr(t, outcome))


def _prometheus_counter() -> Any:
    if not _counter:
        if importlib.util.find_spec("prometheus_client") is None:
            _counter.append(None)
        else:
            prom = importlib.import_module("prometheus_client")
            _counter.append(prom.Counter(
                "dynoq_spark_rows", "Rows written by dynoq's Spark sinks, by queue and "
                "outcome (pushed, skipped as duplicates, refused)", ["queue", "outcome"]))
    return _counter[0]
