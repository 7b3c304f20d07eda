"""``format("dynoq")``: a Spark 4 Python data source for dynoq queues.

Register it once per session, and in every thread of yours that uses it
(``dynoq.spark.register(spark)``; ``dynoq.spark.spark_session()`` does it for you)::

    from dynoq.spark import register, source_options
    register(spark)

    opts = source_options(client, "orders")          # url, prefix, connection options
    df.write.format("dynoq").options(**opts).option("idCol", "event_id")
        .option("keyCol", "customer").mode("append").save()          # batch write
        # (mode("append") is required: Spark refuses its default save mode itself)
    stream.writeStream.format("dynoq").options(**opts).option("idCol", "event_id")
        .option("checkpointLocation", path).start()                   # exactly-once
    spark.read.format("dynoq").options(**opts).load()                 # read, claims nothing
    spark.readStream.format("dynoq").options(**opts).option("group", "etl").load()
        # consume, exactly once per micro-batch (dynoq.spark.stream)

Options (names are case-insensitive): ``url`` and ``queue`` (required), ``prefix``
(default "dq"), ``connectOptions`` (a JSON object of redis-py options, e.g. TLS files),
``maxPayloadBytes``; for writes ``idCol`` (required), ``keyCol``, ``delayCol``, ``expiresCol``,
``priorityCol``, ``payloadCols`` (comma-separated; default all but ``headersCol``),
``batchSize`` (rows per push, default 1000), ``arrow`` ("true", the default, or "false":
rows instead of Arrow batches), ``queueCol`` (the column naming each row's queue) with
``queues`` (comma-separated: the queues rows may name, each opened and checked on the
driver; ``queue`` then optional), ``headersCol`` (a map<string,string> column: the
messages' headers, not payload), ``maxRowsPerSecond`` (rows a second over all the
write's tasks, counted in Redis: :mod:`.throttle`); for streaming writes
``queryName`` (default: Spark's query id, kept across restarts from one checkpoint) and
``retention`` (seconds, default 7 days); for reads ``states`` (comma-separated, default
"ready,delayed,dead": in-flight messages, "unacked", only when named), and ``schema``,
``mode``, ``columnNameOfCorruptRecord`` (typed reads: :mod:`.decode`); for streaming
reads ``group`` (default "spark"), ``maxMessagesPerTrigger`` (default 10,000, at most
100,000) and ``partitionsPerShard`` (default 1, at most 64). Options, the queues (they
must exist; ``keyCol`` needs ordered queues) and the columns' types (:mod:`.types`) are
checked on the driver before any task starts.

Each write task returns its partition's counts (pushed, skipped as duplicates, refused,
invalid) and first refused rows as its commit message; the commit, which Spark runs in a
Python worker, sends the write's report to the driver (:mod:`.report`), whose
``dynoq.spark`` logger and Prometheus counter take it, for a batch write and for each
micro-batch. A streaming micro-batch is exactly-once: its pushes record their ids with
the (query, batch id), and ``commit`` records the batch as done
(:mod:`dynoq._core.batches`). A read has one partition per shard, and hands Spark one
Arrow record batch per page of a shard. All of it: docs/spark.md.
"""

from __future__ import annotations

import importlib
import threading
import weakref
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)

from .._core.batches import RETENTION, Counts, check_query
from .._core.scan import DEFAULT_STATES, check_states
from .._core.validate import check_seconds
from ..client import Client
from ..errors import InvalidArgument, QueueGone
from .decode import Plan, read_plan
from .export import SCHEMA, arrow_schema, columns, pages
from .report import Report, WriteResult, channel, send
from .rows import Rejection, RowSpec
from .stream import OPTIONS as STREAM_OPTIONS
from .stream import QueueStreamReader, StreamSettings
from .target import Target, int_option
from .writer import Recorded, RowWriter, Tally, settle, writer_for

BATCH_ID = "streaming.sql.batchId"  # Spark's local properties, seen by every task
QUERY_ID = "sql.streaming.queryId"
_TARGET = {"url", "prefix", "queue", "connectoptions", "maxpayloadbytes"}
_WRITE = {
    "idcol",
    "keycol",
    "delaycol",
    "prioritycol",
    "payloadcols",
    "batchsize",
    "arrow",
    "queryname",
    "retention",
    "queuecol",
    "queues",
    "headerscol",
    "expirescol",
    "maxrowspersecond",
}
_READ = {"states", "schema", "mode", "columnnameofcorruptrecord"}
_SPARK = {"checkpointlocation", "path"}  # options Spark itself may add


