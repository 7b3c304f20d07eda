"""Task coordination of one consumer: the ordered-shard board and the in-flight permits."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Iterable

from ..._core.board import BoardState, DeliveryState
from ..events import wait_event

# The batches in flight: the core's state as it is (dynoq.consumer.board's Deliveries puts
# it behind a lock for the thread consumer; tasks change it between awaits).
Deliveries = DeliveryState


class ShardBoard:
    """:class:`dynoq._core.board.BoardState` for worker tasks: ``claim`` waits until a
    shard is free. One event loop: no lock, only a condition to wait on."""

    def __init__(self) -> None:
        self.state = BoardState()
        self._changed: asyncio.Event | None = None

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()

    def leased(self) -> set[int]:
        return self.state.leased()

    def busy(self) -> set[int]:
        return set(self.state.busy)

    def add(self, shard: int) -> None:
        self.state.add(shard)
        self._notify()

    def drop(self, shard: int) -> None:
        self.state.drop(shard)

    def rebalance(self, target: set[int]) -> list[int]:
        return self.state.rebalance(target)

    def still_mine(self, shard: int) -> bool:
        return shard in self.state.held

    def is_retrying(self, shard: int) -> bool:
        return shard in self.state.retrying

    def set_retrying(self, shard: int, retrying: bool) -> None:
        (self.state.retrying.add if retrying else self.state.retrying.discard)(shard)

    async def claim(self, timeout: float) -> tuple[list[int], bool]:
        """See BoardState.claim; waits up to ``timeout`` seconds for a free shard, then
        ([], False)."""
        got = self.state.claim()
        if got is None:
            if self._changed is None:
                self._changed = asyncio.Event()
            self._changed.clear()
            await wait_event(self._changed, timeout)
            got = self.state.claim()
        return got or ([], False)

    def done(self, shard: int, found: bool | None) -> bool:
        return bool(self.done_all([shard], found))

    def done_all(self, shards: Iterable[int], found: bool | None) -> list[int]:
        """``done`` for several shards; returns the ones to release (see the thread
        consumer's board: one worker then waits for all)."""
        release = [s for s in shards if self.state.done(s, found)]
        self._notify()
        return release

    def wake(self, shards: Iterable[int] | None = None) -> None:
        self.state.wake(shards)
        self._notify()


class IdleGate:
    """When the queue is empty, one worker task waits for messages (blocked on the
    wake-up channel) on behalf of all; the others sleep here until it finds some (see the
    thread consumer's IdleGate)."""

    def __init__(self) -> None:
        self._watching = False
        self._sleepers: collections.deque[asyncio.Future[None]] = collections.deque()

    def watch(self) -> bool:
        """True: the caller is now the one that waits on the server."""
        if self._watching:
            return False
        self._watching = True
        return True

    def done_watching(self, found: bool) -> None:
        self._watching = False
        if found:
            self.found()

    async def sleep(self, timeout: float) -> None:
        """Wait until a worker finds messages (or ``timeout`` seconds)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append(fut)
        try:
            await asyncio.wait([fut], timeout=timeout)
        finally:
            if not fut.done():
                fut.cancel()
                self._sleepers.remove(fut)

    def found(self) -> None:
        """The caller found messages: one sleeping worker comes to look for more (and,
        finding some, calls this in turn): see the thread consumer's IdleGate.found."""
        while self._sleepers:
            fut = self._sleepers.popleft()
            if not fut.done():
                fut.set_result(None)
                return

    def wake(self) -> None:
        while self._sleepers:  # every sleeper, one by one
            self.found()


class InFlight:
    """Flow control: at most ``limit`` messages popped and not yet finished."""

    def __init__(self, limit: int) -> None:
        self._free = limit
        self._freed: asyncio.Event | None = None

    async def take(self, want: int, timeout: float) -> int:
        """Up to ``want`` permits (0 after ``timeout`` when none is free)."""
        if self._free <= 0:
            if self._freed is None:
                self._freed = asyncio.Event()
            self._freed.clear()
            await wait_event(self._freed, timeout)
        got = min(want, self._free)
        if got > 0:
            self._free -= got
        return max(got, 0)

    def give(self, n: int) -> None:
        self._free += n
        if self._freed is not None:
            self._freed.set()
