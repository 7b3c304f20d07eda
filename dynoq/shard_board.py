"""Which shards a consumer's workers may take now (pure thread coordination, no I/O).

Ordered queues: a shard is processed by one worker at a time. A worker *claims* a held
shard that may have messages; when every free shard was found empty, one worker claims
them all and blocks in ``pop(wait=...)`` on their behalf, so idle workers do not poll.
A shard that moved away to another member is released only once its worker is done.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence


def pop_order(preferred: Sequence[int], shards: int, turn: int) -> list[int]:
    """Shards to pop from: the consumer's own first, then every other (Dyno's local-shard
    preference), each part rotated by ``turn`` so that no shard starves."""
    mine = list(preferred)
    mine_set = set(mine)
    rest = [s for s in range(shards) if s not in mine_set]
    if mine:
        k = turn % len(mine)
        mine = mine[k:] + mine[:k]
    if rest:
        k = turn % len(rest)
        rest = rest[k:] + rest[:k]
    return mine + rest


class ShardBoard:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._held: set[int] = set()       # leased and open to workers
        self._busy: set[int] = set()       # claimed by a worker
        self._empty: set[int] = set()      # the last pop found nothing deliverable
        self._releasing: set[int] = set()  # moved away: release once its worker is done
        self._turn = 0

    def held(self) -> set[int]:
        """Shards whose lease this consumer holds (including ones being handed over)."""
        with self._cond:
            return self._held | self._releasing

    def add(self, shard: int) -> None:
        with self._cond:
            self._releasing.discard(shard)
            self._held.add(shard)
            self._empty.discard(shard)
            self._cond.notify_all()

    def drop(self, shard: int) -> None:
        """The lease is gone (expired or taken over): stop handing the shard out."""
        with self._cond:
            self._held.discard(shard)
            self._releasing.discard(shard)

    def move_away(self, shard: int) -> bool:
        """Stop handing ``shard`` out; True if it may be released now (no worker on it)."""
        with self._cond:
            self._held.discard(shard)
            if shard in self._busy:
                self._releasing.add(shard)
                return False
            self._releasing.discard(shard)
            return True

    def claim(self, timeout: float) -> tuple[list[int], bool]:
        """(shards, wait): one shard that may have messages, or every free shard when all
        of them were found empty (wait=True: block on their behalf); ([], False) after
        ``timeout`` when no shard is free."""
        with self._cond:
            for attempt in (0, 1):
                free = sorted(self._held - self._busy)
                if free:
                    self._turn += 1
                    k = self._turn % len(free)
                    free = free[k:] + free[:k]
                    ready = [s for s in free if s not in self._empty]
                    picked = ready[:1] or free
                    self._busy.update(picked)
                    return picked, not ready
                if attempt == 0:
                    self._cond.wait(timeout)
            return [], False

    def still_mine(self, shard: int) -> bool:
        with self._cond:
            return shard in self._held

    def done(self, shard: int, found: bool | None) -> bool:
        """A worker is finished with ``shard``; ``found``: whether it had messages (None:
        unknown). True if the shard was moved away and its lease should be released now."""
        with self._cond:
            self._busy.discard(shard)
            if found is False:
                self._empty.add(shard)
            else:
                self._empty.discard(shard)
            self._cond.notify_all()
            if shard in self._releasing:
                self._releasing.discard(shard)
                return True
            return False

    def wake(self, shards: Iterable[int] | None = None) -> None:
        """Something may have arrived: try these (default: all) shards again."""
        with self._cond:
            if shards is None:
                self._empty.clear()
            else:
                self._empty.difference_update(shards)
            self._cond.notify_all()

    def busy(self) -> set[int]:
        with self._cond:
            return set(self._busy)

    def reclaim(self, shard: int) -> bool:
        """Keep a shard that was being handed over (it came back); True if it was."""
        with self._cond:
            if shard in self._releasing:
                self._releasing.discard(shard)
                self._held.add(shard)
                return True
            return False


class InFlight:
    """Flow control: at most ``limit`` messages popped and not yet finished per consumer."""

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
