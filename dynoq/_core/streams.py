"""A queue read as a stream of micro-batches, exactly once (pure: no I/O).

Spark's streaming source (``dynoq/spark/stream.py``) consumes a queue for one consumer
group. When Spark plans a micro-batch, the source *takes* it: it pops messages (each
queue kind's own pop: an ordered shard's order, a keyed queue's one-at-a-time per key)
and records a copy of each under the batch's number, per shard, in the same step
(``stream-record-3.lua``). The batch's messages stay in flight until Spark says the batch
is done; then they are acked and the records deleted. So a batch Spark replays after a
crash reads the records: exactly the messages it had, even if their visibility ran out
meanwhile (a message popped again while its batch is open is not recorded twice), and
each message is in exactly one batch that Spark commits.

A *run* is one streaming query's hold on the group's stream (a random id, kept in
Spark's offsets and so across restarts from one checkpoint). Keys, under the queue's
hash tags::

    <prefix>:stream:{<queue>}:<group>                  hash: run (the run holding the
                                                       stream), taken (its last batch)
    <prefix>:{<queue>:<shard>}:stream:<group>:open:<run>    hash: id -> open batch
    <prefix>:{<queue>:<shard>}:stream:<group>:b:<run>:<n>   list: id, attempts, record...

A group, run or batch number holds no ':' (names are checked, runs are hex, batches
digits), and no other key has ``stream`` where these have it, so these keys name one
stream each. Every key expires ``retention`` after the stream's last take.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidArgument
from ..message import Message
from . import codec, validate
from .calls import Call, Cmd, text
from .keys import ShardKeys
from .lua import script

STREAM_MEMBER = "spark-stream:"  # a stream's member name in its group starts so
MAX_TRIGGER = 100_000  # messages one micro-batch may take (all shards together)
DEFAULT_TRIGGER = 10_000  # maxMessagesPerTrigger when not given
MAX_PARTS = 64  # Spark partitions one shard's part of a batch may be read in
RETENTION_MS = 7 * 24 * 3600 * 1000  # a stream's keys outlive its last take so long
PAGE = 1000  # messages read from a batch's record per round trip (3 list entries each)
MAX_BATCH_ID = 2**53 - 1  # batch numbers are compared as Lua numbers (doubles)

_RECORD = script("stream-record")
_RUN = re.compile(r"[0-9a-f]{1,32}")


def new_run() -> str:
    return uuid.uuid4().hex[:16]


@dataclass(frozen=True)
class Offset:
    """Spark's offset of the stream: the run and the last batch it covers (batches are
    numbered from 1 in each run; 0: none yet)."""

    run: str
    batch: int

    def json(self) -> dict[str, Any]:
        return {"run": self.run, "batch": self.batch}

    @classmethod
    def of(cls, value: Mapping[str, Any] | None) -> Offset:
        """An offset as Spark hands it back (read from a checkpoint: checked)."""
        if not isinstance(value, Mapping):
            raise InvalidArgument(f"not a dynoq stream offset: {value!r:.80}")
        run, batch = value.get("run"), value.get("batch")
        if not (isinstance(run, str) and _RUN.fullmatch(run)):
            raise InvalidArgument(f"not a dynoq stream offset (run): {value!r:.80}")
        if not (type(batch) is int and 0 <= batch <= MAX_BATCH_ID):
            raise InvalidArgument(f"not a dynoq stream offset (batch): {value!r:.80}")
        return cls(run, batch)


@dataclass(frozen=True)
class StreamKeys:
    """One shard's keys of one run of a group's stream (the names the Lua header uses)."""

    msgs: str
    sopen: str
    sbatch: str


class StreamOps:
    """The keys and calls of one group's stream of one queue."""

    def __init__(self, prefix: str, queue: str, group: str) -> None:
        self.group = validate.check_name(group, "group")
        self.queue = queue
        self.state = f"{prefix}:stream:{{{queue}}}:{self.group}"

    def _base(self, shard: ShardKeys) -> str:
        tag = shard.msgs.rsplit(":", 1)[0]  # "<prefix>:{<queue>:<shard>}"
        return f"{tag}:stream:{self.group}"

    def open_key(self, shard: ShardKeys, run: str) -> str:
        return f"{self._base(shard)}:open:{run}"

    def batch_key(self, shard: ShardKeys, run: str, batch: int) -> str:
        return f"{self._base(shard)}:b:{run}:{batch}"

    def keys(self, shard: ShardKeys, run: str, batch: int) -> StreamKeys:
        return StreamKeys(shard.msgs, self.open_key(shard, run), self.batch_key(shard, run, batch))

    # -- the stream's state ------------------------------------------------------------

    def read_state(self) -> Cmd:
        """Reply: (run holding the stream or "", its last batch taken, its last batch
        finished: every batch up to it is acked and forgotten)."""

        def parse(reply: Sequence[Any]) -> tuple[str, int, int]:
            run, taken, done = (text(v) if v is not None else "" for v in reply)
            return run, int(taken or 0), int(done or 0)

        return Cmd(("HMGET", self.state, "run", "taken", "done"), parse)

    def finished(self, batch: int) -> Cmd:
        """Record that every batch up to ``batch`` is finished (so no later call walks
        them again: a stream's batches number in the millions)."""
        return Cmd(("HSET", self.state, "done", batch))

    def count(self, **counts: int) -> list[Cmd]:
        """Add to the stream's counters (what :func:`parse_stats` reads)."""
        return [Cmd(("HINCRBY", self.state, k, v)) for k, v in counts.items() if v]

    def read_stats(self) -> Cmd:
        return Cmd(("HGETALL", self.state), parse_stats)

    def write_state(self, run: str, taken: int, done: int | None = None) -> list[Cmd]:
        fields = ("run", run, "taken", taken) + (() if done is None else ("done", done))
        return [
            Cmd(("HSET", self.state, *fields)),
            Cmd(("PEXPIRE", self.state, RETENTION_MS)),
        ]

    # -- a batch -----------------------------------------------------------------------

    def record(self, shard: ShardKeys, run: str, batch: int, msgs: Sequence[Message]) -> Call:
        """Record popped ``msgs`` (of one shard, at most MAX_BATCH) in ``batch``; reply:
        (recorded, skipped: already in an open batch)."""
        args: list[Any] = [batch, RETENTION_MS]
        for m in msgs:
            args += (m.id, m.attempts)
        return _RECORD.call(self.keys(shard, run, batch), args, lambda r: (int(r[0]), int(r[1])))

    def page(self, shard: ShardKeys, run: str, batch: int, start: int) -> Cmd:
        """Messages ``start`` .. ``start + PAGE`` of a batch's record on one shard; reply:
        [(id, attempts, record), ...]."""

        def parse(reply: Sequence[bytes]) -> list[tuple[str, int, bytes]]:
            return [
                (text(reply[i]), int(reply[i + 1]), reply[i + 2])
                for i in range(0, len(reply) - 2, 3)
            ]

        key = self.batch_key(shard, run, batch)
        return Cmd(("LRANGE", key, 3 * start, 3 * (start + PAGE) - 1), parse)

    def forget(self, shard: ShardKeys, run: str, batch: int, ids: Sequence[str]) -> list[Cmd]:
        """Delete a done batch's record on one shard, and its ids from the open ones."""
        out = [Cmd(("UNLINK", self.batch_key(shard, run, batch)))]
        key = self.open_key(shard, run)
        out += [Cmd(("HDEL", key, *ids[i : i + PAGE])) for i in range(0, len(ids), PAGE)]
        return out

    def drop_run(self, shard: ShardKeys, run: str) -> Cmd:
        return Cmd(("UNLINK", self.open_key(shard, run)))


