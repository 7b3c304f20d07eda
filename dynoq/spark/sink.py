"""Spark sinks for ``foreachPartition`` and ``foreachBatch`` users, and ``write``.

::

    client.queue("orders", shards=8)                   # choose its settings on the driver
    df.foreachPartition(partition_sink(client, "orders", id_col="event_id"))
    result = write(df, client, "orders", id_col="event_id")   # one job, with counts
    stream.writeStream.foreachBatch(batch_sink(client, "orders", id_col="event_id"))
        .option("checkpointLocation", path).start()

Kafka-sink options, on every sink: ``queue_col`` names the column of each row's queue
(Kafka's ``topic`` column), and ``queue`` is then the list of queues rows may name (one
name: that one), each opened and checked on the driver; a row naming another (or null,
or no valid name) is refused. ``headers_col``: a ``map<string,string>`` column whose map
(null or empty: none) becomes the message's headers, not part of the payload.
``max_rows_per_second``: at most that many rows pushed a second by all the write's tasks
together (counted in Redis, :mod:`.throttle`; tasks wait for it, never fail for it).

A sink takes a connected :class:`dynoq.Client` (its URL, prefix and connection options,
TLS included, go to the executors; nothing is printed with secrets) or a URL plus
``prefix=`` and redis-py options. It checks the queue on the driver when it is made: the
queue must exist (a sink never creates one with settings nobody chose), ``key_col`` needs an
ordered queue, and ordered queues take no delay or priority.

Every write is push-if-absent by id, so a retried or speculative task pushes nothing
twice while the first copy is in the queue. ``batch_sink`` is exactly-once per
micro-batch: each push records its ids with the (query, batch id), and the batch is
committed when it is written, so a replayed batch (a restarted query) pushes nothing
twice even if consumers acked it already (see :mod:`dynoq._core.batches`). One-shot
writes have no such record: there, an id acked before it is written again comes back
unless the queue has a ``dedupe_window`` (a warning says so once). The data source
(``format("dynoq")``, :mod:`.datasource`) runs the same code.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._core.batches import RETENTION, Counts, Progress, check_query
from ..client import Client
from ..errors import InvalidArgument, InvalidType
from .job import report, write_dataframe
from .report import Report, WriteResult, channel, send
from .rows import RowSpec
from .target import Target
from .writer import RowWriter, settle, writer_for

log = logging.getLogger("dynoq.spark")
QUERY_ID = "sql.streaming.queryId"  # Spark's local property: the query's lasting id


@dataclass(frozen=True)
class QueueSink:
    """A ``foreachPartition`` function (picklable): each row becomes one message. Made
    on a driver, it carries the driver's report channel: each partition's counts are
    logged and counted there (logger ``dynoq.spark``, Prometheus) when its task ends."""

    writer: RowWriter
    channel: Any = field(default=None, compare=False)

    def __call__(self, rows: Iterable[Any]) -> None:
        self.push_rows(
            row.asDict() if hasattr(row, "asDict") else row
            for row in _decoded(rows, self.writer.plan is not None)
        )

    def push_rows(self, rows: Iterable[Mapping[str, Any]]) -> Counts:
        """Push rows (mappings); what happened to them (reported to the driver, which
        then deletes the task's record of its pushes: without a channel it expires)."""
        tally = self.writer.push_rows(rows)
        part = _partition()
        w = self.writer
        send(
            self.channel,
            Report(
                w.label,
                w.where,
                f"partition {part}",
                WriteResult.of([(part, tally.counts)], [(part, r) for r in tally.rejected]),
            ),
        )
        settle(self.writer, tally, self.channel)
        return tally.counts

    def write(self, df: Any) -> WriteResult:
        """Push a DataFrame in one Spark job; per-partition and total counts."""
        result = write_dataframe(df, self.writer)
        report(self.writer, result, "write")
        return result


class BatchSink:
    """A ``foreachBatch`` function: ``(batch_df, batch_id)``, one Spark job per
    micro-batch, exactly-once per batch of the streaming query.

    ``history`` keeps the last ``keep`` batches' results, ``totals`` the sum over every
    batch since this sink was made; ``on_batch(batch_id, result)`` is called after each
    commit. Not thread-safe across queries: give each query its own sink."""

    def __init__(
        self,
        writer: RowWriter,
        *,
        query: str | None = None,
        keep: int = 100,
        on_batch: Callable[[int, WriteResult], None] | None = None,
    ) -> None:
        self.writer = writer
        self.query = None if query is None else check_query(query)
        self.history: deque[tuple[int, WriteResult]] = deque(maxlen=max(1, keep))
        self.totals = Counts()
        self.on_batch = on_batch
        self._lock = threading.Lock()

    def __call__(self, df: Any, batch_id: int) -> WriteResult:
        query = self.query or _query_id(df)
        writer = self.writer.for_query(query)
        result = write_dataframe(df, writer, int(batch_id))  # one action: no persist needed
        writer.commit(int(batch_id))
        with self._lock:
            self.history.append((int(batch_id), result))
            self.totals += result.total
        report(writer, result, f"micro-batch {batch_id} of query {query}")
        if self.on_batch is not None:
            self.on_batch(int(batch_id), result)
        return result

    def progress(self, query: str) -> Progress:
        """Where ``query`` stands on the queue (committed batch, batch in progress)."""
        return self.writer.for_query(query).progress()


def _decoded(rows: Iterable[Any], typed: bool) -> Iterator[Any]:
    """``rows``, with PySpark's own failure to decode one (before the sink sees it)
    named: such a column fails the job, since no row of it can be refused alone."""
    it = iter(rows)
    while True:
        try:
            row = next(it)
        except StopIteration:
            return
        except (TypeError, NotImplementedError) as exc:  # what PySpark's Row decoding raises
            hint = (
                ""
                if typed
                else ": give partition_sink schema=df.schema to have such "
                "a column refused on the driver, before any task starts"
            )
            raise InvalidType(
                f"PySpark cannot turn a row of this partition into Python "
                f"({type(exc).__name__}: {exc}); a map keyed by arrays, a year-month or a "
                f"calendar interval has no Python form: cast the column first{hint}"
            ) from exc
        yield row


def _partition() -> int:
    try:
        from pyspark import TaskContext
    except ImportError:  # pushing rows by hand, without Spark
        return -1
    ctx = TaskContext.get()
    return -1 if ctx is None else ctx.partitionId()


def _driver_channel() -> Any:
    """The running SparkContext's report channel, when this is its driver."""
    import sys

    if "pyspark" not in sys.modules:
        return None
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    return None if context is None else channel(context)


def _query_id(df: Any) -> str:
    value = df.sparkSession.sparkContext.getLocalProperty(QUERY_ID)
    if not value:
        raise InvalidArgument(
            "batch_sink runs under a streaming query's foreachBatch; "
            "outside one, pass query=<a stable name>"
        )
    return str(value)


def _writer(
    where: str | Client,
    queue: str | Sequence[str],
    id_col: str,
    key_col: str | None,
    delay_col: str | None,
    priority_col: str | None,
    payload_cols: Iterable[str] | None,
    batch_size: int,
    connect_options: Mapping[str, Any],
    retention: float = RETENTION,
    *,
    queue_col: str | None,
    headers_col: str | None,
    max_rows_per_second: int | None,
    expires_col: str | None = None,
) -> RowWriter:
    spec = RowSpec.of(
        id_col,
        key_col,
        delay_col,
        priority_col,
        payload_cols,
        queue_col=queue_col,
        headers_col=headers_col,
        expires_col=expires_col,
    )
    return writer_for(
        lambda name: Target.of(where, name, connect_options),
        queue,
        spec,
        batch_size,
        retention=retention,
        max_rows_per_second=max_rows_per_second,
    )


def partition_sink(
    where: str | Client,
    queue: str | Sequence[str],
    *,
    id_col: str,
    key_col: str | None = None,
    delay_col: str | None = None,
    priority_col: str | None = None,
    payload_cols: Iterable[str] | None = None,
    batch_size: int = 1000,
    queue_col: str | None = None,
    headers_col: str | None = None,
    max_rows_per_second: int | None = None,
    expires_col: str | None = None,
    schema: Any = None,
    **connect_options: Any,
) -> QueueSink:
    """A function for ``df.foreachPartition``: each row becomes one message.

    ``where``: a connected :class:`dynoq.Client` (recommended), or a URL with ``prefix=``
    and redis-py options as keywords. ``id_col`` gives ids (str or int, never null or
    empty); ``key_col`` the ordering key (ordered queues only; each partition's rows keep
    their order per key); ``delay_col`` seconds, a due timestamp or a day-time interval;
    ``priority_col`` 0..99; ``expires_col`` seconds (or a day-time interval) each message
    must be delivered in, else it is dead-lettered (null: no expiry); ``payload_cols`` the
    payload's columns (default: all);
    ``batch_size`` rows per push (1..100000); ``queue_col``, ``headers_col``,
    ``max_rows_per_second``: see the module docstring. ``schema``: the DataFrame's schema
    (``df.schema``; recommended): its column types are checked now, and values are stored
    by their Spark type, exactly as every other writer stores them. Without it, by their
    Python type: the same, except that a ``timestamp_ntz`` is taken as local time, a
    decimal below 0.000001 may get up to two more decimals than its scale (PySpark hands
    it over in engineering notation), and a column PySpark cannot decode into a Row (a
    map keyed by arrays, a year-month or a calendar interval) fails the job with
    InvalidType instead of being refused on the driver.

    Checks the queue now, on the driver: InvalidArgument if it does not exist or cannot
    take this mapping, InvalidType if a column's type cannot be stored, ConnectionFailed
    if the server is unreachable."""
    writer = _writer(
        where,
        queue,
        id_col,
        key_col,
        delay_col,
        priority_col,
        payload_cols,
        batch_size,
        connect_options,
        queue_col=queue_col,
        headers_col=headers_col,
        max_rows_per_second=max_rows_per_second,
        expires_col=expires_col,
    )
    if schema is not None:
        writer.check([f.name for f in schema.fields])
        writer = writer.typed(schema.jsonValue())
    else:
        writer.check()
    return QueueSink(writer, _driver_channel())


def batch_sink(
    where: str | Client,
    queue: str | Sequence[str],
    *,
    id_col: str,
    key_col: str | None = None,
    delay_col: str | None = None,
    priority_col: str | None = None,
    payload_cols: Iterable[str] | None = None,
    batch_size: int = 1000,
    queue_col: str | None = None,
    headers_col: str | None = None,
    max_rows_per_second: int | None = None,
    expires_col: str | None = None,
    query: str | None = None,
    retention: float = RETENTION,
    keep: int = 100,
    on_batch: Callable[[int, WriteResult], None] | None = None,
    **connect_options: Any,
) -> BatchSink:
    """A function for Structured Streaming's ``foreachBatch``, exactly-once per
    micro-batch; options as :func:`partition_sink`.

    ``query``: the name its commits are recorded under (default: Spark's query id, which
    a restart from the same checkpoint keeps and a new checkpoint changes; a name you
    give must change with the checkpoint too). ``retention``: seconds the query's commit
    record outlives its last batch (a replay after that pushes what is absent again).
    ``keep``: batches kept in ``history``; ``on_batch(batch_id, result)``: called after
    each batch is committed."""
    writer = _writer(
        where,
        queue,
        id_col,
        key_col,
        delay_col,
        priority_col,
        payload_cols,
        batch_size,
        connect_options,
        retention,
        queue_col=queue_col,
        headers_col=headers_col,
        max_rows_per_second=max_rows_per_second,
        expires_col=expires_col,
    )
    writer.check(streaming=True)
    return BatchSink(writer, query=query, keep=keep, on_batch=on_batch)


def write(
    df: Any,
    where: str | Client,
    queue: str | Sequence[str],
    *,
    id_col: str,
    key_col: str | None = None,
    delay_col: str | None = None,
    priority_col: str | None = None,
    payload_cols: Iterable[str] | None = None,
    batch_size: int = 1000,
    queue_col: str | None = None,
    headers_col: str | None = None,
    max_rows_per_second: int | None = None,
    expires_col: str | None = None,
    **connect_options: Any,
) -> WriteResult:
    """Push a DataFrame now, in one Spark job (Arrow when pandas and pyarrow are
    installed); returns what it did, in total and per partition. Options as
    :func:`partition_sink`."""
    return QueueSink(
        _writer(
            where,
            queue,
            id_col,
            key_col,
            delay_col,
            priority_col,
            payload_cols,
            batch_size,
            connect_options,
            queue_col=queue_col,
            headers_col=headers_col,
            max_rows_per_second=max_rows_per_second,
            expires_col=expires_col,
        )
    ).write(df)
