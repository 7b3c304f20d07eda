"""A queue for asyncio: every operation of :class:`dynoq.Queue`, awaited.

A shell like the sync one: the decisions are in :class:`dynoq._core.ops.QueueOps`, and
each method only awaits them on an :class:`~dynoq.asyncio.backend.AsyncBackend`. The
arguments, results and errors of each method are those of the same method of
:class:`dynoq.Queue`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .. import tracing
from .._core.ops import QueueOps
from .._core.schedules import Schedule, ScheduleOps
from .._core.validate import check_items
from ..errors import InvalidArgument
from ..message import Message, QueueStats
from ..settings import QueueSettings
from .backend import AsyncBackend


class Queue:
    """A delay (or ordered) queue, for asyncio. Get one with ``await client.queue(...)``.
    Use it from the event loop its client runs on."""

    def __init__(self, backend: AsyncBackend, ops: QueueOps) -> None:
        self.backend = backend
        self.ops = ops
        self.name = ops.name
        self.settings: QueueSettings = ops.settings

    def __repr__(self) -> str:
        return f"<dynoq.asyncio.Queue {self.name!r} {self.settings}>"

    # -- producing ---------------------------------------------------------------------------

    async def push(self, payload: Any, *, id: str | None = None, delay: float = 0.0,
                   priority: int = 0, key: str | None = None,
                   headers: dict[str, Any] | None = None) -> str:
        """Add a message; return its id (see :meth:`dynoq.Queue.push`)."""
        with tracing.span("push", self.name, ids=[id] if id else None, producer=True):
            out = self.ops.prepare(Message(payload, id=id, delay=delay, priority=priority,
                                           key=key, headers=tracing.inject(headers)))
            await self.backend.run(self.ops.push([out]))
        return out.id

    async def ensure(self, payload: Any, *, id: str, delay: float = 0.0, priority: int = 0,
                     key: str | None = None, headers: dict[str, Any] | None = None) -> bool:
        """Push unless the id exists; True if pushed (see :meth:`dynoq.Queue.ensure`)."""
        if id is None:
            raise InvalidArgument("ensure() needs an id: it pushes only if that id is absent")
        out = self.ops.prepare(Message(payload, id=id, delay=delay, priority=priority,
                                       key=key, headers=headers))
        return bool(await self.backend.run(self.ops.push([out], mode="ensure")))

    async def push_many(self, items: Iterable[Any]) -> list[str]:
        """Push payloads or Messages; their ids (see :meth:`dynoq.Queue.push_many`)."""
        with tracing.span("push", self.name, producer=True):
            outs = [self.ops.prepare(tracing.traced(item))
                    for item in check_items(items, "push_many()")]
            ids = self.ops.unique(outs)
            if outs:
                await self.backend.run(self.ops.push(outs))
        return ids

    async def ensure_many(self, items: Iterable[Message]) -> int:
        """Push-if-absent for many Messages (see :meth:`dynoq.Queue.ensure_many`)."""
        outs = self.ops.prepare_ensure(items)
        return int(await self.backend.run(self.ops.push(outs, mode="ensure"))) if outs else 0

    # -- consuming ---------------------------------------------------------------------------

    async def pop(self, count: int = 1, *, wait: float = 0.0,
                  visibility: float | None = None) -> list[Message]:
        """Claim up to ``count`` due messages, waiting up to ``wait`` seconds for the first
        (woken by pushes, never polling; see :meth:`dynoq.Queue.pop`). Cancelling a task
        that waits here claims nothing."""
        with tracing.span("receive", self.name):
            return await self.backend.drive(self.ops.pop(count, wait=wait,
                                                         visibility=visibility))

    async def ack(self, msg: Message | str) -> bool:
        """Finish a delivery (see :meth:`dynoq.Queue.ack`)."""
        return await self.ack_many([msg]) == 1

    async def ack_many(self, msgs: Iterable[Message | str]) -> int:
        """Ack many deliveries in one round trip (see :meth:`dynoq.Queue.ack_many`)."""
        with tracing.span("ack", self.name):
            return await self.backend.drive(self.ops.ack_many(msgs))

    async def nack(self, msg: Message | str, *, delay: float = 0.0) -> bool:
        """Give a delivery back now or later (see :meth:`dynoq.Queue.nack`)."""
        return await self.backend.drive(self.ops.nack(msg, delay=delay))

    async def extend(self, msg: Message | str, timeout: float) -> bool:
        """New visibility deadline now + ``timeout`` (see :meth:`dynoq.Queue.extend`)."""
        return await self.backend.drive(self.ops.extend(msg, timeout))

    # -- by id -------------------------------------------------------------------------------

    async def reschedule(self, id: str, *, delay: float) -> bool:
        """Move a waiting message's due time (see :meth:`dynoq.Queue.reschedule`)."""
        return await self.backend.drive(self.ops.reschedule(id, delay=delay))

    async def remove(self, id: str) -> bool:
        """Delete a message wherever it is; False if unknown."""
        return await self.backend.drive(self.ops.remove(id))

    async def get(self, id: str) -> Message | None:
        """The stored message with its attempts so far, or None."""
        return await self.backend.drive(self.ops.get(id))

    async def contains(self, id: str) -> bool:
        """Whether a message with this id is stored (waiting, in flight or dead)."""
        return await self.backend.drive(self.ops.contains(id))

    def shard_for(self, routing: str) -> int:
        """The shard of an id (concurrent queues) or ordering key (ordered queues)."""
        return self.ops.shard_for(routing)

    # -- whole queue -------------------------------------------------------------------------

    async def peek(self, count: int = 10) -> list[Message]:
        """The next deliverable messages in delivery order, not claimed."""
        return await self.backend.run(self.ops.peek(count))  # type: ignore[no-any-return]

    async def size(self) -> int:
        """Waiting messages (ready + delayed), not in flight, not dead."""
        return (await self.stats()).size

    async def stats(self) -> QueueStats:
        """Ready, delayed, in-flight and dead messages, per shard and summed."""
        return await self.backend.run(self.ops.stats())  # type: ignore[no-any-return]

    async def clear(self) -> None:
        """Delete every message of the queue (its settings stay)."""
        await self.backend.run(self.ops.clear())

    async def requeue_expired(self) -> int:
        """Give back every expired delivery, over all shards; returns how many."""
        return await self.backend.drive(self.ops.requeue_expired())

    # -- recurring messages ------------------------------------------------------------------

    async def schedule(self, id: str, payload: Any, *, every: float | None = None,
                       cron: str | None = None, priority: int = 0, key: str | None = None,
                       headers: dict[str, Any] | None = None) -> float:
        """Push ``payload`` again and again, every ``every`` seconds or on a ``cron``
        expression; returns the first tick (see :meth:`dynoq.Queue.schedule`)."""
        return await self.backend.drive(ScheduleOps(self.ops).schedule(
            id, payload, every=every, cron=cron, priority=priority, key=key,
            headers=headers))

    async def unschedule(self, id: str) -> bool:
        """Stop a recurring message; False if unknown."""
        return await self.backend.drive(ScheduleOps(self.ops).unschedule(id))

    async def schedules(self) -> list[Schedule]:
        """Every recurring message of the queue."""
        return await self.backend.drive(ScheduleOps(self.ops).schedules())

    # -- dead letters ------------------------------------------------------------------------

    async def dead(self, count: int = 100) -> list[Message]:
        """Up to ``count`` dead-lettered messages, oldest first."""
        return await self.backend.drive(self.ops.dead(count))

    async def replay_dead(self, ids: Iterable[str] | None = None) -> int:
        """Put dead-lettered messages (all, or these ids) back; returns how many."""
        return await self.backend.drive(self.ops.replay_dead(ids))

    async def purge_dead(self) -> int:
        """Delete every dead-lettered message for good; returns how many."""
        return await self.backend.drive(self.ops.purge_dead())
