"""The one write path under every Spark sink: rows -> messages -> counted pushes.

:class:`RowWriter` holds picklable settings (a :class:`~.target.Target`, a
:class:`~.rows.RowSpec`, a batch size, for streaming the query id, and the schema's
:class:`~.types.Plan`). On the driver, :meth:`RowWriter.check` validates the columns and
the queue and :meth:`RowWriter.typed` the schema's types, before any task starts; on the
executors, :meth:`RowWriter.push_rows` / :meth:`RowWriter.push_arrow` push a partition in
batches of ``batch_size`` rows and count what happened to every row (:class:`Tally`:
pushed, skipped as duplicates, refused, and the first refused rows with why). A
micro-batch's pushes carry its (query, batch id), and the driver commits the batch when
every task has written (:mod:`dynoq._core.batches`). Every push of a Spark task carries
its attempt, so a retried task counts the rows an earlier attempt pushed as pushed: the
driver's counts are the same however often a task ran. What a task recorded
(:class:`Recorded`) is deleted (:meth:`RowWriter.forget`) once Spark counted the task as
succeeded, never by the task itself (its input may end early because another part of the
task failed): on the driver as each task ends, through the report channel
(:func:`settle`), or else when the whole write ends.

:func:`write_dataframe` runs one Spark job over a DataFrame and returns a
:class:`~.report.WriteResult` (per partition and in total); :mod:`.report` logs it on
the driver (logger ``dynoq.spark``) and counts it in Prometheus.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import threading
import uuid
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from .._core.batches import (
    RETENTION,
    TASK_RETENTION,
    Attempt,
    BatchOps,
    Counts,
    Progress,
    check_batch,
    check_query,
)
from .._core.validate import check_int
from ..errors import (
    ConnectionFailed,
    DynoqError,
    InvalidArgument,
    OrderedQueueError,
    QueueGone,
)
from ..queue import Queue
from . import types
from .report import MAX_SAMPLES, Report, WriteResult, channel, emit, send_done
from .rows import Rejection, RowSpec, to_messages
from .target import Target

log = logging.getLogger("dynoq.spark")
MAX_BATCH_SIZE = 100_000
COUNTS_SCHEMA = (
    "partition long, pushed long, skipped long, refused long, invalid long, "
    "rejected string, task string, shards string"
)
FORGET_CHUNK = 1000  # task records deleted per round trip
_warned: set[str] = set()
_warned_lock = threading.Lock()


@dataclass(frozen=True)
class Recorded:
    """A Spark task's record of the ids its attempts pushed (:mod:`dynoq._core.batches`):
    the task's name and the shards it is on. Deleted once Spark counted the task."""

    task: str
    shards: tuple[int, ...]


@dataclass
class Tally:
    """What a task did with its rows: the counts, the first MAX_SAMPLES refused rows with
    why, and where the task recorded what its attempts pushed."""

    counts: Counts = field(default_factory=Counts)
    rejected: list[Rejection] = field(default_factory=list)
    attempt: Attempt | None = None
    shards: set[int] = field(default_factory=set)

    @property
    def recorded(self) -> Recorded | None:
        if self.attempt is None or not self.shards:
            return None
        return Recorded(self.attempt.task, tuple(sorted(self.shards)))

    def add(self, counts: Counts, rejected: Iterable[Rejection] = ()) -> None:
        self.counts += counts
        for r in rejected:
            if len(self.rejected) >= MAX_SAMPLES:
                break
            self.rejected.append(r)


def check_spec(q: Queue, spec: RowSpec, where: str) -> None:
    """Refuse a column mapping the queue cannot honour (before anything is written)."""
    if q.settings.keyed and spec.key_col is None:
        raise InvalidArgument(
            f'{where} has ordered="key": every message needs a key, so give key_col '
            "(keyCol) naming the column that holds it"
        )
    if spec.key_col is not None and not q.settings.ordered:
        raise InvalidArgument(
            f"key_col {spec.key_col!r} given, but {where} is not ordered: keys only route "
            "messages on ordered queues (open it with ordered=True), so drop key_col or "
            "write to an ordered queue"
        )
    if q.settings.ordered:
        for what in ("delay_col", "priority_col"):
            if getattr(spec, what) is not None:
                raise OrderedQueueError(
                    f"{what} given, but {where} is ordered: ordered queues deliver in push "
                    "order, without delay or priority"
                )


