"""Shard leases of an ordered-queue consumer (the redis-py ``Lock`` model).

Acquire with ``SET NX PX``; renew and release with compare-the-token scripts. One token
per consumer run: the core scripts fence every pop, ack, nack and extend with it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from .connection import translate
from .errors import LeaseLost

if TYPE_CHECKING:
    from .queue import Queue


class Leases:
    def __init__(self, queue: Queue, token: str, ttl: float) -> None:
        self.queue = queue
        self.token = token
        self.ttl_ms = max(int(ttl * 1000), 1)
        self._redis = queue.client.redis
        self._scripts = queue.client.scripts

    @translate
    def acquire(self, shard: int) -> float:
        """Try to take ``shard``: 0.0 when taken, else seconds until its lease may be free.

        On taking it, the previous holder's in-flight messages go back to the head of the
        shard in order (its later acks are fenced off by the new token)."""
        key = self.queue.shard_keys(shard).lease
        if not self._redis.set(key, self.token, nx=True, px=self.ttl_ms):
            pttl = int(self._redis.pttl(key))
            return pttl / 1000 if pttl > 0 else 0.001
        try:
            self.queue.requeue_shard(shard, force=True, lease=self.token)
        except LeaseLost:  # expired at once (a very short ttl and a stall): try again later
            return 0.001
        return 0.0

    @translate
    def renew(self, shards: Iterable[int]) -> set[int]:
        """Extend the leases on ``shards``; return the ones no longer held."""
        shards = list(shards)
        if not shards:
            return set()
        pipe = self._redis.pipeline(transaction=False)
        for s in shards:
            self._scripts.run("lease-renew", self.queue.shard_keys(s),
                              [self.token, self.ttl_ms], client=pipe)
        return {s for s, ok in zip(shards, pipe.execute(), strict=True) if not int(ok)}

    @translate
    def release(self, shard: int) -> bool:
        return bool(int(self._scripts.run("lease-release", self.queue.shard_keys(shard),
                                          [self.token])))
