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
import json
from collections.abc import Iterable, Iterator
from typing import Any

from .._core.jsontext import json_default
from .._core.jsontext import to_json as _json_text
from .._core.scan import DEFAULT_STATES, STATES, Found, check_states, walk_page, walk_sets
from ..queue import Queue

# Columns of an exported message (Spark DDL): the payload and headers as JSON text.
SCHEMA = (
    "id string, state string, shard int, key string, priority int, attempts int, "
    "enqueued_at timestamp, deliver_at timestamp, dead_at timestamp, "
    "payload string, headers string, visibility_deadline timestamp, "
    "error_type string, error string"
)
COLUMNS = tuple(c.split()[0] for c in SCHEMA.split(", "))
TIMES = ("enqueued_at", "deliver_at", "dead_at", "visibility_deadline")
_JSON = json.JSONEncoder(default=json_default, ensure_ascii=False, sort_keys=True)


def to_json(value: Any) -> str | None:
    """JSON text of a payload (keys sorted); bytes become {"$base64": "..."} (see
    :func:`dynoq._core.jsontext.to_json`: one encoder made once here, for the hot path)."""
    if value is None:
        return None
    try:
        return _JSON.encode(value)
    except (TypeError, RecursionError):
        # a bytes key, or keys of mixed types: jsontext's second pass; a payload nested
        # deeper than the encoder goes (msgpack stores ~1,000 levels): jsontext cuts it
        return _json_text(value, sort_keys=True)


def pages(q: Queue, shard: int, states: Iterable[str] = DEFAULT_STATES) -> Iterator[list[Found]]:
    """The messages of one shard in ``states``, a page at a time (one page in memory)."""
    chosen = check_states(states)
    for zset in walk_sets(chosen):
        after = None
        while True:
            found, after = q.backend.drive(walk_page(q.ops, shard, zset, after, chosen))
            if found:
                yield found
            if after is None:
                break


def columns(found: list[Found]) -> dict[str, list[Any]]:
    """A page as columns (:data:`COLUMNS`), times in microseconds since the epoch (UTC),
    for Arrow."""
    if not found:
        return {c: [] for c in COLUMNS}
    return dict(zip(COLUMNS, map(list, zip(*map(_values, found), strict=True)), strict=True))


def _values(f: Found) -> tuple[Any, ...]:
    """One message's values, in :data:`COLUMNS` order (times in microseconds)."""
    m = f.message
    failure = m.failure
    at = None if f.at is None else round(f.at * 1_000_000)
    return (
        m.id,
        f.state,
        m.shard,
        m.key,
        m.priority,
        m.attempts,
        _us(m.enqueued_at),
        _us(m.deliver_at),
        at if f.state == "dead" else None,
        to_json(m.payload),
        None if m.headers is None else to_json(m.headers),
        at if f.state == "unacked" else None,
        None if failure is None else failure.error_type,
        None if failure is None else failure.error,
    )


def _us(seconds: float | None) -> int | None:
    return None if seconds is None else round(seconds * 1_000_000)


def _utc(us: int | None) -> dt.datetime | None:
    return None if us is None else EPOCH + dt.timedelta(microseconds=us)


EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def arrow_schema(schema: Any) -> Any:
    """The Arrow schema Spark expects record batches of ``schema`` in (its own
    conversion: string/large_string and timestamp units follow its settings)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        return to_arrow_schema(schema, timezone="UTC")
    except TypeError:  # pyspark versions without the timezone argument
        return to_arrow_schema(schema)


def scan_shard(
    q: Queue, shard: int, states: Iterable[str] = DEFAULT_STATES
) -> Iterator[dict[str, Any]]:
    """Every message of one shard in ``states``, as a dict with the :data:`SCHEMA`
    columns (times as aware UTC datetimes), a page at a time."""
    for found in pages(q, shard, states):
        for f in found:
            yield {
                name: _utc(value) if name in TIMES else value
                for name, value in zip(COLUMNS, _values(f), strict=True)
            }


def scan(q: Queue, states: Iterable[str] = DEFAULT_STATES) -> Iterator[dict[str, Any]]:
    """Every message of the queue in ``states`` (shard by shard), read-only."""
    chosen = check_states(states)
    for shard in range(q.settings.shards):
        yield from scan_shard(q, shard, chosen)


__all__ = [
    "COLUMNS",
    "DEFAULT_STATES",
    "SCHEMA",
    "STATES",
    "arrow_schema",
    "columns",
    "pages",
    "scan",
    "scan_shard",
    "to_json",
]