@dataclass(frozen=True)
class RowWriter:
    """Picklable settings of a write; see the module docstring."""

    target: Target
    spec: RowSpec
    batch_size: int = 1000
    query: str = ""  # a streaming query's id or name; "" for one-shot writes
    retention: float = RETENTION
    plan: types.Plan | None = None  # the schema's conversions (None: by Python type)
    # Tells this writer's Spark tasks from another application's: with the stage and the
    # partition it names a task, whose attempts share their record of what they pushed.
    token: str = field(default_factory=lambda: uuid.uuid4().hex)

    def __post_init__(self) -> None:
        check_int(self.batch_size, "batch_size", low=1, high=MAX_BATCH_SIZE)
        if self.query:
            check_query(self.query)

    def for_query(self, query: str) -> RowWriter:
        return replace(self, query=check_query(query))

    # -- on the driver ---------------------------------------------------------------------

    def check(self, columns: Collection[str] | None = None, *, streaming: bool = False) -> Queue:
        """Validate the columns (when known) and the queue, on the driver; the queue.
        Warns once when a one-shot write goes to a queue without a dedupe window."""
        if columns is not None:
            self.spec.check_columns(columns)
        q = self.target.open()
        check_spec(q, self.spec, self.target.where)
        if not streaming and not self.query and not q.settings.dedupe_window:
            _warn_once(self.target)
        return q

    def typed(self, schema: Mapping[str, Any]) -> RowWriter:
        """This writer for data of ``schema`` (a ``StructType.jsonValue()``), its column
        types checked on the driver (InvalidType naming the column)."""
        names = [f["name"] for f in schema.get("fields", ())]
        self.spec.check_columns(names)
        s = self.spec
        payload = list(s.payload_cols) if s.payload_cols is not None else names
        return replace(
            self,
            plan=types.plan(
                schema,
                payload,
                id_col=s.id_col,
                key_col=s.key_col,
                delay_col=s.delay_col,
                priority_col=s.priority_col,
            ),
        )

    def commit(self, batch: int) -> bool:
        """Record micro-batch ``batch`` of the query as written (True if it was not yet)."""
        q = self.target.open()
        return bool(q.backend.run(self._ops(q).commit(batch)))

    def progress(self) -> Progress:
        q = self.target.open()
        return q.backend.run(self._ops(q).progress())  # type: ignore[no-any-return]

    def forget(self, recorded: Iterable[Recorded | None]) -> None:
        """Delete the records of tasks Spark counted as succeeded (no attempt of them
        will come again). Best effort: a record left behind expires by itself."""
        found = [(r.task, r.shards) for r in recorded if r is not None]
        if not found:
            return
        try:
            q = self.target.open()
            ops = BatchOps(q.ops)
            for i in range(0, len(found), FORGET_CHUNK):
                q.backend.run(ops.forget(found[i : i + FORGET_CHUNK]))
        except DynoqError as exc:
            log.warning(
                "dynoq.spark: could not delete what %d Spark task(s) recorded on "
                "%s (%s); it expires by itself",
                len(found),
                self.target.where,
                exc,
            )

    # -- on the executors ------------------------------------------------------------------

    def push_rows(self, rows: Iterable[Mapping[str, Any]], batch: int | None = None) -> Tally:
        """Push rows (mappings) in batches of ``batch_size``; what happened to them."""
        tally = Tally(attempt=_attempt(self.token))
        chunk: list[Mapping[str, Any]] = []
        start = 0
        for row in rows:
            chunk.append(row)
            if len(chunk) >= self.batch_size:
                self._push(chunk, batch, start, tally)
                start += len(chunk)
                chunk = []
        if chunk:
            self._push(chunk, batch, start, tally)
        return tally

    def push_arrow(self, record_batches: Iterable[Any], batch: int | None = None) -> Tally:
        """Push Arrow record batches (each turned into rows with ``to_pylist``)."""
        tally = Tally(attempt=_attempt(self.token))
        size = self.batch_size
        start = 0
        for rb in record_batches:
            rows = rb.to_pylist()
            for i in range(0, len(rows), size):
                self._push(rows[i : i + size], batch, start + i, tally)
            start += len(rows)
        return tally

    def _ops(self, q: Queue, attempt: Attempt | None = None) -> BatchOps:
        # A one-shot write's task records outlive a failed job by a day, not a week.
        return BatchOps(
            q.ops, self.query, self.retention if self.query else TASK_RETENTION, attempt
        )

    def _push(
        self, rows: list[Mapping[str, Any]], batch: int | None, start: int, tally: Tally
    ) -> None:
        if batch is not None:
            check_batch(batch)
        try:
            q = self.target.open()
            # The queue this process knows may have been read after the driver checked
            # the mapping (created anew since): check it against what is written.
            check_spec(q, self.spec, self.target.where)
            client = self.target.client()
            made = to_messages(
                self.spec,
                rows,
                client.server_time,
                plan=self.plan,
                ordered=bool(q.settings.ordered),
                start=start,
            )
            prepare = q.ops.prepare
            outs = []
            for index, m in made.messages:
                try:
                    outs.append(prepare(m))
                except DynoqError as exc:  # a payload over the limit, or not storable
                    made.rejected.append(Rejection(index, None, str(exc)))
            ops = self._ops(q, tally.attempt)
            if tally.attempt is not None:
                tally.shards |= ops.shards_of(outs)
            counts = q.backend.run(ops.push(outs, batch)) if outs else Counts()
        except ConnectionFailed:
            self.target.forget()  # the retried task reconnects
            raise
        except QueueGone:
            # Written nowhere: the shards refused this process's old view of the queue.
            # Spark retries the task, which reads the queue again (or fails if it is gone).
            self.target.forget_queue()
            raise
        bad = len(made.rejected)
        tally.add(
            counts + Counts(skipped=made.repeated, refused=bad, invalid=bad),
            sorted(made.rejected, key=lambda r: r.row),
        )


