"""Thread coordination of one consumer: the ordered-shard board and the in-flight permits."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence

from .._core.board import BoardState, DeliveryState, InFlightBatch, Results, begin
from ..message import Message


class ShardBoard:
    """:class:`dynoq._core.board.BoardState` shared by worker threads and the upkeep
    thread; ``claim`` blocks until a shard is free."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._state = BoardState()

    def leased(self) -> set[int]:
        with self._cond:
            return self._state.leased()

    def busy(self) -> set[int]:
        with self._cond:
            return set(self._state.busy)

    def add(self, shard: int) -> None:
        with self._cond:
            self._state.add(shard)
            self._cond.notify_all()

    def drop(self, shard: int) -> None:
        with self._cond:
            self._state.drop(shard)

    def still_mine(self, shard: int) -> bool:
        with self._cond:
            return shard in self._state.held

    def is_retrying(self, shard: int) -> bool:
        with self._cond:
            return shard in self._state.retrying

    def set_retrying(self, shard: int, retrying: bool) -> None:
        with self._cond:
            (self._state.retrying.add if retrying else self._state.retrying.discard)(shard)

    def rebalance(self, target: set[int]) -> list[int]:
        with self._cond:
            return self._state.rebalance(target)

    def claim(self, timeout: float) -> tuple[list[int], bool]:
        """See BoardState.claim; waits up to ``timeout`` seconds for a free shard, then
        ([], False)."""
        with self._cond:
            got = self._state.claim()
            if got is None:
                self._cond.wait(timeout)
                got = self._state.claim()
            return got or ([], False)

    def done(self, shard: int, found: bool | None) -> bool:
        return bool(self.done_all([shard], found))

    def done_all(self, shards: Iterable[int], found: bool | None) -> list[int]:
        """``done`` for several shards at once, so that no other worker claims part of
        them meanwhile (one worker then waits for all); returns the ones to release."""
        with self._cond:
            release = [s for s in shards if self._state.done(s, found)]
            self._cond.notify_all()
            return release

    def wake(self, shards: Iterable[int] | None = None) -> None:
        with self._cond:
            self._state.wake(shards)
            self._cond.notify_all()


class IdleGate:
    """When the queue is empty, one worker waits for messages (blocked on the wake-up
    channel) on behalf of all; the others sleep here until it finds some, so an idle
    consumer costs the server one check per wait, not one per worker."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._watching = False

    def watch(self) -> bool:
        """True: the caller is now the one that waits on the server."""
        with self._cond:
            if self._watching:
                return False
            self._watching = True
            return True

    def done_watching(self, found: bool) -> None:
        with self._cond:
            self._watching = False
            if found:
                self._cond.notify()

    def found(self) -> None:
        """The caller found messages: one sleeping worker comes to look for more (and,
        finding some, calls this in turn), so a burst wakes the workers one round trip
        apart and a trickle wakes one, not every worker for each message."""
        with self._cond:
            self._cond.notify()

    def sleep(self, timeout: float) -> None:
        """Wait until the watcher finds messages (or ``timeout`` seconds)."""
        with self._cond:
            self._cond.wait(timeout)

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()


class InFlight:
    """Flow control: at most ``limit`` messages popped and not yet finished."""

    def __init__(self, limit: int) -> None:
        self._cond = threading.Condition()
        self._free = limit

    def take(self, want: int, timeout: float) -> int:
        """Up to ``want`` permits (0 after ``timeout`` when none is free)."""
        with self._cond:
            if self._free <= 0:
                self._cond.wait(timeout)
            got = min(want, self._free)
            if got > 0:
                self._free -= got
            return max(got, 0)

    def give(self, n: int) -> None:
        with self._cond:
            self._free += n
            self._cond.notify_all()


class Deliveries:
    """:class:`dynoq._core.board.DeliveryState` shared by worker threads and the upkeep."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = DeliveryState()

    def start(
        self, worker: int, msgs: list[Message], shard: int | None = None, permits: int = 0
    ) -> InFlightBatch:
        batch = InFlightBatch(msgs, shard, time.monotonic(), permits)
        with self._lock:
            self._state.start(worker, batch)
        return batch

    def settle(self, worker: int) -> bool:
        with self._lock:
            return self._state.settle(worker)

    def finish(self, worker: int) -> InFlightBatch | None:
        with self._lock:
            return self._state.finish(worker)

    def begin(self, batch: InFlightBatch) -> bool:
        with self._lock:
            return begin(batch, time.monotonic())

    def interrupt(self, msgs: Sequence[Message]) -> None:
        """A thread cannot be cut short: its handler hears the cancel from
        msg.cancelled, msg.progress() and msg.heartbeat()."""

    def to_look(self, now: float, every: float) -> list[Message]:
        with self._lock:
            return self._state.to_look(now, every)

    def slow(self, now: float, older_than: float) -> list[InFlightBatch]:
        with self._lock:
            return self._state.slow(now, older_than)

    def stalled(self, now: float, after: float) -> list[tuple[list[Message], Results]]:
        with self._lock:
            return self._state.stalled(now, after)

    def overdue(
        self, now: float, timeout_of: Callable[[Sequence[Message]], float], *, ordered: bool
    ) -> list[tuple[int, InFlightBatch]]:
        with self._lock:
            return self._state.overdue(now, timeout_of, ordered=ordered)

    def abandon_all(self, keep: int | None = None) -> list[tuple[int, InFlightBatch]]:
        with self._lock:
            return self._state.abandon_all(keep)
