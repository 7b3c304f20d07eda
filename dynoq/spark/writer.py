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

A write goes to one queue, or with a queue column (``queue_col``, option ``queueCol``) to
the queue each row names among the write's ``queues``: all of them opened and checked on
the driver (a writer creates no queue, and writes to none it did not check), a row naming
another refused. A micro-batch's commit records it on every shard of every one of them,
and the write's counts are one report. :func:`writer_for` is the one place that decides
which queues a write goes to and its row rate (``max_rows_per_second``:
:mod:`.throttle`).

:mod:`.job` runs one Spark job over a DataFrame with it.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
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
from .._core.validate import check_int, check_name
from ..errors import (
    ConnectionFailed,
    DynoqError,
    InvalidArgument,
    InvalidType,
    OrderedQueueError,
    QueueGone,
)
from ..queue import Queue
from . import types
from .report import MAX_SAMPLES, send_done
from .rows import Rejection, RowSpec, named_queues, to_messages
from .target import Target
from .throttle import Throttle, check_rate

log = logging.getLogger("dynoq.spark")
MAX_BATCH_SIZE = 100_000
FORGET_CHUNK = 1000  # task records deleted per round trip
MAX_QUEUES = 1000  # queues one write may write to (each is opened on the driver and executors)
SHOWN_QUEUES = 5  # queue names a message or a counter label lists
_warned: set[str] = set()
_warned_lock = threading.Lock()


@dataclass(frozen=True)
class Recorded:
    """A Spark task's record of the ids its attempts pushed (:mod:`dynoq._core.batches`):
    the task's name and the (queue, shard) pairs it is on. Deleted once Spark counted the
    task."""

    task: str
    places: tuple[tuple[str, int], ...]

    def text(self) -> str:
        return json.dumps([self.task, [list(p) for p in self.places]])

    @classmethod
    def from_text(cls, text: str | None) -> Recorded | None:
        if not text:
            return None
        task, places = json.loads(text)
        return cls(str(task), tuple((str(q), int(s)) for q, s in places))


@dataclass
class Tally:
    """What a task did with its rows: the counts, the first MAX_SAMPLES refused rows with
    why, and where the task recorded what its attempts pushed."""

    counts: Counts = field(default_factory=Counts)
    rejected: list[Rejection] = field(default_factory=list)
    attempt: Attempt | None = None
    shards: set[tuple[str, int]] = field(default_factory=set)  # (queue, shard) written to

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


def check_queues(queue: str | Sequence[str], spec: RowSpec) -> tuple[str, ...]:
    """The queues a write goes to: ``queue``, or with a queue column the queues its rows
    may name (at most MAX_QUEUES, each a valid name, listed once)."""
    if not isinstance(queue, (str, list, tuple)):
        raise InvalidType(
            f"queue must be a queue name, or with queue_col a list of them, got "
            f"{type(queue).__name__}"
        )
    names = [queue] if isinstance(queue, str) else list(queue)
    if not names:
        raise InvalidArgument("a write needs a queue (or, with queue_col, its queues)")
    if len(names) > 1 and spec.queue_col is None:
        raise InvalidArgument(
            f"{len(names)} queues given but no queue column: give queue_col (option "
            "queueCol) naming the column that holds each row's queue, or one queue"
        )
    if len(names) > MAX_QUEUES:
        raise InvalidArgument(
            f"{len(names)} queues given; one write may write to at most {MAX_QUEUES}: "
            "split the write"
        )
    for n in names:
        check_name(n, "queue name")
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})[:SHOWN_QUEUES]
        raise InvalidArgument(f"queues {twice} are listed more than once: list each once")
    return tuple(names)


def writer_for(
    target_for: Callable[[str], Target],
    queue: str | Sequence[str],
    spec: RowSpec,
    batch_size: int = 1000,
    *,
    query: str = "",
    retention: float = RETENTION,
    max_rows_per_second: int | None = None,
) -> RowWriter:
    """The RowWriter of a write to ``queue`` (one name; or with ``spec.queue_col`` the
    names rows may hold) as ``target_for(name)`` reaches each, at most
    ``max_rows_per_second`` rows a second over all its tasks (None: as fast as it goes).
    What every writer builds its writer with, from keywords or data source options."""
    names = check_queues(queue, spec)
    return RowWriter(
        target_for(names[0]),
        spec,
        batch_size,
        query,
        retention,
        queues=names if spec.queue_col is not None else (),
        max_rows_per_second=check_rate(max_rows_per_second),
    )


