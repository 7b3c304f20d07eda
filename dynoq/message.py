"""Messages and statistics as the user sees them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Message:
    """A message: what you send (first six fields) and, once popped, how it was delivered.

    ``token`` and ``lease`` are opaque: they tie an ack, nack or extend to this one
    delivery, so a stale ack cannot remove a newer delivery.
    """

    payload: Any
    id: str | None = None
    delay: float = 0.0
    priority: int = 0
    key: str | None = None
    headers: dict[str, Any] | None = None
    shard: int | None = field(default=None, compare=False)
    attempts: int = field(default=0, compare=False)
    deliver_at: float | None = field(default=None, compare=False)
    enqueued_at: float | None = field(default=None, compare=False)
    token: str | None = field(default=None, repr=False, compare=False)
    lease: str | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class ShardStats:
    shard: int
    ready: int
    delayed: int
    unacked: int
    dead: int
    oldest_ready_at: float | None  # enqueue/due time of the oldest waiting message


@dataclass(frozen=True)
class QueueStats:
    """Counts of one queue, summed and per shard."""

    queue: str
    shards: tuple[ShardStats, ...]

    @property
    def ready(self) -> int:
        return sum(s.ready for s in self.shards)

    @property
    def delayed(self) -> int:
        return sum(s.delayed for s in self.shards)

    @property
    def unacked(self) -> int:
        return sum(s.unacked for s in self.shards)

    @property
    def dead(self) -> int:
        return sum(s.dead for s in self.shards)

    @property
    def size(self) -> int:
        """Waiting messages (ready + delayed), as ``Queue.size()``."""
        return self.ready + self.delayed
