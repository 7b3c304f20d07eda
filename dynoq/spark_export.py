"""A read-only scan of a queue's messages, and a Spark DataFrame of it (for audit).

The scan walks each shard's message hash with HSCAN and asks the state sets about each
page of ids (ZMSCORE: one command per set per page), so it claims nothing, runs no
script and holds no large reply. It is not a snapshot: a message that changes state
during the scan is reported in one of its states (or, if it is removed, not at all).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from . import codec
from .connection import translated
from .errors import InvalidArgument
from .queue import Queue

STATES = ("ready", "delayed", "unacked", "dead")
DEFAULT_STATES = ("ready", "delayed", "dead")  # waiting + dead: what an audit wants
PAGE = 1000

# Columns of an exported message (Spark DDL): the payload and headers as JSON text.
SCHEMA = ("id string, state string, shard int, key string, priority int, attempts int, "
          "enqueued_at timestamp, deliver_at timestamp, dead_at timestamp, "
          "payload string, headers string")


def check_states(states: Iterable[str]) -> tuple[str, ...]:
    chosen = tuple(states)
    bad = [s for s in chosen if s not in STATES]
    if bad or not chosen:
        raise InvalidArgument(f"unknown state(s) {bad or chosen}; choose from {STATES}")
    return chosen


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"$base64": base64.b64encode(value).decode()}
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def to_json(value: Any) -> str | None:
    """JSON text of a payload; bytes become {"$base64": "..."}."""
    return None if value is None else json.dumps(value, default=_json_default,
                                                 ensure_ascii=False, sort_keys=True)


def _utc(seconds: float | None) -> dt.datetime | None:
    return None if seconds is None else dt.datetime.fromtimestamp(seconds, dt.timezone.utc)


def scan_shard(q: Queue, shard: int,
               states: Iterable[str] = DEFAULT_STATES) -> Iterator[dict[str, Any]]:
    """Every message of one shard in ``states``, as a dict with the :data:`SCHEMA`
    columns (times as aware UTC datetimes)."""
    wanted = set(check_states(states))
    keys = q.shard_keys(shard)
    sets = {"ready": keys.ready, "delayed": keys.delayed, "unacked": keys.unack,
            "dead": keys.dead}
    seen: set[str] = set()  # HSCAN may return an entry twice while the hash rehashes
    cursor = 0
    with translated():
        while True:
            cursor, page = q.client.redis.hscan(keys.msgs, cursor, count=PAGE)
            fresh = {k.decode(): v for k, v in page.items() if k.decode() not in seen}
            seen.update(fresh)
            if fresh:
                yield from _page(q, shard, fresh, sets, wanted)
            if int(cursor) == 0:
                return


def _page(q: Queue, shard: int, records: Mapping[str, bytes], sets: Mapping[str, str],
          wanted: set[str]) -> Iterator[dict[str, Any]]:
    ids = list(records)
    pipe = q.client.redis.pipeline(transaction=False)
    for key in sets.values():
        pipe.zmscore(key, ids)
    pipe.hmget(q.shard_keys(shard).dlv, ids)
    *scores, dlvs = pipe.execute()
    by_state = dict(zip(sets, scores, strict=True))
    for i, msg_id in enumerate(ids):
        state = next((s for s in STATES if by_state[s][i] is not None), None)
        if state is None or state not in wanted:
            continue
        dlv = dlvs[i]
        attempts = int(dlv.split(b"|", 1)[0] or 0) if dlv else 0
        m = codec.decode(msg_id, records[msg_id], shard=shard, attempts=attempts)
        yield {
            "id": msg_id, "state": state, "shard": shard, "key": m.key,
            "priority": m.priority, "attempts": attempts,
            "enqueued_at": _utc(m.enqueued_at), "deliver_at": _utc(m.deliver_at),
            "dead_at": _utc(by_state["dead"][i] / 1000) if state == "dead" else None,
            "payload": to_json(m.payload), "headers": to_json(m.headers),
        }


def scan(q: Queue, states: Iterable[str] = DEFAULT_STATES) -> Iterator[dict[str, Any]]:
    """Every message of the queue in ``states`` (shard by shard), read-only."""
    chosen = check_states(states)
    for shard in range(q.settings.shards):
        yield from scan_shard(q, shard, chosen)


def queue_dataframe(spark: Any, url: str, queue: str, *,
                    states: Iterable[str] = DEFAULT_STATES, **connect_options: Any) -> Any:
    """A DataFrame (:data:`SCHEMA`) of the queue's messages in ``states``; the executors
    scan the shards in parallel. ``url`` must be reachable from them (not embedded://)."""
    from .spark import _client, check_url

    chosen = check_states(states)
    client = _client(check_url(url), connect_options)
    if queue not in client.queue_names():  # do not create it by looking
        raise InvalidArgument(f"no queue named {queue!r} under prefix {client.prefix!r} "
                              f"at {url}")
    shards = client.queue(queue).settings.shards

    def scan_part(part: Iterable[int]) -> Iterator[dict[str, Any]]:
        q = _client(url, connect_options).queue(queue)
        for shard in part:
            yield from scan_shard(q, shard, chosen)

    slices = max(1, min(shards, spark.sparkContext.defaultParallelism * 2))
    rows = spark.sparkContext.parallelize(range(shards), slices).mapPartitions(
        lambda part: (tuple(r.values()) for r in scan_part(part)))
    return spark.createDataFrame(rows, SCHEMA)