@dataclass(frozen=True)
class RowWriter:
    """Picklable settings of a write; see the module docstring."""

    target: Target  # the server, and the (first) queue
    spec: RowSpec
    batch_size: int = 1000
    query: str = ""  # a streaming query's id or name; "" for one-shot writes
    retention: float = RETENTION
    plan: types.Plan | None = None  # the schema's conversions (None: by Python type)
    # Tells this writer's Spark tasks from another application's: with the stage and the
    # partition it names a task, whose attempts share their record of what they pushed.
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    queues: tuple[str, ...] = ()  # with a queue column: the queues rows may name
    max_rows_per_second: int | None = None  # over all the write's tasks (None: no limit)

    def __post_init__(self) -> None:
        check_int(self.batch_size, "batch_size", low=1, high=MAX_BATCH_SIZE)
        if self.query:
            check_query(self.query)
        if self.spec.queue_col is not None:
            check_queues(self.queues, self.spec)
        elif self.queues:
            raise InvalidArgument("queues are for a write with a queue column (queue_col)")
        check_rate(self.max_rows_per_second)

    def for_query(self, query: str) -> RowWriter:
        return replace(self, query=check_query(query))

    @property
    def names(self) -> tuple[str, ...]:
        """The queues this write may write to."""
        return self.queues or (self.target.queue,)

    def target_of(self, queue: str) -> Target:
        return self.target if queue == self.target.queue else replace(self.target, queue=queue)

    @property
    def where(self) -> str:
        """The queues and server, for messages (no secret)."""
        if len(self.names) == 1:
            return self.target.where
        t = self.target
        return t.where.replace(f"queue {t.queue!r}", f"queues {_listed(self.names)}", 1)

    @property
    def label(self) -> str:
        """The queue(s), as the Prometheus counter's label (bounded)."""
        return self.target.queue if len(self.names) == 1 else _listed(self.names)

    @property
    def throttle(self) -> Throttle | None:
        """The write's row rate, per one-shot writer or streaming query."""
        if self.max_rows_per_second is None:
            return None
        return Throttle(self.max_rows_per_second, self.query or self.token)

    # -- on the driver ---------------------------------------------------------------------

    def check(self, columns: Collection[str] | None = None, *, streaming: bool = False) -> Queue:
        """Validate the columns (when known) and every queue, on the driver; the first
        queue. Warns once per queue when a one-shot write goes to a queue without a
        dedupe window."""
        if columns is not None:
            self.spec.check_columns(columns)
        opened = [self._open(name) for name in self.names]
        if not streaming and not self.query:
            for q in opened:
                if not q.settings.dedupe_window:
                    _warn_once(self.target_of(q.name))
        return opened[0]

    def typed(self, schema: Mapping[str, Any]) -> RowWriter:
        """This writer for data of ``schema`` (a ``StructType.jsonValue()``), its column
        types checked on the driver (InvalidType naming the column)."""
        names = [f["name"] for f in schema.get("fields", ())]
        self.spec.check_columns(names)
        s = self.spec
        return replace(
            self,
            plan=types.plan(
                schema,
                s.payload_columns(names),
                id_col=s.id_col,
                key_col=s.key_col,
                delay_col=s.delay_col,
                priority_col=s.priority_col,
                queue_col=s.queue_col,
                headers_col=s.headers_col,
                expires_col=s.expires_col,
            ),
        )

    def commit(self, batch: int) -> bool:
        """Record micro-batch ``batch`` of the query as written on every shard of every
        queue of the write (True if it was not yet, on one of them)."""
        fresh = False
        for name in self.names:
            q = self.target_of(name).open()
            fresh = bool(q.backend.run(self._ops(q).commit(batch))) or fresh
        return fresh

    def progress(self) -> Progress:
        """Where the query stands over every queue of the write (as over shards: the
        highest batch committed or being written, and the ids that batch handled)."""
        found = []
        for name in self.names:
            q = self.target_of(name).open()
            found.append(q.backend.run(self._ops(q).progress()))
        committed = [p.committed for p in found if p.committed is not None]
        current = [p.batch for p in found if p.batch is not None]
        return Progress(
            max(committed) if committed else None,
            max(current) if current else None,
            sum(p.written for p in found),
        )

    def forget(self, recorded: Iterable[Recorded | None]) -> None:
        """Delete the records of tasks Spark counted as succeeded (no attempt of them
        will come again). Best effort: a record left behind expires by itself."""
        by_queue: dict[str, list[tuple[str, list[int]]]] = defaultdict(list)
        for r in recorded:
            if r is None:
                continue
            shards: dict[str, list[int]] = defaultdict(list)
            for name, shard in r.places:
                shards[name].append(shard)
            for name, found in shards.items():
                by_queue[name].append((r.task, found))
        for name, tasks in by_queue.items():
            if name not in self.names:
                continue  # not this write's: never delete what it did not write
            try:
                q = self.target_of(name).open()
                ops = BatchOps(q.ops)
                for i in range(0, len(tasks), FORGET_CHUNK):
                    q.backend.run(ops.forget(tasks[i : i + FORGET_CHUNK]))
            except DynoqError as exc:
                log.warning(
                    "dynoq.spark: could not delete what %d Spark task(s) recorded on "
                    "%s (%s); it expires by itself",
                    len(tasks),
                    self.target_of(name).where,
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

    def _open(self, name: str) -> Queue:
        q = self.target_of(name).open()
        # The queue this process knows may have been read after the driver checked
        # the mapping (created anew since): check it against what is written.
        check_spec(q, self.spec, self.target_of(name).where)
        return q

    def _push(
        self, rows: list[Mapping[str, Any]], batch: int | None, start: int, tally: Tally
    ) -> None:
        if batch is not None:
            check_batch(batch)
        spec = self.spec
        try:
            client = self.target.client()
            if spec.queue_col is None:
                opened = {self.target.queue: self._open(self.target.queue)}
                routes = None
            else:  # only the write's queues the chunk names: a row naming another is refused
                wanted = named_queues(spec, rows) & set(self.names)
                opened = {name: self._open(name) for name in sorted(wanted)}
                routes = {name: bool(q.settings.ordered) for name, q in opened.items()}
            made = to_messages(
                spec,
                rows,
                client.server_time,
                plan=self.plan,
                ordered=bool(opened[self.target.queue].settings.ordered)
                if routes is None
                else False,
                start=start,
                queues=routes,
            )
            counts = Counts()
            for name, messages in made.by_queue(self.target.queue).items():
                counts += self._push_to(client, opened[name], messages, batch, tally, made.rejected)
        except ConnectionFailed:
            self.target.forget()  # the retried task reconnects
            raise
        except QueueGone:
            # Written nowhere: the shards refused this process's old view of the queue.
            # Spark retries the task, which reads the queues again (or fails if one is gone).
            for name in self.names:
                self.target_of(name).forget_queue()
            raise
        bad = len(made.rejected)
        tally.add(
            counts + Counts(skipped=made.repeated, refused=bad, invalid=bad),
            sorted(made.rejected, key=lambda r: r.row),
        )

    def _push_to(
        self,
        client: Any,
        q: Queue,
        messages: Sequence[tuple[int, Any]],
        batch: int | None,
        tally: Tally,
        rejected: list[Rejection],
    ) -> Counts:
        """Push one queue's messages of a chunk (at the write's rate); their counts."""
        prepare = q.ops.prepare
        outs = []
        for index, m in messages:
            try:
                outs.append(prepare(m))
            except DynoqError as exc:  # a payload over the limit, or not storable
                rejected.append(Rejection(index, None, str(exc)))
        ops = self._ops(q, tally.attempt)
        if tally.attempt is not None:
            tally.shards |= {(q.name, s) for s in ops.shards_of(outs)}
        counts = Counts()
        throttle = self.throttle
        done = 0
        while done < len(outs):
            # permits first: a task waits for them, never pushes past the write's rate
            n = len(outs) - done if throttle is None else throttle.take(client, len(outs) - done)
            counts += q.backend.run(ops.push(outs[done : done + n], batch))
            done += n
        return counts


def _listed(names: Sequence[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:SHOWN_QUEUES])
    more = len(names) - SHOWN_QUEUES
    return shown + (f" and {more} more" if more > 0 else "")


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
