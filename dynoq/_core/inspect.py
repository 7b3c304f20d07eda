"""Read-only views of queues and groups for people (the dashboard), bounded (pure: no I/O).

Every view reads a page: a fixed number of entries at an offset of one sorted set (ZRANGE
by rank is O(log n + page), whatever the set's size), the first entries of a few shards
merged, or one SSCAN step of a registry. Nothing here reads a whole queue, claims a
message or runs a script that writes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidArgument
from ..message import Message
from . import codec, validate
from .byid import locate, stored
from .calls import Batch, Cmd, Flow, pairs, text
from .group import Rebalance, parse_history
from .keys import HELD_FROM, QueueKeys, held_name, held_of
from .queue import QueueOps

MAX_PAGE = 500  # entries of one page
MAX_MERGED_SHARDS = 64  # shards one merged page reads (more: one shard at a time)
MAX_NAMES = 1000  # names one registry page lists
MAX_MEMBERS = 1000  # members of one group listed
SCAN_STEPS = 64  # SSCAN calls one registry page makes at most

# The page kinds: which shard set they read, and what the score of an entry means.
PAGES = {
    "in_flight": "unack",  # score: the delivery's visibility deadline
    "delayed": "delayed",  # score: the due time
    "dead": "dead",
}  # score: when it was dead-lettered
STATES = (("ready", "ready"), ("delayed", "delayed"), ("in_flight", "unack"), ("dead", "dead"))


def holder_of(token: bytes | str) -> str:
    """The instance id in a lease token ("<instance id>:<random>"); the random part is
    what fences, so it is never shown."""
    return text(token).rpartition(":")[0] or "?"


@dataclass(frozen=True)
class ShardLease:
    """Who leases an ordered shard: the holder's instance id (None when free), seconds its
    lease has left, and the shard's fencing number (0 before the first lease)."""

    shard: int
    holder: str | None
    expires_in: float | None
    fence: int


def leases(q: QueueOps, shards: Sequence[int]) -> Batch:
    """The lease and fencing number of each of ``shards`` (at most MAX_PAGE);
    reply: a list of :class:`ShardLease`."""
    shards = _shards(q, shards, MAX_PAGE)
    cmds = []
    for s in shards:
        k = q.shard_keys[s]
        cmds += [Cmd(("GET", k.lease)), Cmd(("PTTL", k.lease)), Cmd(("GET", k.fence))]

    def parse(raw: list[Any]) -> list[ShardLease]:
        out = []
        for i, s in enumerate(shards):
            token, ttl, fence = raw[3 * i : 3 * i + 3]
            out.append(
                ShardLease(
                    s,
                    None if token is None else holder_of(token),
                    int(ttl) / 1000 if token is not None and int(ttl) >= 0 else None,
                    int(fence or 0),
                )
            )
        return out

    return Batch(cmds, parse=parse)


@dataclass(frozen=True)
class Entry:
    """A message met on a page, its shard, and the time (seconds, server clock) its page
    is sorted by: its visibility deadline, due time or dead-letter time."""

    message: Message
    shard: int
    at: float


def page(
    q: QueueOps, kind: str, *, shards: Sequence[int], offset: int = 0, count: int = 50
) -> Flow[tuple[list[Entry], bool]]:
    """One page of in-flight deliveries ("in_flight"), delayed messages ("delayed") or
    dead letters ("dead"), earliest first; returns (entries, whether more follow).

    With one shard, ``offset`` walks it; with several (at most MAX_MERGED_SHARDS), the
    first ``count`` of each are merged and ``offset`` must be 0. ``count``: 1..MAX_PAGE."""
    if kind not in PAGES:
        raise InvalidArgument(f"unknown page {kind!r}; choose from {sorted(PAGES)}")
    count = validate.check_count(count, high=MAX_PAGE)
    offset = validate.check_int(offset, "offset", low=0, high=2**53)
    shards = _shards(q, shards, MAX_MERGED_SHARDS)
    if len(shards) > 1 and offset:
        raise InvalidArgument(
            "a page merged over several shards starts at offset 0; walk one shard to go further"
        )
    heads = yield Batch(
        [
            Cmd(
                (
                    "ZRANGE",
                    getattr(q.shard_keys[s], PAGES[kind]),
                    offset,
                    offset + count,
                    "WITHSCORES",
                )
            )
            for s in shards
        ]
    )
    ranked = sorted(
        (float(score), s, member)
        for s, head in zip(shards, heads, strict=True)
        for member, score in pairs(head)
        if float(score) != math.inf  # lua/lib/pin.lua's entry: not a message
    )
    more = len(ranked) > count
    return (yield from _entries(q, ranked[:count])), more


def _entries(q: QueueOps, ranked: list[tuple[float, int, Any]]) -> Flow[list[Entry]]:
    """The messages of a page's (score, shard, member) entries; a held debounced copy of
    an ordered shard (keys.held_of) is read under its own name, at its due time."""
    held = [held_of(member, score) for score, _, member in ranked]
    found = yield from stored(
        q,
        [(s, h[0] if h else text(member)) for (_, s, member), h in zip(ranked, held, strict=True)],
    )
    reads = [
        Cmd(("HGET", q.shard_keys[s].msgs, member))
        for (_, s, member), h in zip(ranked, held, strict=True)
        if h
    ]
    copy = iter((yield Batch(reads)) if reads else ())
    entries = []
    for (score, s, _), h, m in zip(ranked, held, found, strict=True):
        if h:
            rec = next(copy)
            m = None if rec is None else codec.readable(h[0], rec, s, 0, limit=q.limit)
            score = h[1]
        if m is not None:
            entries.append(Entry(m, s, score / 1000))
    return entries


