# Generated from dynoq/asyncio/consumer/lease.py by scripts/unasync.py: edit that file,
# then run `python scripts/unasync.py` (tests/test_unasync.py fails when this
# is stale; digest fac546f3de6941c6: of the text below, an edit by hand does not match).
"""Shard leases of an ordered-queue consumer (redis-py's Lock model; see _core.group)."""

from __future__ import annotations

import time
from collections.abc import Iterable

from .._core.group import LeaseBook, LeaseOps
from ..events import new_guard
from ..queue import Queue


class Leases:
    """One consumer's leases: one token for all its shards, and what it knows of each
    (its fencing number, the latest moment it surely still holds it)."""

    def __init__(self, queue: Queue, token: str, ttl: float) -> None:
        self.queue = queue
        self.token = token
        self._ops = LeaseOps(queue.ops, token, ttl)
        self._book = LeaseBook(ttl)
        # The sync twin's workers, upkeep and rebalance threads share the book; tasks
        # cannot interleave inside a block without an await, so they need no lock.
        self._guard = new_guard()

    def acquire(self, shard: int) -> float:
        """Try to take ``shard``: 0.0 when taken (the previous holder's in-flight messages
        are back at its head), else seconds until its lease may be free."""
        sent = time.monotonic()
        wait, fence = self.queue.backend.drive(self._ops.acquire(shard))
        if wait == 0.0:
            with self._guard:
                self._book.taken(shard, fence, sent)
        return float(wait)

    def renew(self, shards: Iterable[int]) -> set[int]:
        """Extend the leases on ``shards``, each in the tenure it was taken in; return
        the ones no longer held (gone, or taken again since: that tenure is over)."""
        with self._guard:
            fences = self._book.tenures(shards)
        if not fences:
            return set()
        sent = time.monotonic()
        lost: set[int] = self.queue.backend.run(self._ops.renew(fences))
        with self._guard:
            return self._book.renewed(fences, lost, sent)

    def release(self, shard: int) -> bool:
        with self._guard:
            fence = self._book.tenures([shard])[shard]
            self._book.forget(shard)
        return bool(self.queue.backend.run(self._ops.release(shard, fence)))

    def left(self, shard: int, fence: int | None = None) -> float:
        """Seconds the lease on ``shard`` surely has left (0 when not held, or not in the
        tenure ``fence``: LeaseBook.left)."""
        with self._guard:
            return self._book.left(shard, time.monotonic(), fence)

    def tenures(self, shards: Iterable[int]) -> dict[int, int | None]:
        """The fencing number each of ``shards`` is held in (None: not held)."""
        with self._guard:
            return self._book.tenures(shards)

    def ended(self, shard: int, tenure: int | None) -> bool:
        """See LeaseBook.ended."""
        with self._guard:
            return self._book.ended(shard, tenure)

    def values(self, tenures: dict[int, int | None]) -> dict[int, str]:
        """What a pop, ack or nack shows for each shard: its lease's value in that tenure."""
        return self._ops.values(tenures)
