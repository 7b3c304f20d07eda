"""What many tests need, written once: waiting for a condition, deleting a prefix's keys,
and reaching the layers under the public API (a shard's keys, a leased pop)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import redis
import redis.cluster

import dynoq
from dynoq._core.keys import ShardKeys

# Consumer options that make leases, rebalances and idle waits quick in tests.
FAST = {"lease_ttl": 2.0, "rebalance_interval": 5.0, "idle_wait": 0.2}


def wait_for(cond: Callable[[], Any], timeout: float = 15.0, what: str = "condition") -> None:
    """Poll ``cond`` until it is true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def delete_prefix(url: str, prefix: str) -> None:
    """Delete every key under ``prefix`` on the server at ``url`` (a no-op for memory://,
    whose data goes with the process)."""
    if url.startswith("memory://"):
        return
    if url.startswith("redis+cluster://"):
        from dynoq.backend.cluster import parse_nodes

        rc = redis.cluster.RedisCluster(startup_nodes=parse_nodes(url))
        try:
            for node in rc.get_primaries():
                _delete(rc.get_redis_connection(node), prefix, one_by_one=True)
        finally:
            rc.close()
        return
    r = redis.Redis.from_url(url)
    try:
        _delete(r, prefix)
    finally:
        r.close()


def _delete(r: Any, prefix: str, *, one_by_one: bool = False) -> None:
    keys = list(r.scan_iter(match=f"{prefix}:*", count=1000))
    if one_by_one:  # a cluster node's keys span many slots: one DEL per key
        pipe = r.pipeline(transaction=False)
        for key in keys:
            pipe.delete(key)
        pipe.execute()
        return
    for i in range(0, len(keys), 500):
        r.delete(*keys[i:i + 500])


def shard_keys(q: dynoq.Queue, shard: int) -> ShardKeys:
    return q.ops.shard_keys[shard]


def pop_leased(q: dynoq.Queue, count: int = 1, *, lease: str,
               shards: list[int] | None = None) -> list[dynoq.Message]:
    """A pop as a lease holder does it (the consumer's way in)."""
    return q.backend.drive(q.ops.pop(count, shards=shards, lease=lease))


def dead_letter(q: dynoq.Queue, msg: dynoq.Message) -> bool:
    """Dead-letter a delivery now (what a handler's DeadLetter does)."""
    return q.backend.drive(q.ops.nack(msg, mode="dead"))


def requeue_shard(q: dynoq.Queue, shard: int, *, force: bool = False,
                  lease: str = "") -> int:
    return sum(q.backend.drive(q.ops.requeue(shard, force=force, lease=lease)))