@dataclass(frozen=True)
class Located:
    """A message found by id: its state ("ready", "delayed", "in_flight", "dead", or
    "unknown" for a record in no state set), and the time of that state (due time,
    visibility deadline or dead-letter time; None when ready)."""

    message: Message
    state: str
    at: float | None


def find(q: QueueOps, msg_id: str) -> Flow[Located | None]:
    """The message ``msg_id`` with its state, or None when the queue does not hold it."""
    msg_id = validate.check_id(msg_id)
    [shard] = yield from locate(q, [msg_id], held=True)
    keys = q.shard_keys[shard]
    *scores, held = yield Batch(
        [
            *(Cmd(("ZSCORE", getattr(keys, field), msg_id)) for _, field in STATES),
            Cmd(("ZSCORE", keys.delayed, held_name(msg_id))),
        ]
    )
    [msg] = yield from stored(q, [(shard, msg_id)], held=bool(q.settings.ordered))
    if msg is None:
        return None
    for (state, _), score in zip(STATES, scores, strict=True):
        if score is not None:
            return Located(msg, state, None if state == "ready" else float(score) / 1000)
    if held is not None:  # only a debounced copy held for it (keys.held_of)
        return Located(msg, "delayed", (float(held) - HELD_FROM) / 1000)
    return Located(msg, "unknown", None)


def names(key: str, limit: int = MAX_NAMES) -> Flow[tuple[list[str], int]]:
    """Up to ``limit`` names of a registry set (queues, topics, a queue's groups), sorted,
    and how many it holds: the first ones SSCAN meets, not the first alphabetically when
    there are more."""
    limit = validate.check_count(limit, high=MAX_NAMES)
    total = int((yield Cmd(("SCARD", key))))
    found: set[str] = set()
    cursor = 0
    for _ in range(SCAN_STEPS):
        cursor, batch = yield Cmd(("SSCAN", key, cursor, "COUNT", limit))
        found.update(text(n) for n in batch)
        cursor = int(cursor)
        if cursor == 0 or len(found) >= limit:
            break
    return sorted(found)[:limit], total


@dataclass(frozen=True)
class Member:
    """A member of a consumer group: its last heartbeat (seconds, server clock) and the
    lifetime of a heartbeat (seconds; None when unknown)."""

    name: str
    heartbeat_at: float
    ttl: float | None

    def alive(self, now: float) -> bool:
        """Whether its last heartbeat is still within its lifetime at ``now``."""
        return self.ttl is not None and self.heartbeat_at + self.ttl > now


@dataclass(frozen=True)
class GroupView:
    """A consumer group of a queue: whether it holds the queue's claim (consumes it now),
    its members (the first MAX_MEMBERS; ``member_count`` all) and its recent rebalances,
    newest first."""

    group: str
    consuming: bool
    members: list[Member]
    member_count: int
    history: list[Rebalance]


def group(keys: QueueKeys, name: str, *, members: int = 100, history: int = 20) -> Flow[GroupView]:
    """One consumer group of a queue: up to ``members`` members and ``history`` recent
    rebalances."""
    name = validate.check_name(name, "group")
    members = validate.check_count(members, high=MAX_MEMBERS)
    history = validate.check_count(history, high=MAX_PAGE)
    k = keys.group(name)
    raw, total, claim, hist = yield Batch(
        [
            Cmd(("ZRANGE", k.members, 0, members - 1, "WITHSCORES")),
            Cmd(("ZCARD", k.members)),
            Cmd(("GET", k.claim)),
            Cmd(("LRANGE", k.history, 0, history - 1)),
        ]
    )
    beats = [(text(m), float(score) / 1000) for m, score in pairs(raw)]
    ttls = (yield Cmd(("HMGET", k.ttls, *(m for m, _ in beats)))) if beats else []
    return GroupView(
        name,
        claim is not None and text(claim) == name,
        [
            Member(m, at, None if ttl is None else int(ttl) / 1000)
            for (m, at), ttl in zip(beats, ttls, strict=True)
        ],
        int(total),
        parse_history(hist),
    )


def _shards(q: QueueOps, shards: Sequence[int], most: int) -> list[int]:
    chosen = list(shards)
    if not chosen or len(chosen) > most:
        raise InvalidArgument(f"a view reads 1..{most} shards at once, got {len(chosen)}")
    for s in chosen:
        validate.check_int(s, "shard", low=0, high=q.settings.shards - 1)
    return chosen


def together(batches: Sequence[Batch]) -> Batch:
    """Several batches sent as one (one round trip per server node); the reply is each
    batch's parsed reply, in order. Batches with WAIT cannot be joined."""
    if any(b.wait is not None for b in batches):
        raise InvalidArgument("batches with WAIT cannot be sent together")
    sizes = [len(b.calls) for b in batches]

    def parse(replies: list[Any]) -> list[Any]:
        out, i = [], 0
        for b, n in zip(batches, sizes, strict=True):
            part, i = replies[i : i + n], i + n
            out.append(part if b.parse is None else b.parse(part))
        return out

    return Batch([c for b in batches for c in b.calls], parse=parse)
