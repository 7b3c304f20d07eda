"""Spark sinks: DataFrame rows into a dynoq queue (DESIGN §3 Spark).

::

    df.foreachPartition(partition_sink(url, "orders", id_col="event_id"))
    stream.writeStream.foreachBatch(batch_sink(url, "orders", id_col="event_id")).start()
    pushed, skipped = write(df, url, "orders", id_col="event_id")   # Arrow, with counts

Importable without pyspark: pyspark is only imported when a DataFrame is handed in.
A sink holds only picklable settings; executors connect on first use and reuse the client
for every later task of the same Python worker (a module-level cache). Rows are pushed in
batches of ``batch_size`` with push-if-absent by id, so a retried or speculative task, or a
re-run streaming epoch, pushes nothing twice (if consumers ack a message before the retry,
only the queue's ``dedupe_window`` keeps it from coming back). A bad id fails the task with
a :class:`dynoq.DynoqError` before anything of its batch is written; a Redis error fails
the task so Spark retries it. Row-to-payload conversion: :mod:`dynoq.spark_rows`.

Open the queue on the driver first (``client.queue(name, shards=..., ordered=...)``) to
choose its settings; a sink opens it by name, creating it with defaults if it is new.
"""

from __future__ import annotations

import importlib
import importlib.util
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .client import Client, connect
from .errors import ConnectionFailed, InvalidArgument, InvalidType
from .keys import check_name
from .spark_rows import RowSpec, to_messages

_clients: dict[tuple[str, str], Client] = {}
_clients_lock = threading.Lock()


def _client(url: str, options: Mapping[str, Any]) -> Client:
    """One client per (url, prefix, options) in this process, made on first use."""
    key = (url, repr(sorted(options.items())))
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = connect(url, **options)
        return client


def _drop_client(url: str, options: Mapping[str, Any]) -> None:
    with _clients_lock:
        client = _clients.pop((url, repr(sorted(options.items()))), None)
    if client is not None:
        client.close()


def check_url(url: object) -> str:
    """``url`` if every Spark executor can reach it (so not memory:// nor embedded://)."""
    if not isinstance(url, str) or url.split("://", 1)[0] in ("memory", "embedded"):
        raise InvalidArgument(
            f"Spark executors need a server they can all reach, not {url!r}: pass "
            "client.url of a connected client (a redis:// URL)")
    return url


def _server_now(client: Client) -> float:
    seconds, micros = client.redis.time()
    return int(seconds) + int(micros) / 1e6


@dataclass(frozen=True)
class QueueSink:
    """Picklable settings of a sink; call it on an iterator of rows (foreachPartition)."""

    url: str
    queue: str
    spec: RowSpec
    batch_size: int = 1000
    connect_options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_url(self.url)
        check_name(self.queue, "queue name")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int):
            raise InvalidType("batch_size must be an int")
        if not 1 <= self.batch_size <= 100_000:
            raise InvalidArgument(f"batch_size must be in 1..100000, got {self.batch_size}")

    def __call__(self, rows: Iterable[Any]) -> None:
        """foreachPartition entry point: push every row of one partition."""
        self.push_rows(row.asDict() if hasattr(row, "asDict") else row for row in rows)

    def push_rows(self, rows: Iterable[Mapping[str, Any]]) -> tuple[int, int]:
        """Push rows (mappings) in batches; returns (pushed, skipped as already present)."""
        pushed = skipped = 0
        batch: list[Mapping[str, Any]] = []
        for row in rows:
            batch.append(row)
            if len(batch) >= self.batch_size:
                p, s = self._push_batch(batch)
                pushed, skipped, batch = pushed + p, skipped + s, []
        if batch:
            p, s = self._push_batch(batch)
            pushed, skipped = pushed + p, skipped + s
        return pushed, skipped

    def push_arrow(self, batches: Iterable[Any]) -> Iterator[Any]:
        """mapInArrow entry point: push Arrow record batches, yield one batch of counts."""
        pa = importlib.import_module("pyarrow")  # untyped; present wherever Arrow runs
        pushed = skipped = 0
        for record_batch in batches:
            rows = record_batch.to_pylist()
            for i in range(0, len(rows), self.batch_size):
                p, s = self._push_batch(rows[i:i + self.batch_size])
                pushed, skipped = pushed + p, skipped + s
        yield pa.RecordBatch.from_pydict({"pushed": [pushed], "skipped": [skipped]})

    def _push_batch(self, rows: list[Mapping[str, Any]]) -> tuple[int, int]:
        client = _client(self.url, self.connect_options)
        try:
            messages = to_messages(self.spec, rows, lambda: _server_now(client))
            pushed = client.queue(self.queue).ensure_many(messages)
        except ConnectionFailed:
            _drop_client(self.url, self.connect_options)  # the retried task reconnects
            raise
        return pushed, len(rows) - pushed

    def write(self, df: Any) -> tuple[int, int]:
        """Push a DataFrame (one Spark job); returns (pushed, skipped). Uses Arrow
        (mapInArrow: several times faster) when pandas and pyarrow are installed."""
        self.spec.check_columns(df.columns)  # on the driver, before any task runs
        df = df.select(*self.spec.needed(df.columns))
        if _has_arrow():
            counts = df.mapInArrow(self.push_arrow, "pushed long, skipped long").collect()
            return sum(r.pushed for r in counts), sum(r.skipped for r in counts)
        counted = df.rdd.mapPartitions(
            lambda rows: [self.push_rows(r.asDict() for r in rows)]).collect()
        return sum(p for p, _ in counted), sum(s for _, s in counted)


