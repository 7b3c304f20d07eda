"""``spark.readStream.format("dynoq")``: a queue consumed as a stream, exactly once.

When Spark plans a micro-batch (``latestOffset``) the source takes it from the queue:
it pops up to ``maxMessagesPerTrigger`` messages for the consumer group (each queue
kind's own pop, so an ordered shard's order and a keyed queue's one message in flight
per key hold) and records a copy of each under the batch's number in Redis
(:mod:`dynoq._core.streams`). The batch's tasks read the records, so a batch Spark
replays after a crash reads exactly the messages it had, none twice, none lost, even if
their visibility ran out meanwhile. The messages are acked, and the records deleted,
when Spark says the batch is done: at the ``latestOffset`` that plans the next batch
(Spark plans one only once the last one's sink committed, and calls ``commit`` only
after planning the next: a keyed queue's next message per key waits for the ack, and
the last batch of an ``availableNow`` run is acked by the check that ends the run).

The source consumes its group alone: it joins the group as a member (heartbeats from a
thread of the driver's source process), and refuses to start while another member of
the group is live (a consumer, or another streaming query) or another group consumes
the queue (GroupConflict).
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from .._core import streams, validate
from .._core.calls import Batch
from .._core.group import GroupOps
from .._core.scan import Found
from .._core.streams import STREAM_MEMBER, Offset, StreamOps, StreamStats
from .._core.validate import MAX_BATCH
from ..client import Client
from ..errors import GroupConflict, InvalidArgument, QueueGone
from ..message import Message
from ..queue import Queue
from .decode import Plan, read_plan
from .export import arrow_schema, columns
from .report import send_done, stream_counter
from .target import Target, int_option

log = logging.getLogger("dynoq.spark")
# Options of a streaming read besides the target's (names lower-cased); a typed read's
# as a batch read's (dynoq.spark.decode).
OPTIONS = frozenset(
    {"group", "maxmessagespertrigger", "partitionspershard", "schema", "mode"}
    | {"columnnameofcorruptrecord"}
)
HEARTBEAT_TTL = 10.0  # seconds a stream's membership outlives its source process


@dataclass(frozen=True)
class StreamSettings:
    """What a stream reader needs (picklable: it goes to the tasks that read)."""

    target: Target
    group: str
    trigger: int
    parts: int
    channel: Any = None  # the session's report channel (dynoq.spark.report)
    plan: Plan | None = None  # a typed read's (.schema(...)): payloads decoded

    @classmethod
    def of(cls, opts: Mapping[str, str], schema: Mapping[str, Any], channel: Any) -> StreamSettings:
        """The settings of ``readStream.format("dynoq")``'s options (names lower-cased;
        :data:`OPTIONS` besides the target's) for a read of ``schema`` (its JSON value),
        checked here, on the driver: the queue must exist."""
        trigger = opts.get("maxmessagespertrigger", str(streams.DEFAULT_TRIGGER))
        parts = opts.get("partitionspershard", "1")
        target = Target.from_spark_options(opts)
        target.open()
        return cls(
            target,
            validate.check_name(opts.get("group", "spark"), "group"),
            streams.check_trigger(int_option("maxMessagesPerTrigger", trigger)),
            streams.check_parts(int_option("partitionsPerShard", parts)),
            channel,
            read_plan(schema, opts),
        )


@dataclass(frozen=True)
class Slice:
    """One Spark partition of a micro-batch: ``part`` of ``parts`` of one shard's
    messages of batches ``first`` .. ``last`` of ``run`` (split by key, so a key's
    messages stay in order in one partition)."""

    run: str
    shard: int
    first: int
    last: int
    part: int
    parts: int


class QueueStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The stream reader Spark makes on the driver (its own Python process, kept for the
    query's life) and, to read, in the tasks. Nothing is done when it is made."""

    def __init__(self, settings: StreamSettings, schema: Any) -> None:
        self.settings = settings
        self.schema = schema
        self.run = streams.new_run()  # this query's run, unless it resumes an older one
        self._budget: int | None = None  # messages an availableNow run may still take
        self._held = False
        self._beat: _Heartbeat | None = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        # What a task needs: no thread, lock or connection.
        return {"settings": self.settings, "schema": self.schema, "run": self.run}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.settings, self.schema, self.run = state["settings"], state["schema"], state["run"]
        self._budget, self._held, self._beat = None, False, None
        self._lock = threading.Lock()

    # -- driver: offsets --------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        return Offset(self.run, 0).json()

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.settings.trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        """An availableNow run takes what is deliverable now, and stops: later messages
        wait for the next run (else a steady producer keeps it going for ever)."""
        q = self._queue()
        stats = q.stats()
        self._budget = stats.ready + stats.delayed

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit | None = None) -> dict[str, Any]:
        begin = Offset.of(start)
        with self._lock:
            q = self._queue()
            ops = self._claim(q, begin)
            # Spark plans a batch only once the last one's sink committed: every batch
            # up to `begin` is done.
            taken = self._done(q, ops, begin.batch)
            if taken > begin.batch:  # taken before a crash, never planned: plan it now
                return Offset(self.run, taken).json()
            want = self._want(limit)
            got = self._take(q, ops, taken + 1, want) if want > 0 else 0
            if got == 0:
                if self._budget is not None:
                    # The check that ends an availableNow run: Spark may not call stop(),
                    # so leave the group now (consumers of it may start at once).
                    self._leave()
                return begin.json()
            if self._budget is not None:
                self._budget -= got
            return Offset(self.run, taken + 1).json()

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, stop = Offset.of(start), Offset.of(end)
        first = begin.batch + 1 if begin.run == stop.run else 1
        if stop.batch < first:
            return []
        shards = self._queue().settings.shards
        parts = self.settings.parts
        return [
            InputPartition(Slice(stop.run, shard, first, stop.batch, part, parts))
            for shard in range(shards)
            for part in range(parts)
        ]

    def commit(self, end: dict[str, Any]) -> None:
        done = Offset.of(end)
        if done.run != self.run:  # not claimed yet: the next latestOffset acks it
            return
        with self._lock:
            q = self._queue()
            self._done(q, StreamOps(q.ops.keys.prefix, q.name, self.settings.group), done.batch)

    def stop(self) -> None:
        with self._lock:
            self._leave()

    def _leave(self) -> None:
        beat, self._beat, self._held = self._beat, None, False
        if beat is not None:
            beat.stop()

    # -- tasks: reading a batch's records ---------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[Any]:
        pa = importlib.import_module("pyarrow")  # untyped; present wherever Spark reads
        piece: Slice = partition.value
        arrow = arrow_schema(self.schema)
        read = again = 0
        plan = self.settings.plan
        to_columns = columns if plan is None else plan.columns
        q = self._queue()
        ops = StreamOps(q.ops.keys.prefix, q.name, self.settings.group)
        shard = q.ops.shard_keys[piece.shard]
        for batch in range(piece.first, piece.last + 1):
            start = 0
            while True:
                page = q.backend.run(ops.page(shard, piece.run, batch, start))
                msgs = (streams.message(i, a, r, piece.shard, q.ops.limit) for i, a, r in page)
                found = [
                    Found(m, "unacked", None)
                    for m in msgs
                    if piece.parts == 1 or _part_of(m, piece.parts) == piece.part
                ]
                if found:
                    read += len(found)
                    again += sum(f.message.attempts > 1 for f in found)
                    cols = to_columns(found)
                    yield pa.RecordBatch.from_arrays(
                        [pa.array(cols[f.name], type=f.type) for f in arrow], schema=arrow
                    )
                if len(page) < streams.PAGE:
                    break
                start += streams.PAGE
        note = ReadNote(q.name, self.settings.group, piece, read, again)
        if not send_done(self.settings.channel, note):
            note()

    # -- the steps ---------------------------------------------------------------------

    def _queue(self) -> Queue:
        try:
            return self.settings.target.open()
        except QueueGone:
            self.settings.target.forget_queue()
            raise

    def _claim(self, q: Queue, begin: Offset) -> StreamOps:
        """Make sure this query holds the group's stream; on the first call, join the
        group (refused while others consume it) and adopt the run of the offsets Spark
        resumes from, or start this query's own."""
        ops = StreamOps(q.ops.keys.prefix, q.name, self.settings.group)
        if self._held:
            return ops
        run, taken, done = q.backend.run(ops.read_state())
        if begin.run != self.run:  # Spark resumes a query from its checkpoint
            if run != begin.run:
                raise InvalidArgument(
                    f"this streaming query's checkpoint is of stream run {begin.run!r} of "
                    f"group {self.settings.group!r} on {q.name!r}, but the group's stream "
                    f"is now run {run or 'none'!r} (another query took it over): start "
                    "this query with a new checkpoint"
                )
            self.run = begin.run
        member = STREAM_MEMBER + self.run
        group = GroupOps(q.ops.keys, self.settings.group, member, HEARTBEAT_TTL)
        others = self._others(q, group)
        if others:
            q.backend.run(group.leave())
            raise GroupConflict(
                f"group {self.settings.group!r} of queue {q.name!r} is being consumed "
                f"by {len(others)} other live member(s) ({', '.join(others[:3])}): a "
                "streaming source consumes its group alone; stop them (or let their "
                "heartbeats lapse) or read with another group"
            )
        if run != self.run:
            if run:
                self._release(q, ops, run, range(done + 1, taken + 1))
            q.backend.run(Batch(ops.write_state(self.run, 0, 0)))
        self._beat = _Heartbeat(q, group)
        self._held = True
        return ops

    def _others(self, q: Queue, group: GroupOps) -> list[str]:
        """Join the group; the other live members. A stream's query stopped a moment ago
        (Spark may not call stop()) is a member until its heartbeat lapses: wait that
        long for it before calling it a conflict."""
        deadline = time.monotonic() + HEARTBEAT_TTL
        while True:
            _changed, members = q.backend.run(group.heartbeat())
            others = [m for m in members if m != group.member]
            streams_only = all(m.startswith(STREAM_MEMBER) for m in others)
            if not others or not streams_only or time.monotonic() >= deadline:
                return others
            time.sleep(min(1.0, HEARTBEAT_TTL / 5))

    def _want(self, limit: ReadLimit | None) -> int:
        if isinstance(limit, ReadMaxRows):
            want = min(limit.max_rows, streams.MAX_TRIGGER)
        elif isinstance(limit, ReadAllAvailable):
            want = streams.MAX_TRIGGER
        else:  # no limit passed (PySpark before 4.2), or one of another kind
            want = self.settings.trigger
        return want if self._budget is None else min(want, self._budget)

    def _take(self, q: Queue, ops: StreamOps, batch: int, want: int) -> int:
        """Pop up to ``want`` messages into ``batch``, shard by shard (starting at a
        shard that turns with the batch number, so that none starves); how many."""
        shards = q.settings.shards
        got = skipped = again = 0
        for i in range(shards):
            shard = (batch + i) % shards
            keys = q.ops.shard_keys[shard]
            while got < want:
                ask = min(want - got, MAX_BATCH)
                msgs = q.backend.drive(q.planner.pop(ask, shards=[shard]))
                if msgs:
                    rec, skip = q.backend.run(ops.record(keys, self.run, batch, msgs))
                    got, skipped = got + rec, skipped + skip
                    again += sum(m.attempts > 1 for m in msgs) - skip
                if len(msgs) < ask:
                    break
            if got >= want:
                break
        if got:
            q.backend.run(
                Batch(
                    [*ops.write_state(self.run, batch), *ops.count(messages=got, redelivered=again)]
                )
            )
            log.info(
                "dynoq stream %s, group %r: micro-batch %d took %d message(s)%s",
                q.name,
                self.settings.group,
                batch,
                got,
                f" ({skipped} popped again were in an open batch already)" if skipped else "",
            )
        return got

    def _done(self, q: Queue, ops: StreamOps, through: int) -> int:
        """Ack the open batches up to ``through`` and forget their records; the stream's
        last batch taken."""
        state: tuple[str, int, int] = q.backend.run(ops.read_state())
        run, taken, done = state
        last = min(through, taken)
        if run != self.run or last <= done:
            return taken
        for batch in range(done + 1, last + 1):
            self._finish(q, ops, self.run, batch, ack=True)
        q.backend.run(ops.finished(last))
        return taken

    def _finish(self, q: Queue, ops: StreamOps, run: str, batch: int, *, ack: bool) -> None:
        """Ack (or, for a run given up, give back) one batch's messages on every shard,
        then delete its records. A batch already finished has no records: nothing."""
        for shard, keys in enumerate(q.ops.shard_keys):
            ids: list[str] = []
            start = 0
            while True:
                page = q.backend.run(ops.page(keys, run, batch, start))
                ids += [i for i, _, _ in page]
                if len(page) < streams.PAGE:
                    break
                start += streams.PAGE
            if not ids:
                continue
            msgs = [Message(None, i, shard=shard) for i in ids]
            done = 0
            for i in range(0, len(msgs), streams.PAGE):
                chunk = msgs[i : i + streams.PAGE]
                if not ack:
                    done += sum(q.extend(m, 0) for m in chunk)  # deliverable again at once
                    continue
                acked = q.ack_many(chunk)
                if acked < len(chunk):
                    # Given back meanwhile (its visibility ran out) and not popped again:
                    # it was handled in this batch all the same, so it goes.
                    # (remove() is False for the acked ones: they are gone)
                    acked += sum(q.remove(m.id) for m in chunk if m.id)
                done += acked
            counted = ops.count(**{"acked" if ack else "given_back": done})
            q.backend.run(Batch([*ops.forget(keys, run, batch, ids), *counted]))

    def _release(self, q: Queue, ops: StreamOps, run: str, batches: range) -> None:
        """Give back what an abandoned run (its query gone, its checkpoint with it) had
        taken and not finished (``batches``), and forget its records."""
        for batch in batches:
            self._finish(q, ops, run, batch, ack=False)
        q.backend.run(Batch([ops.drop_run(keys, run) for keys in q.ops.shard_keys]))
        log.warning(
            "dynoq stream %s, group %r: gave back what run %s left in flight (a new "
            "query took the stream over)",
            q.name,
            self.settings.group,
            run,
        )