@dataclass
class Written(WriterCommitMessage):
    """A write task's commit message: its partition's counts, its first refused rows
    (the query it wrote for, on a stream), and what it recorded of its pushes."""

    partition: int
    pushed: int
    skipped: int
    refused: int
    query: str = ""
    invalid: int = 0
    rejected: tuple[Rejection, ...] = ()
    recorded: Recorded | None = None

    @property
    def counts(self) -> Counts:
        return Counts(self.pushed, self.skipped, self.refused, self.invalid)

    @classmethod
    def of(cls, tally: Tally, query: str = "", recorded: Recorded | None = None) -> Written:
        c = tally.counts
        return cls(
            _partition(),
            c.pushed,
            c.skipped,
            c.refused,
            query,
            c.invalid,
            tuple(tally.rejected),
            recorded,
        )


def _options(options: Mapping[str, str], allowed: set[str]) -> dict[str, str]:
    opts = {k.lower(): str(v) for k, v in options.items()}
    unknown = sorted(k for k in opts if k not in allowed | _SPARK)
    if unknown:
        raise InvalidArgument(
            f'format("dynoq") does not know the option(s) {unknown}; '
            "see help(dynoq.spark.datasource) for the options"
        )
    return opts


def _flag(opts: Mapping[str, str], name: str, default: bool) -> bool:
    text = opts.get(name.lower())
    if text is None:
        return default
    if text.lower() not in ("true", "false"):
        raise InvalidArgument(f'option "{name}" must be "true" or "false", got {text!r}')
    return text.lower() == "true"


def write_settings(
    options: Mapping[str, str], schema: Mapping[str, Any], *, streaming: bool = False
) -> tuple[RowWriter, bool]:
    """(the RowWriter, whether to use Arrow) from write options, checked on the driver
    against the data's schema (``StructType.jsonValue()``: its columns and their types)
    and the queue."""
    opts = _options(options, _TARGET | _WRITE)
    if "idcol" not in opts:
        raise InvalidArgument(
            'format("dynoq") writes need the option "idCol" (the column of message ids)'
        )
    cols = opts.get("payloadcols")
    spec = RowSpec.of(
        opts["idcol"],
        opts.get("keycol"),
        opts.get("delaycol"),
        opts.get("prioritycol"),
        None if cols is None else _names(cols),
        queue_col=opts.get("queuecol"),
        headers_col=opts.get("headerscol"),
        expires_col=opts.get("expirescol"),
    )
    retention = RETENTION if "retention" not in opts else _seconds(opts["retention"])
    query = opts.get("queryname", "")
    rate = opts.get("maxrowspersecond")
    writer = writer_for(
        lambda name: Target.from_spark_options({**opts, "queue": name}),
        _write_queues(opts),
        spec,
        int_option("batchSize", opts.get("batchsize", "1000")),
        query=check_query(query) if query else "",
        retention=retention,
        max_rows_per_second=None if rate is None else int_option("maxRowsPerSecond", rate),
    )
    writer.check([f["name"] for f in schema.get("fields", ())], streaming=streaming)
    return writer.typed(schema), _flag(opts, "arrow", True)


def _names(text: str) -> list[str]:
    return [c.strip() for c in text.split(",") if c.strip()]


def _write_queues(opts: Mapping[str, str]) -> str | list[str]:
    """Option "queue", or "queues" (the queues a queue column's rows may name; "queue",
    if also given, one of them: what source_options() gives)."""
    if "queues" not in opts:
        if "queue" not in opts:
            raise InvalidArgument(
                'format("dynoq") needs the option "queue" (or, with "queueCol", "queues": '
                "the queues rows may name)"
            )
        return opts["queue"]
    names = _names(opts["queues"])
    if "queue" in opts and opts["queue"] not in names:
        raise InvalidArgument(
            f'option "queue" ({opts["queue"]!r}) is not one of option "queues": with '
            '"queues", leave "queue" out (or name one of them)'
        )
    return names


def _seconds(text: str) -> float:
    try:
        return check_seconds(float(text), "retention", minimum=1.0)
    except ValueError:
        raise InvalidArgument(f'option "retention" must be seconds, got {text!r}') from None


def _partition() -> int:
    ctx = TaskContext.get()
    return -1 if ctx is None else ctx.partitionId()


def _total(messages: Iterable[WriterCommitMessage | None]) -> WriteResult:
    done = [m for m in messages if isinstance(m, Written)]
    return WriteResult.of(
        ((m.partition, m.counts) for m in done),
        ((m.partition, r) for m in done for r in m.rejected),
    )


