# Generated from dynoq/asyncio/consumer/group.py by scripts/unasync.py: edit that file,
# then run `python scripts/unasync.py` (tests/test_unasync.py fails when this
# is stale; digest aa5aeb7c5c6dbfbb: of the text below, an edit by hand does not match).
"""Consumer-group membership (see _core.group for how a group lives in Redis)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from .._core import group as ops
from ..errors import DynoqError
from ..queue import Queue

log = logging.getLogger("dynoq.consumer")


class Membership:
    """One member's presence in one group of one queue."""

    def __init__(self, queue: Queue, group: str, member: str, ttl: float) -> None:
        self.queue = queue
        self._ops = ops.GroupOps(queue.ops.keys, group, member, ttl)
        self.group = self._ops.group
        self.member = member
        self.channel = self._ops.keys.channel

    def heartbeat(self) -> tuple[bool, list[str]]:
        """Refresh this member; return (membership changed, live members)."""
        return self.queue.backend.run(self._ops.heartbeat())  # type: ignore[no-any-return]

    def leave(self) -> None:
        self.queue.backend.run(self._ops.leave())

    def take(self, count: int, period: float, want: int) -> tuple[int, float]:
        """Up to ``want`` permits of the group's rate limit: (granted, seconds until more
        may be free)."""
        return self.queue.backend.run(  # type: ignore[no-any-return]
            self._ops.take(count, period, want)
        )

    def notify(self) -> None:
        """Ask every member to rebalance now (e.g. a shard's lease was released)."""
        self.queue.backend.run(self._ops.notify())

    def record(self, members: Sequence[str], shards: Sequence[int]) -> None:
        """Add this member's new assignment to the group's rebalance history. Best effort:
        a history that cannot be written (a server away, an ACL from before it existed)
        must not stop the rebalance."""
        try:
            self.queue.backend.run(self._ops.record(members, shards))
        except DynoqError as exc:
            log.debug("dynoq: rebalance history of %r not recorded: %s", self.group, exc)


def members(queue: Queue, group: str) -> list[str]:
    """The members of a group as last recorded (stale ones included until reaped)."""
    return queue.backend.run(ops.members(queue.ops.keys, group))  # type: ignore[no-any-return]


def reap(queue: Queue) -> int:
    """Drop the members whose heartbeat ran out, in every group of ``queue``."""
    return queue.backend.drive(ops.reap(queue.ops.keys))