@dataclass(frozen=True)
class ReadNote:
    """What one task read of a micro-batch, for the driver's log and Prometheus counter
    (sent through the session's report channel; it runs where it arrives)."""

    queue: str
    group: str
    piece: Slice
    read: int
    redelivered: int

    def __call__(self) -> None:
        p = self.piece
        log.info(
            "dynoq.spark: stream of queue %r (group %r), batch(es) %d-%d, shard %d part "
            "%d/%d: read %d message(s), %d of them redelivered",
            self.queue,
            self.group,
            p.first,
            p.last,
            p.shard,
            p.part + 1,
            p.parts,
            self.read,
            self.redelivered,
        )
        counter = stream_counter()
        if counter is not None:
            counter.labels(self.queue, self.group, "read").inc(self.read)
            counter.labels(self.queue, self.group, "redelivered").inc(self.redelivered)


def _part_of(m: Message, parts: int) -> int:
    """Which of a shard's ``parts`` partitions reads ``m``: by its key (a key's messages
    in one partition, in order), else by its id."""
    return zlib.crc32((m.key if m.key is not None else m.id or "").encode()) % parts


class _Heartbeat:
    """Keeps the stream's group membership alive while the source process lives."""

    def __init__(self, q: Queue, group: GroupOps) -> None:
        self.q = q
        self.group = group
        self.stopped = threading.Event()
        self.thread = threading.Thread(
            target=self._loop, name="dynoq-stream-heartbeat", daemon=True
        )
        self.thread.start()

    def _loop(self) -> None:
        while not self.stopped.wait(HEARTBEAT_TTL / 3):
            try:
                self.q.backend.run(self.group.heartbeat())
            except Exception:  # the next beat tries again
                log.warning("dynoq stream heartbeat failed; retrying", exc_info=True)

    def stop(self) -> None:
        self.stopped.set()
        try:
            self.q.backend.run(self.group.leave())
        except Exception:  # the membership lapses by itself
            log.debug("dynoq stream could not leave its group", exc_info=True)


def stream_stats(where: Client, queue: str, group: str = "spark") -> StreamStats:
    """The counters of ``group``'s stream of ``queue`` (:class:`StreamStats`): what it
    took, acked and gave back, on the server, whichever driver did it."""
    ops = StreamOps(where.prefix, validate.check_name(queue, "queue name"), group)
    return where.backend.run(ops.read_stats())  # type: ignore[no-any-return]