class _Reporting:
    """Spark runs a commit in a Python worker of its own: its report goes to the driver
    through the session's channel (see :mod:`.report`). Spark commits (or aborts) once
    the tasks that sent ``messages`` succeeded: their records of what their attempts
    pushed go."""

    writer: RowWriter
    channel: Any

    def _written(self, writer: RowWriter, tally: Tally) -> Written:
        """A task's commit message; what the task recorded of its pushes goes once Spark
        counted it (through the channel; without one, at the commit)."""
        settled = settle(writer, tally, self.channel)
        return Written.of(tally, writer.query, None if settled else tally.recorded)

    def _report(self, messages: list[WriterCommitMessage | None], what: str) -> None:
        # what the tasks' own notes did not settle (no channel)
        self.writer.forget(m.recorded for m in messages if isinstance(m, Written))
        w = self.writer
        send(self.channel, Report(w.label, w.where, what, _total(messages)))


# -- batch writes ----------------------------------------------------------------------------


class _Commits(_Reporting):
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self._report(messages, 'format("dynoq") write')

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self._report(messages, 'format("dynoq") write (aborted)')


class RowsWriter(_Commits, DataSourceWriter):
    def __init__(self, writer: RowWriter, channel: Any = None) -> None:
        self.writer = writer
        self.channel = channel

    def write(self, iterator: Iterator[Any]) -> Written:
        return self._written(self.writer, self.writer.push_rows(row.asDict() for row in iterator))


class ArrowWriter(_Commits, DataSourceArrowWriter):
    def __init__(self, writer: RowWriter, channel: Any = None) -> None:
        self.writer = writer
        self.channel = channel

    def write(self, iterator: Iterator[Any]) -> Written:
        return self._written(self.writer, self.writer.push_arrow(iterator))


# -- streaming writes ------------------------------------------------------------------------


class _StreamCommits(_Reporting):
    def _task_writer(self) -> tuple[RowWriter, int]:
        ctx = TaskContext.get()
        batch = None if ctx is None else ctx.getLocalProperty(BATCH_ID)
        query = self.writer.query or (None if ctx is None else ctx.getLocalProperty(QUERY_ID))
        if batch is None or not query:
            raise InvalidArgument(
                "a dynoq stream writer task runs without Spark's streaming query id and batch id"
            )
        return self.writer.for_query(query), int(batch)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        queries = {m.query for m in messages if isinstance(m, Written)}
        query = self.writer.query or (queries.pop() if len(queries) == 1 else "")
        if not query:
            return  # no task wrote anything: nothing to commit
        self.writer.for_query(query).commit(batchId)
        self._report(messages, f"micro-batch {batchId} of query {query}")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # Nothing to undo: what the batch wrote is recorded with it, and its replay
        # skips those ids.
        self._report(messages, f"micro-batch {batchId} (aborted; its replay writes the rest)")


class RowsStreamWriter(_StreamCommits, DataSourceStreamWriter):
    def __init__(self, writer: RowWriter, channel: Any = None) -> None:
        self.writer = writer
        self.channel = channel

    def write(self, iterator: Iterator[Any]) -> Written:
        writer, batch = self._task_writer()
        return self._written(writer, writer.push_rows((row.asDict() for row in iterator), batch))


class ArrowStreamWriter(_StreamCommits, DataSourceStreamArrowWriter):
    def __init__(self, writer: RowWriter, channel: Any = None) -> None:
        self.writer = writer
        self.channel = channel

    def write(self, iterator: Iterator[Any]) -> Written:
        writer, batch = self._task_writer()
        return self._written(writer, writer.push_arrow(iterator, batch))


# -- reads -----------------------------------------------------------------------------------


@dataclass(eq=False)
class QueueReader(DataSourceReader):
    """One partition per shard, scanned read-only a page (one Arrow record batch) at a
    time: the export's columns, or with a ``plan`` the payloads decoded (:mod:`.decode`)."""

    target: Target
    states: tuple[str, ...]
    shards: int
    schema: Any
    plan: Plan | None = None

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(shard) for shard in range(self.shards)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        pa = importlib.import_module("pyarrow")  # untyped; present wherever Spark reads
        arrow = arrow_schema(self.schema)
        to_columns = columns if self.plan is None else self.plan.columns
        q = self.target.open()
        try:
            for found in pages(q, int(partition.value), self.states):
                cols = to_columns(found)
                yield pa.RecordBatch.from_arrays(
                    [pa.array(cols[f.name], type=f.type) for f in arrow], schema=arrow
                )
        except QueueGone:
            self.target.forget_queue()  # a retried task reads the queue again
            raise


# -- the data source -------------------------------------------------------------------------