def _has_arrow() -> bool:
    """mapInArrow needs pyarrow and (for its UDF machinery) pandas on the driver."""
    return all(importlib.util.find_spec(m) is not None for m in ("pandas", "pyarrow"))


class BatchSink:
    """foreachBatch entry point: ``(batch_df, epoch_id)``; one Spark job per micro-batch.

    ``epochs`` maps each epoch to its (pushed, skipped), kept on the driver, where
    foreachBatch calls the sink (one batch at a time per query)."""

    def __init__(self, sink: QueueSink) -> None:
        self.sink = sink
        self.epochs: dict[int, tuple[int, int]] = {}

    def __call__(self, df: Any, epoch_id: int) -> None:
        # One action per batch, so the batch need not be persisted.
        self.epochs[int(epoch_id)] = self.sink.write(df)

    @property
    def totals(self) -> tuple[int, int]:
        """(pushed, skipped) over every micro-batch so far."""
        done = list(self.epochs.values())
        return sum(p for p, _ in done), sum(s for _, s in done)


def _sink(url: str | Client, queue: str, id_col: str, key_col: str | None, delay_col: str | None,
          priority_col: str | None, payload_cols: Iterable[str] | None, batch_size: int,
          connect_options: dict[str, Any]) -> QueueSink:
    if isinstance(url, Client):
        url = url.url
    spec = RowSpec.of(id_col, key_col, delay_col, priority_col, payload_cols)
    return QueueSink(url, queue, spec, batch_size, dict(connect_options))


def partition_sink(url: str | Client, queue: str, *, id_col: str, key_col: str | None = None,
                   delay_col: str | None = None, priority_col: str | None = None,
                   payload_cols: Iterable[str] | None = None, batch_size: int = 1000,
                   **connect_options: Any) -> QueueSink:
    """A function for ``df.foreachPartition``: each row becomes one message.

    ``id_col`` gives ids (str or int, never null or empty); ``key_col`` the ordering key
    (ordered queues route by it and keep each partition's row order per key);
    ``delay_col`` seconds or a due timestamp; ``priority_col`` 0..99; ``payload_cols`` the
    columns of the payload dict (default: all). Other keywords (``prefix=`` ...) go to
    :func:`dynoq.connect` on the executors."""
    return _sink(url, queue, id_col, key_col, delay_col, priority_col, payload_cols,
                 batch_size, connect_options)


def batch_sink(url: str | Client, queue: str, *, id_col: str, key_col: str | None = None,
               delay_col: str | None = None, priority_col: str | None = None,
               payload_cols: Iterable[str] | None = None, batch_size: int = 1000,
               **connect_options: Any) -> BatchSink:
    """A function for Structured Streaming's ``foreachBatch``; options as
    :func:`partition_sink`. A re-run epoch pushes nothing twice (ids)."""
    return BatchSink(_sink(url, queue, id_col, key_col, delay_col, priority_col,
                           payload_cols, batch_size, connect_options))


def write(df: Any, url: str | Client, queue: str, *, id_col: str, key_col: str | None = None,
          delay_col: str | None = None, priority_col: str | None = None,
          payload_cols: Iterable[str] | None = None, batch_size: int = 1000,
          **connect_options: Any) -> tuple[int, int]:
    """Push a DataFrame now and return (pushed, skipped as already present)."""
    return _sink(url, queue, id_col, key_col, delay_col, priority_col, payload_cols,
                 batch_size, connect_options).write(df)


__all__ = ["BatchSink", "QueueSink", "batch_sink", "partition_sink", "write"]
