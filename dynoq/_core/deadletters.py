"""A queue's dead letters: read, replay, purge (pure: no I/O).

A message is dead-lettered when its retries are spent, its handler asked for it
(DeadLetter), or its record cannot be read; it stays, with why, in its shard's ``dead``
set until it is replayed (put back with its attempts reset) or purged. Replaying or
purging a whole queue goes a bounded call at a time (SWEEP_LIMIT), shard by shard.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from ..errors import InvalidType
from ..message import Message
from . import validate
from .bounds import IDS_CHUNK, SWEEP_LIMIT
from .byid import locate, stored
from .calls import Batch, Call, Cmd, Flow, pairs, text
from .lua import script
from .queue import QueueOps

_PURGE = script("purge-dead")


def dead(ops: QueueOps, count: int = 100) -> Flow[list[Message]]:
    """Dead-lettered messages, oldest first."""
    count = validate.check_count(count, high=validate.MAX_BATCH)
    checks = ops.epoch_checks(range(ops.settings.shards), f"dead of {ops.name!r}")
    heads = yield Batch(
        [*checks, *(Cmd(("ZRANGE", k.dead, 0, count - 1, "WITHSCORES")) for k in ops.shard_keys)]
    )
    heads = heads[len(checks) :]
    ranked = sorted(
        (float(score), shard, text(member))
        for shard, head in enumerate(heads)
        for member, score in pairs(head)
    )[:count]
    if not ranked:
        return []
    found = yield from stored(ops, [(shard, msg_id) for _, shard, msg_id in ranked])
    return [m for m in found if m is not None]


def replay_dead(ops: QueueOps, ids: Iterable[str] | None = None) -> Flow[int]:
    """Put dead-lettered messages (all, or these ids) back with attempts reset."""
    if ids is None:
        total = 0
        for shard in range(ops.settings.shards):
            total += yield from drain_dead(ops, shard, replay=True)
        return total
    if isinstance(ids, (str, bytes)):
        raise InvalidType("ids must be a list of message ids, not one string")
    wanted = [validate.check_id(i) for i in validate.check_items(ids, "replay_dead()")]
    by_shard: dict[int, list[str]] = defaultdict(list)
    for shard, msg_id in zip((yield from locate(ops, wanted)), wanted, strict=True):
        by_shard[shard].append(msg_id)
    check = ops.checked(f"replay on {ops.name!r}", int)
    return sum(
        (
            yield Batch(
                [
                    ops.kind.replay_call(shard, group[i : i + IDS_CHUNK], check)
                    for shard, group in by_shard.items()
                    for i in range(0, len(group), IDS_CHUNK)
                ]
            )
        )
    )


def purge_dead(ops: QueueOps) -> Flow[int]:
    """Delete every dead-lettered message for good; returns how many."""
    total = 0
    for shard in range(ops.settings.shards):
        total += yield from drain_dead(ops, shard, replay=False)
    return total


def drain_dead(ops: QueueOps, shard: int, *, replay: bool) -> Flow[int]:
    """Replay (or purge) every dead letter of one shard, a bounded call at a time."""
    check = ops.checked(f"{'replay' if replay else 'purge'} of dead letters of {ops.name!r}", int)
    total = 0
    while True:
        call: Call = (
            ops.kind.replay_call(shard, [], check)
            if replay
            else _PURGE.call(ops.shard_keys[shard], [ops.epoch, SWEEP_LIMIT], check)
        )
        n = int((yield call))
        total += n
        if n < SWEEP_LIMIT:
            return total