class DynoqDataSource(DataSource):
    """``format("dynoq")``: see the module docstring for its options."""

    _channel: Any = None  # set on the class register() makes for a session

    @classmethod
    def name(cls) -> str:
        return "dynoq"

    def schema(self) -> str:
        # asked only without .schema(...); reader() and streamReader() check the options
        return str({k.lower(): v for k, v in self.options.items()}.get("schema") or SCHEMA)

    def reader(self, schema: Any) -> QueueReader:
        opts = _options(self.options, _TARGET | _READ)
        states = check_states(_names(opts.get("states", ",".join(DEFAULT_STATES))))
        target, plan = Target.from_spark_options(opts), read_plan(schema.jsonValue(), opts)
        return QueueReader(target, states, target.open().settings.shards, schema, plan)

    def streamReader(self, schema: Any) -> QueueStreamReader:
        opts = _options(self.options, _TARGET | STREAM_OPTIONS)
        settings = StreamSettings.of(opts, schema.jsonValue(), self._channel)
        return QueueStreamReader(settings, schema)

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        writer, arrow = write_settings(self.options, schema.jsonValue())
        _no_overwrite(overwrite)
        return (ArrowWriter if arrow else RowsWriter)(writer, self._channel)

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        writer, arrow = write_settings(self.options, schema.jsonValue(), streaming=True)
        _no_overwrite(overwrite)
        return (ArrowStreamWriter if arrow else RowsStreamWriter)(writer, self._channel)


def _no_overwrite(overwrite: bool) -> None:
    # Spark refuses its default mode (errorifexists) and "ignore" itself, before this
    # runs (UNSUPPORTED_DATA_SOURCE_SAVE_MODE): append and overwrite reach a data source.
    if overwrite:
        raise InvalidArgument(
            'format("dynoq") only appends messages to a queue (a write '
            'never deletes any): use mode("append") (outputMode "append" '
            "for streams)"
        )


_sources: weakref.WeakKeyDictionary[Any, type[DynoqDataSource]] = weakref.WeakKeyDictionary()
_sources_lock = threading.Lock()


def register(spark: Any) -> None:
    """Register ``format("dynoq")`` in ``spark`` and make ``spark`` the active session of
    the calling thread (idempotent; call it once in every thread of yours that uses
    ``format("dynoq")``: Spark looks data sources up in the thread's active session).

    The registered class carries the session's report channel, so the counts of every
    ``format("dynoq")`` write reach this process's ``dynoq.spark`` logger and Prometheus
    registry (plain ``spark.dataSource.register(DynoqDataSource)`` works too, but its
    commits log where Spark runs them, a Python worker)."""
    spark.dataSource.register(_source_for(spark))
    _activate(spark)


def _source_for(spark: Any) -> type[DynoqDataSource]:
    try:
        context = spark.sparkContext
    except Exception:  # noqa: BLE001 - Spark Connect: no context, no accumulators
        return DynoqDataSource
    with _sources_lock:
        found = _sources.get(context)
        if found is None:
            # A class made here is pickled by value (with its channel) when registered;
            # DynoqDataSource itself would be pickled by reference, without one.
            found = type(
                "DynoqDataSource",
                (DynoqDataSource,),
                {
                    "_channel": channel(context),
                    "__module__": __name__,
                    "__qualname__": "DynoqDataSource.for_session",
                },
            )
            _sources[context] = found
    return found


def _activate(spark: Any) -> None:
    """Make ``spark`` the JVM's active session in this thread (classic PySpark; Spark
    Connect sessions have no JVM here, and look data sources up on the server)."""
    jvm, session = getattr(spark, "_jvm", None), getattr(spark, "_jsparkSession", None)
    if jvm is None or session is None:
        return
    find = getattr(type(spark), "_get_j_spark_session_class", None)
    cls = find(jvm) if find is not None else jvm.org.apache.spark.sql.SparkSession
    cls.setActiveSession(session)


def queue_dataframe(
    spark: Any,
    where: str | Client,
    queue: str,
    *,
    states: Iterable[str] = DEFAULT_STATES,
    **connect_options: Any,
) -> Any:
    """A DataFrame of the queue's messages in ``states`` (``spark.read.format("dynoq")``,
    one partition per shard, read-only). ``where``: a connected Client or a URL with
    ``prefix=`` and connection options. Raises InvalidArgument if there is no such
    queue."""
    register(spark)
    opts = Target.of(where, queue, connect_options).spark_options()
    return (
        spark.read.format("dynoq")
        .options(**opts)
        .option("states", ",".join(check_states(states)))
        .load()
    )
