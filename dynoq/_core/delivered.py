"""Deliveries (pure: no I/O): the messages of a pop reply, their tokens and their records
read in one loop (the hot path of every delivery: benchmarks/bench_decode.py); the
attempts a delivery state holds (the shard's ``dlv`` hash:
``b"<attempts>|<saved ready score>|<token>"``, lua/lib/delivery.lua)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..errors import RecordError
from ..message import Message
from . import codec
from .calls import text

ALONE = b"\x91"  # a body that starts so is an array of one: a payload alone


def tokens(score: Any, attempts: Iterable[Any], nonce: str) -> list[str]:
    """The delivery token of each message of a pop reply (pop-13.lua, kpop-17.lua, kack's
    take), given the reply's score and each message's attempts: of a first delivery, the
    batch's unack score (lua/lib/delivery.lua; "" on an ordered queue: "<nonce>.1"); of
    any other, "<nonce>.<attempts>"."""
    first = text(score) or f"{nonce}.1"
    return [first if n == 1 else f"{nonce}.{n}" for n in attempts]


def messages(
    ids: Sequence[Any],
    records: Sequence[bytes],
    attempts: Sequence[Any],
    made: Sequence[str],
    shard: int,
    lease: str | None,
    limit: int,
) -> list[Message]:
    """:func:`codec.readable` of each record (an unreadable one in its place, saying
    why), with its id, attempts and token. The common record (due at once, priority 0,
    a payload alone: what most pushes store) is read here, inline: a call of
    ``readable`` costs what the rest of the record does."""
    out: list[Message] = []
    add = out.append
    fast = min(limit, codec.MAX_CONTAINERS)
    readable, read_common, key_header = codec.readable, codec.read_common, codec.key_header
    top = codec.MAX_ATTEMPTS
    for raw, record, n, token in zip(ids, records, attempts, made, strict=True):
        msg_id = raw.decode() if type(raw) is bytes else raw
        parts = record.split(b",", 3)
        # The header as codec.decode's first test has it: due at once, priority 0, the
        # enqueued time in base 36 (below 36^9 ms)
        if len(parts) == 4 and parts[1] == b"0" and parts[2] == b"0":
            enq, body = parts[0], parts[3]
            if len(enq) < 10 and enq.isalnum() and type(n) is int and 0 <= n <= top:
                key = None
                if body[:1] == b"K":  # a message group's record: its key first
                    try:
                        key, body = key_header(body)
                    except RecordError:
                        body = b""  # readable says why
                fields = read_common(body) if body[:1] == ALONE and len(body) <= fast else None
                if fields is not None:
                    at = int(enq, 36) / 1000
                    add(
                        Message(
                            fields[0],
                            msg_id,
                            0.0,
                            0,
                            key,
                            None,
                            None,
                            shard,
                            n,
                            at,
                            at,
                            token,
                            lease,
                        )
                    )
                    continue
        add(readable(msg_id, record, shard, n, token, lease, limit))
    return out


def ack_args(pairs: Sequence[str]) -> list[str | int]:
    """An ack's deliveries (lua/lib/acks.lua) from ``pairs`` (id, token, id, token...):
    the first token once with the ids delivered under it (a pop's first deliveries
    share one), then the other deliveries' pairs."""
    ids, toks = pairs[0::2], pairs[1::2]
    shared = toks[0] if toks else ""
    if toks.count(shared) == len(toks):  # a batch (the hot path: no loop in Python)
        return [shared, len(ids), *ids]
    same: list[str | int] = [i for i, t in zip(ids, toks, strict=True) if t == shared]
    rest = [x for i, t in zip(ids, toks, strict=True) if t != shared for x in (i, t)]
    return [shared, len(same), *same, *rest]


def attempts_of(state: bytes | None, in_flight: bool = False) -> int:
    """The attempts recorded in a delivery state (0 when there is none); of a delivery
    ``in_flight`` with none, 1: a concurrent queue's first delivery writes no state
    (lua/lib/delivery.lua in_flight)."""
    if not state:
        return 1 if in_flight else 0
    head = state.split(b"|", 1)[0]  # as lua/lib/delivery.lua reads it: 0 when not a count
    return int(head) if head.isdigit() and len(head) <= 16 else 0