@dataclass(frozen=True)
class StreamStats:
    """A group's stream, as its counters say (since the stream's keys were made):
    ``run`` holds it and has taken ``batches``; ``taken`` messages went into batches
    (``redelivered`` of them had been delivered before: their visibility ran out, or a
    run before gave them back), ``acked`` were acked with their batch, ``given_back``
    were given back when a new query took over an abandoned run."""

    run: str = ""
    batches: int = 0
    taken: int = 0
    redelivered: int = 0
    acked: int = 0
    given_back: int = 0


def parse_stats(reply: Any) -> StreamStats:
    raw = dict(zip(*[iter(reply)] * 2, strict=True)) if isinstance(reply, list) else reply
    got = {text(k): text(v) for k, v in (raw or {}).items()}

    def num(name: str) -> int:
        return int(got.get(name) or 0)

    return StreamStats(
        got.get("run", ""),
        num("taken"),
        num("messages"),
        num("redelivered"),
        num("acked"),
        num("given_back"),
    )


def message(msg_id: str, attempts: int, record: bytes, shard: int, limit: int) -> Message:
    """A recorded message as it was delivered (an unreadable record says why: a pop
    dead-letters those before the take sees them, so this is for a record changed
    by hand)."""
    return codec.readable(msg_id, record, shard, attempts, limit=limit)


def check_trigger(value: int) -> int:
    return validate.check_count(value, "maxMessagesPerTrigger", high=MAX_TRIGGER)


def check_parts(value: int) -> int:
    return validate.check_count(value, "partitionsPerShard", high=MAX_PARTS)
