"""A read-only scan of a queue's messages (for audits and ``spark.read.format("dynoq")``).

The scan walks each shard's state sets in order, a page at a time (see
:mod:`dynoq._core.scan`): it claims nothing, runs no script, and holds one page, whatever
the shard's size. It is not a snapshot: a message that stays put is read exactly once,
one that changes state during the scan may be read in either state, both or neither.

Columns (:data:`SCHEMA`): ``id``, ``state`` (ready, delayed, unacked, dead), ``shard``,
``key``, ``priority``, ``attempts``, ``enqueued_at``, ``deliver_at`` (the due time it
was pushed with), ``dead_at``, ``payload`` and ``headers`` (JSON text; bytes as
``{"$base64": ...}``), ``visibility_deadline`` (an in-flight message's: when it is
delivered again unless acked), ``error_type`` and ``error`` (why it last failed: set for
dead letters, and for messages waiting for a retry). Times are UTC timestamps.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator
from typing import Any

from .._core.codec import to_json as _json_text
from .._core.scan import DEFAULT_STATES, STATES, Found, check_states, walk_page, walk_sets
from ..queue import Queue

# Columns of an exported message (Spark DDL): the payload and headers as JSON text.
SCHEMA = ("id string, state string, shard int, key string, priority int, attempts int, "
          "enqueued_at timestamp, deliver_at timestamp, dead_at timestamp, "
          "payload string, headers string, visibility_deadline timestamp, "
          "error_type string, error string")
COLUMNS = tuple(c.split()[0] for c in SCHEMA.split(", "))


def to_json(value: Any) -> str | None:
    """JSON text of a payload (keys sorted); bytes become {"$base64": "..."}."""
    return None if value is None else _json_text(value, sort_keys=True)


def _utc(seconds: float | None) -> dt.datetime | None:
    return None if seconds is None else dt.datetime.fromtimestamp(seconds, dt.timezone.utc)


def scan_shard(q: Queue, shard: int,
               states: Iterable[str] = DEFAULT_STATES) -> Iterator[dict[str, Any]]:
    """Every message of one shard in ``states``, as a dict with the :data:`SCHEMA`
    columns (times as aware UTC datetimes), a page at a time."""
    chosen = check_states(states)
    for zset in walk_sets(chosen):
        after = None
        while True:
            found, after = q.backend.drive(walk_page(q.ops, shard, zset, after, chosen))
            for f in found:
                yield _row(f)
            if after is None:
                break


def _row(f: Found) -> dict[str, Any]:
    m = f.message
    failure = m.failure
    return {
        "id": m.id, "state": f.state, "shard": m.shard, "key": m.key,
        "priority": m.priority, "attempts": m.attempts,
        "enqueued_at": _utc(m.enqueued_at), "deliver_at": _utc(m.deliver_at),
        "dead_at": _utc(f.at if f.state == "dead" else None),
        "payload": to_json(m.payload), "headers": to_json(m.headers),
        "visibility_deadline": _utc(f.at if f.state == "unacked" else None),
        "error_type": None if failure is None else failure.error_type,
        "error": None if failure is None else failure.error,
    }


def scan(q: Queue, states: Iterable[str] = DEFAULT_STATES) -> Iterator[dict[str, Any]]:
    """Every message of the queue in ``states`` (shard by shard), read-only."""
    chosen = check_states(states)
    for shard in range(q.settings.shards):
        yield from scan_shard(q, shard, chosen)


__all__ = ["COLUMNS", "DEFAULT_STATES", "SCHEMA", "STATES", "scan", "scan_shard", "to_json"]
