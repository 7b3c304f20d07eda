"""A read-only walk over a queue's messages (for exports and audits; pure: no I/O).

A walk reads one shard state by state, each state's sorted set in its order (score, then
id), a page at a time: the page starts right after the last entry of the one before
(found again by its rank, so a page costs O(log n + page) whatever the set's size), and
the page's records, delivery states and failure reasons come in one round trip of
HMGETs. It claims nothing, runs no script, holds no large reply, and remembers one entry
per state between pages: memory is bounded by a page, not by the shard.

It is not a snapshot: a message that stays in its state during the walk is met exactly
once; one that moves (popped, acked, retried, promoted) may be met in its old state, its
new one, both or neither. A delayed message already due counts as ready, as in
``q.stats()`` (a pop promotes it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidArgument
from ..message import Message
from . import codec, delivered, reasons
from .calls import Batch, Cmd, Flow, pairs, server_time
from .keys import held_of
from .queue import QueueOps

STATES = ("ready", "delayed", "unacked", "dead")
DEFAULT_STATES = ("ready", "delayed", "dead")  # waiting + dead: what an audit wants
PAGE = 1000
_SETS = {"ready": "ready", "delayed": "delayed", "unacked": "unack", "dead": "dead"}


def check_states(states: Iterable[str]) -> tuple[str, ...]:
    chosen = tuple(states)
    bad = [s for s in chosen if s not in STATES]
    if bad or not chosen:
        raise InvalidArgument(f"unknown state(s) {bad or list(chosen)}; choose from {STATES}")
    return chosen


@dataclass(frozen=True)
class Found:
    """One message met by a walk, its state, and the time (seconds, server clock) of that
    state: the due time (delayed), the visibility deadline (unacked), when it was
    dead-lettered (dead); None when ready."""

    message: Message
    state: str
    at: float | None


Anchor = tuple[float, bytes]  # (score, member) of the last entry a page returned


def walk_sets(states: Iterable[str] = DEFAULT_STATES) -> list[str]:
    """The sorted sets a walk over ``states`` reads, in order (a due delayed message is
    ready, so "ready" reads the delayed set too)."""
    chosen = set(check_states(states))
    return [s for s in STATES if s in chosen or (s == "delayed" and "ready" in chosen)]


def walk_page(
    q: QueueOps, shard: int, zset: str, after: Anchor | None, states: Iterable[str] = DEFAULT_STATES
) -> Flow[tuple[list[Found], Anchor | None]]:
    """One page of sorted set ``zset`` ("ready", "delayed", "unacked" or "dead") of a
    shard, after ``after`` (None: from the start); returns (the messages of the page in
    ``states``, the anchor of the next page, None at the end)."""
    wanted = set(check_states(states))
    key = getattr(q.shard_keys[shard], _SETS[zset])
    start = 0 if after is None else (yield from _rank_after(key, after))
    # A walk of a set starts by checking the shard is still the queue's (QueueGone).
    checks = q.epoch_checks([shard], f"a walk of {q.name!r}") if after is None else []
    *_, page = yield Batch([*checks, Cmd(("ZRANGE", key, start, start + PAGE - 1, "WITHSCORES"))])
    got = pairs(page)
    entries = [(float(score), _bytes(member)) for member, score in got]
    if after is not None:
        # The set may have changed between finding the rank and reading: never go back.
        entries = [e for e in entries if e > after]
    nxt = (entries[-1] if entries else after) if len(got) == PAGE else None
    live = [(s, m) for s, m in entries if s != math.inf]  # lua/lib/pin.lua's entry
    if not live:
        return [], nxt
    now = (yield server_time()) if zset == "delayed" else 0.0
    # A held debounced copy of an ordered shard (keys.held_of) is its own field in msgs,
    # and has no delivery state nor reason: the member names its fields as it is.
    held = [held_of(m, s) for s, m in live]
    ids = [h[0] if h else m.decode() for h, (_, m) in zip(held, live, strict=True)]
    names = [m for _, m in live]
    keys = q.shard_keys[shard]
    records, dlvs, whys = yield Batch(
        [
            Cmd(("HMGET", keys.msgs, *names)),
            Cmd(("HMGET", keys.dlv, *names)),
            Cmd(("HMGET", keys.why, *names)),
        ]
    )
    found = []
    for (score, _), h, msg_id, record, dlv, why in zip(
        live, held, ids, records, dlvs, whys, strict=True
    ):
        state, at = _state(zset, h[1] if h else score, now)
        if record is None or state not in wanted:
            continue
        attempts = delivered.attempts_of(dlv, zset == "unacked")
        m = codec.readable(msg_id, record, shard, attempts, limit=q.limit)
        m.failure = reasons.failure(why)
        found.append(Found(m, state, at))
    if zset == "delayed" and "delayed" not in wanted and live[-1][0] / 1000 > now:
        nxt = None  # read for its due messages only, and the rest are not due
    return found, nxt


def _state(zset: str, score: float, now: float) -> tuple[str, float | None]:
    if zset == "ready":
        return "ready", None
    if zset == "delayed":
        return ("ready", None) if score / 1000 <= now else ("delayed", score / 1000)
    return zset, score / 1000


def _rank_after(key: str, after: Anchor) -> Flow[int]:
    """The rank of the first entry after ``after`` in sorted set ``key``: right after the
    anchor when it is still there, else found by score and, among entries of the same
    score (ordered by member), by a binary search: O(log n) round trips, never a scan."""
    score, member = after
    rank = yield Cmd(("ZRANK", key, member))
    if rank is not None:
        return int(rank) + 1
    low = int((yield Cmd(("ZCOUNT", key, "-inf", f"({_num(score)}"))))
    high = low + int((yield Cmd(("ZCOUNT", key, _num(score), _num(score)))))
    while low < high:
        mid = (low + high) // 2
        got = pairs((yield Cmd(("ZRANGE", key, mid, mid, "WITHSCORES"))))
        if not got:
            break
        here = (float(got[0][1]), _bytes(got[0][0]))
        if here > after:
            high = mid
        else:
            low = mid + 1
    return low


def _num(score: float) -> str:
    return repr(score) if score != math.inf else "+inf"


def _bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()
