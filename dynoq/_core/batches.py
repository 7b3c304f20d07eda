"""Counted push-if-absent and exactly-once micro-batches, for Spark writes (pure: no I/O).

A streaming query (Spark's query id, or a name the user gives) writes micro-batches
numbered 0, 1, 2, ... and may replay the last one after a crash. Per queue shard, two
keys under the shard's hash tag remember where the query is::

    <prefix>:{<queue>:<shard>}:commit:<query>   hash: committed (highest committed batch
                                                id), batch (the batch `wrote` belongs to)
    <prefix>:{<queue>:<shard>}:wrote:<query>    set: ids the uncommitted batch handled

Every push of a batch records its ids in ``wrote`` in the same script that pushes them
(``push-batch-14.lua``), so a task retried, or a batch replayed after the driver died
half-way, pushes none of them again, even when consumers have acked and deleted them
since. When the whole batch is written the driver commits it on every shard
(``batch-commit-2.lua``): ``committed`` moves to the batch id and ``wrote`` is deleted,
so state stays bounded by one batch's ids per shard, and a replay of a committed batch is
refused whole. Both keys expire after ``retention`` seconds without a batch.

Without a batch (``batch=None``) the same script is a plain push-if-absent that counts
what it did: pushed, skipped (the id is already in the queue) and refused (acked within
the queue's dedupe window).

A Spark task (one partition of one write) may run more than once: an attempt dies
half-way and Spark runs the task again from its first row. Each push of an
:class:`Attempt` records the ids it pushed in the task's ``tried`` hash on the shard (id
-> attempt number), in the same script::

    <prefix>:{<queue>:<shard>}:tried:<task>     hash: id -> the attempt that pushed it

so the retry counts a row an earlier attempt pushed as pushed, not as a duplicate (the
driver's counts cover every row once, whatever attempt pushed it) and pushes none of them
again, even if consumers acked them since. The record is deleted (``tried-clear-1.lua``)
once Spark counted the task as succeeded: by the driver, or the data source's commit,
never by the task itself (an attempt whose input ends early, because another part of the
task failed, cannot tell). A task of a failed job leaves it to expire.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidArgument
from . import codec, validate
from .bounds import body_size, chunks
from .calls import Batch, Call, Cmd
from .keys import ShardKeys
from .lua import script
from .queue import QueueOps

RETENTION = 7 * 24 * 3600.0  # seconds a query's batch keys outlive its last batch
MAX_BATCH_ID = 2**53 - 1  # batch ids are compared as Lua numbers (doubles)

TASK_RETENTION = 24 * 3600.0  # seconds a one-shot write task's record outlives its last push
MAX_ATTEMPT = 2**31 - 1  # Spark's attempt numbers are ints

_PUSH, _COMMIT, _CLEAR = script("push-batch"), script("batch-commit"), script("tried-clear")


@dataclass(frozen=True)
class BatchKeys:
    """One shard's message keys and one query's batch keys on that shard (the names the
    Lua headers use)."""

    delayed: str
    ready: str
    unack: str
    msgs: str
    dlv: str
    dead: str
    seq: str
    done: str
    counts: str
    commit: str
    wrote: str
    epoch: str
    tried: str
    expiry: str

    @classmethod
    def of(cls, shard: ShardKeys, query: str, keyed: bool = False, task: str = "-") -> BatchKeys:
        """A keyed queue's (ordered="key") waiting, turn and key-state sets stand in
        for delayed, ready and unack (push-batch-14.lua's header)."""
        tag = _tag(shard)
        first = (
            (shard.kwait, shard.kturn, shard.kstate)
            if keyed
            else (shard.delayed, shard.ready, shard.unack)
        )
        return cls(
            *first,
            shard.msgs,
            shard.dlv,
            shard.dead,
            shard.seq,
            shard.done,
            shard.counts,
            f"{tag}:commit:{query}",
            f"{tag}:wrote:{query}",
            shard.epoch,
            tried_key(shard, task),
            shard.expiry,
        )


def _tag(shard: ShardKeys) -> str:
    return shard.msgs.rsplit(":", 1)[0]  # "<prefix>:{<queue>:<shard>}"


def tried_key(shard: ShardKeys, task: str) -> str:
    """A Spark task's record, on one shard, of the ids its attempts pushed."""
    return f"{_tag(shard)}:tried:{task}"


@dataclass(frozen=True)
class Counts:
    """What a write did with its rows: each row is counted once, as pushed, skipped or
    refused."""

    pushed: int = 0  # new messages
    skipped: int = 0  # duplicates: the id is in the queue, this batch already handled
    #                   it, or an earlier row of the same write had it
    refused: int = 0  # acked within the dedupe window, their batch was committed, or
    #                   invalid
    invalid: int = 0  # of the refused: rows that make no valid message (a null id, ...)

    def __add__(self, other: Counts) -> Counts:
        return Counts(
            self.pushed + other.pushed,
            self.skipped + other.skipped,
            self.refused + other.refused,
            self.invalid + other.invalid,
        )

    @property
    def rows(self) -> int:
        return self.pushed + self.skipped + self.refused


@dataclass(frozen=True)
class Progress:
    """Where a streaming query stands on a queue (over its shards)."""

    committed: int | None  # the highest batch id committed on any shard, None if none
    batch: int | None  # the uncommitted batch being written, None if none
    written: int  # ids that uncommitted batch handled so far


@dataclass(frozen=True)
class Attempt:
    """One attempt of a Spark task: ``task`` names the task (a write's token, its stage
    and partition: the same for every attempt of it), ``number`` is Spark's attempt
    number."""

    task: str
    number: int

    def __post_init__(self) -> None:
        validate.check_name(self.task, "Spark task")
        validate.check_int(self.number, "attempt number", low=0, high=MAX_ATTEMPT)


def check_query(value: object) -> str:
    """A query id or name: a name (no ':', '{', '}' or whitespace), as Spark's ids are."""
    return validate.check_name(value, "query id")


def check_batch(value: object) -> int:
    return validate.check_int(value, "batch id", low=0, high=MAX_BATCH_ID)


class BatchOps:
    """Spark writes to one queue, optionally as one streaming ``query``'s micro-batches."""

    def __init__(
        self,
        ops: QueueOps,
        query: str = "",
        retention: float = RETENTION,
        attempt: Attempt | None = None,
    ) -> None:
        self.ops = ops
        self.query = check_query(query) if query else ""
        self.retention_ms = validate.to_ms(
            validate.check_seconds(retention, "retention", minimum=1.0)
        )
        self.attempt = attempt
        task = "-" if attempt is None else attempt.task
        self.batch_keys = [
            BatchKeys.of(k, self.query or "-", ops.keyed, task) for k in ops.shard_keys
        ]
        self.keys = [_PUSH.key_list(k) for k in self.batch_keys]

    def push(self, outs: Sequence[codec.Outgoing], batch: int | None = None) -> Call | Batch:
        """Push-if-absent validated messages (at most validate.MAX_ITEMS), as part of
        micro-batch ``batch`` of the query when given, and of this ops' attempt of a
        Spark task when it has one; the reply is :class:`Counts`."""
        if len(outs) > validate.MAX_ITEMS:
            raise InvalidArgument(
                f"at most {validate.MAX_ITEMS} messages per call, got "
                f"{len(outs)}: push them in several calls"
            )
        if batch is not None and not self.query:
            raise InvalidArgument("a micro-batch needs the query it belongs to")
        number = -1 if batch is None else check_batch(batch)
        head = [
            self.ops.epoch,
            validate.to_ms(self.ops.settings.dedupe_window),
            self.ops.wake,
            number,
            self.retention_ms,
            self.ops.kind.conc,
            "" if self.attempt is None else self.attempt.number,
        ]
        check = self.ops.checked(f"push to {self.ops.name!r}")
        by_shard: dict[int, list[codec.Outgoing]] = defaultdict(list)
        for o in outs:
            by_shard[self.ops.shard_for(o.routing)].append(o)
        calls: list[Any] = []
        for shard, group in by_shard.items():
            for part in chunks(group, body_size):
                args = list(head)
                for o in part:
                    # a keyed queue's body holds no key: the key rides in the delay's place
                    args += (
                        (o.id, o.routing, 0, o.body)
                        if self.ops.keyed
                        else (o.id, o.delay_ms, o.priority, o.body)
                    )
                calls.append(Call(_PUSH, self.keys[shard], args, check))
        if len(calls) == 1 and not self.ops.settings.min_replicas:
            calls[0].parse = self.ops.checked(f"push to {self.ops.name!r}", _counts)
            return calls[0]  # type: ignore[no-any-return]
        return self.ops.replicated(calls, _sum_counts)

    def commit(self, batch: int) -> Batch:
        """Record micro-batch ``batch`` as committed on every shard (idempotent); the
        reply is True if it was not committed before."""
        if not self.query:
            raise InvalidArgument("only a query's micro-batch can be committed")
        number = check_batch(batch)
        calls: list[Any] = [
            Call(_COMMIT, [k.commit, k.wrote], [number, self.retention_ms]) for k in self.batch_keys
        ]
        return self.ops.replicated(calls, lambda replies: any(int(r) for r in replies))

    def shards_of(self, outs: Sequence[codec.Outgoing]) -> set[int]:
        """The shards ``outs`` go to."""
        return {self.ops.shard_for(o.routing) for o in outs}

    def forget(self, tasks: Sequence[tuple[str, Sequence[int]]]) -> Batch:
        """Delete the records of Spark tasks (name, shards written to) that succeeded:
        no attempt of them will come. At most validate.MAX_ITEMS deletions a call."""
        shards = self.ops.shard_keys
        calls: list[Any] = [
            Call(_CLEAR, [tried_key(shards[s], validate.check_name(task, "Spark task"))], [])
            for task, written in tasks
            for s in written
            if 0 <= s < len(shards)
        ]  # a queue made anew with fewer shards: not there
        if len(calls) > validate.MAX_ITEMS:
            raise InvalidArgument(
                f"at most {validate.MAX_ITEMS} records per call, got "
                f"{len(calls)}: forget them in several calls"
            )
        return Batch(calls)

    def progress(self) -> Batch:
        """Where the query stands (:class:`Progress`)."""
        if not self.query:
            raise InvalidArgument("progress is kept for a query only")
        calls: list[Any] = []
        for k in self.batch_keys:
            calls.append(Cmd(("HMGET", k.commit, "committed", "batch")))
            calls.append(Cmd(("SCARD", k.wrote)))
        return Batch(calls, parse=_progress)


def _counts(reply: Any) -> Counts:
    return Counts(int(reply[0]), int(reply[1]), int(reply[2]))


def _sum_counts(replies: list[Any]) -> Counts:
    total = Counts()
    for r in replies:
        total += _counts(r)
    return total


def _progress(replies: list[Any]) -> Progress:
    committed: list[int] = []
    current: list[int] = []
    written = 0
    for state, size in zip(replies[::2], replies[1::2], strict=True):
        if state[0] is not None:
            committed.append(int(state[0]))
        if state[1] is not None:
            current.append(int(state[1]))
        written += int(size)
    return Progress(
        max(committed) if committed else None, max(current) if current else None, written
    )
