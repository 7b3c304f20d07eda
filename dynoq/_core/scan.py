"""A read-only walk over a queue's messages (for exports and audits; pure: no I/O).

Each page walks a shard's message hash with HSCAN and asks the state sets about the page's
ids (one ZMSCORE per set, one HMGET of delivery states), so it claims nothing, runs no
script and holds no large reply. It is not a snapshot: a message that changes state
during the walk is reported in one of its states (or, if it is removed, not at all).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import InvalidArgument
from ..message import Message
from . import codec
from .calls import Batch, Cmd, Flow
from .ops import QueueOps

STATES = ("ready", "delayed", "unacked", "dead")
DEFAULT_STATES = ("ready", "delayed", "dead")  # waiting + dead: what an audit wants
PAGE = 1000


def check_states(states: Iterable[str]) -> tuple[str, ...]:
    chosen = tuple(states)
    bad = [s for s in chosen if s not in STATES]
    if bad or not chosen:
        raise InvalidArgument(f"unknown state(s) {bad or list(chosen)}; choose from {STATES}")
    return chosen


@dataclass(frozen=True)
class Found:
    """One message met by a scan."""

    message: Message
    state: str
    dead_at: float | None  # seconds, for dead letters


def scan_page(q: QueueOps, shard: int, cursor: int,
              states: Iterable[str] = DEFAULT_STATES) -> Flow[tuple[int, list[Found]]]:
    """One page of a shard's messages in ``states``; returns (next cursor, found), the
    walk being over when the cursor is 0. A page may repeat an id of an earlier one (HSCAN
    may, while the hash rehashes): callers that care drop repeats."""
    wanted = set(check_states(states))
    keys = q.shard_keys[shard]
    # A walk starts by checking the shard is still the queue's (QueueGone if not).
    checks = q.epoch_checks([shard], f"a scan of {q.name!r}") if cursor == 0 else []
    *_, (cursor, page) = yield Batch([*checks, Cmd(("HSCAN", keys.msgs, cursor, "COUNT",
                                                     PAGE))])
    records = {(k.decode() if isinstance(k, bytes) else k): v for k, v in page.items()}
    if not records:
        return int(cursor), []
    ids = list(records)
    sets = (keys.ready, keys.delayed, keys.unack, keys.dead)
    *scores, dlvs = yield Batch([*(Cmd(("ZMSCORE", key, *ids)) for key in sets),
                                 Cmd(("HMGET", keys.dlv, *ids))])
    found = []
    for i, msg_id in enumerate(ids):
        state = next((s for s, col in zip(STATES, scores, strict=True) if col[i] is not None),
                     None)
        if state is None or state not in wanted:
            continue
        m = codec.decode(msg_id, records[msg_id], shard=shard,
                         attempts=codec.attempts_of(dlvs[i]))
        found.append(Found(m, state, scores[3][i] / 1000 if state == "dead" else None))
    return int(cursor), found