def settle(writer: RowWriter, tally: Tally, channel: Any) -> bool:
    """Have the driver delete what this task recorded of its pushes once Spark counted
    the task as succeeded (through ``channel``, the driver's report channel); False when
    that is left to whoever sees the whole write end (no channel)."""
    recorded = tally.recorded
    return recorded is None or send_done(channel, partial(writer.forget, [recorded]))


def _warn_once(target: Target) -> None:
    with _warned_lock:
        if target.where in _warned:
            return
        _warned.add(target.where)
    log.warning(
        "dynoq.spark: %s has no dedupe_window. Rows whose id is in the queue are skipped, "
        "but an id that consumers already acked is pushed again if it is written again "
        "(a re-run job). Open the queue with "
        "dedupe_window=<seconds> to refuse ids acked within that window; streaming writes "
        "need no window for their own replays.",
        target.where,
    )


# -- one Spark job ---------------------------------------------------------------------------


def has_arrow() -> bool:
    """mapInArrow needs pyarrow and (for its UDF machinery) pandas on the driver."""
    return all(importlib.util.find_spec(m) is not None for m in ("pandas", "pyarrow"))


def _partition() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return -1 if ctx is None else ctx.partitionId()


def _attempt(token: str) -> Attempt | None:
    """This Spark task's attempt (None outside a Spark task: nothing retries it)."""
    try:
        from pyspark import TaskContext
    except ImportError:  # pushing rows by hand, without Spark
        return None
    ctx = TaskContext.get()
    if ctx is None:
        return None
    return Attempt(f"{token}.{ctx.stageId()}.{ctx.partitionId()}", ctx.attemptNumber())


def _arrow_task(
    writer: RowWriter, batch: int | None, acc: Any, record_batches: Iterable[Any]
) -> Iterator[Any]:
    pa = importlib.import_module("pyarrow")  # untyped; present wherever Arrow runs
    t = writer.push_arrow(record_batches, batch)
    c = t.counts
    done = None if settle(writer, t, acc) else t.recorded
    yield pa.RecordBatch.from_pydict(
        {
            "partition": [_partition()],
            "pushed": [c.pushed],
            "skipped": [c.skipped],
            "refused": [c.refused],
            "invalid": [c.invalid],
            "rejected": [_json(t.rejected)],
            "task": [done.task if done else ""],
            "shards": [",".join(map(str, done.shards)) if done else ""],
        }
    )


def _json(rejected: list[Rejection]) -> str:
    return json.dumps([[r.row, r.column, r.reason] for r in rejected])


def _unjson(text: str) -> list[Rejection]:
    return [Rejection(int(row), col, str(reason)) for row, col, reason in json.loads(text)]


def _recorded(task: str | None, shards: str | None) -> Recorded | None:
    if not task or not shards:
        return None
    return Recorded(task, tuple(int(s) for s in shards.split(",")))


def _rows_task(
    writer: RowWriter, batch: int | None, acc: Any, part: int, rows: Iterable[Any]
) -> list[tuple[int, Counts, list[Rejection], Recorded | None]]:
    t = writer.push_rows((r.asDict() for r in rows), batch)
    return [(part, t.counts, t.rejected, None if settle(writer, t, acc) else t.recorded)]


def _channel_of(df: Any) -> Any:
    try:
        context = df.sparkSession.sparkContext
    except Exception:  # noqa: BLE001 - Spark Connect: no context, no accumulators
        return None
    return channel(context)


def write_dataframe(df: Any, writer: RowWriter, batch: int | None = None) -> WriteResult:
    """Push a DataFrame in one Spark job (Arrow when available); per-partition counts.
    Validates the columns, their types and the queue on the driver first. Does not
    commit ``batch``: the caller does, once this returned."""
    writer.check(df.columns, streaming=batch is not None)
    df = df.select(*writer.spec.needed(df.columns))
    writer = writer.typed(df.schema.jsonValue())
    acc = _channel_of(df)
    if has_arrow():
        rows = df.mapInArrow(partial(_arrow_task, writer, batch, acc), COUNTS_SCHEMA).collect()
        got = [
            (
                r.partition,
                Counts(r.pushed, r.skipped, r.refused, r.invalid),
                _unjson(r.rejected),
                _recorded(r.task, r.shards),
            )
            for r in rows
        ]
    else:
        got = df.rdd.mapPartitionsWithIndex(partial(_rows_task, writer, batch, acc)).collect()
    writer.forget(done for *_, done in got)  # what no channel settled: the write is over
    return WriteResult.of(
        [(p, c) for p, c, _, _ in got], [(p, r) for p, _, rs, _ in got for r in rs]
    )


def report(target: Target, result: WriteResult, what: str) -> None:
    """Log ``result`` on this process's dynoq.spark logger and count it in Prometheus."""
    emit(Report(target.queue, target.where, what, result))
