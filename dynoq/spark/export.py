"""A read-only scan of a queue's messages (for audits and ``spark.read.format("dynoq")``).

The scan walks each shard's message hash with HSCAN and asks the state sets about each
page of ids (ZMSCORE: one command per set per page), so it claims nothing, runs no
script and holds no large reply. It is not a snapshot: a message that changes state
during the scan is reported in one of its states (or, if it is removed, not at all).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator
from typing import Any

from .._core.codec import to_json as _json_text
from .._core.scan import DEFAULT_STATES, STATES, Found, check_states, scan_page
from ..queue import Queue

# Columns of an exported message (Spark DDL): the payload and headers as JSON text.
SCHEMA = ("id string, state string, shard int, key string, priority int, attempts int, "
          "enqueued_at timestamp, deliver_at timestamp, dead_at timestamp, "
          "payload string, headers string")
COLUMNS = tuple(c.split()[0] for c in SCHEMA.split(", "))


def to_json(value: Any) -> str | None:
    """JSON text of a payload (keys sorted); bytes become {"$base64": "..."}."""
    return None if value is None else _json_text(value, sort_keys=True)


def _utc(seconds: float | None) -> dt.datetime | None:
    return None if seconds is None else dt.datetime.fromtimestamp(seconds, dt.timezone.utc)


def scan_shard(q: Queue, shard: int,
               states: Iterable[str] = DEFAULT_STATES) -> Iterator[dict[str, Any]]:
    """Every message of one shard in ``states``, as a dict with the :data:`SCHEMA`
    columns (times as aware UTC datetimes)."""
    chosen = check_states(states)
    seen: set[str] = set()  # HSCAN may return an entry twice while the hash rehashes
    cursor = 0
    while True:
        cursor, found = q.backend.drive(scan_page(q.ops, shard, cursor, chosen))
        for f in found:
            if f.message.id not in seen:
                seen.add(f.message.id or "")
                yield _row(f)
        if cursor == 0:
            return


def _row(f: Found) -> dict[str, Any]:
    m = f.message
    return {
        "id": m.id, "state": f.state, "shard": m.shard, "key": m.key,
        "priority": m.priority, "attempts": m.attempts,
        "enqueued_at": _utc(m.enqueued_at), "deliver_at": _utc(m.deliver_at),
        "dead_at": _utc(f.dead_at), "payload": to_json(m.payload),
        "headers": to_json(m.headers),
    }


def scan(q: Queue, states: Iterable[str] = DEFAULT_STATES) -> Iterator[dict[str, Any]]:
    """Every message of the queue in ``states`` (shard by shard), read-only."""
    chosen = check_states(states)
    for shard in range(q.settings.shards):
        yield from scan_shard(q, shard, chosen)


__all__ = ["COLUMNS", "DEFAULT_STATES", "SCHEMA", "STATES", "scan", "scan_shard", "to_json"]
