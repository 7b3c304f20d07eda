"""A topic: publish/subscribe with consumer groups (RocketMQ's model; see _core.topics).

Every subscribed group gets every message whose tag matches its expression; a clustering
group shares one queue among its members, a broadcasting group gives each live member a
queue of its own. Get one with ``await client.topic(name, ...)``; consume it with
``client.consumer(topic, handler, group=...)``. The asyncio shell
(``dynoq/asyncio/topic.py``) is written by hand; the sync one is generated from it
(scripts/unasync.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .. import tracing
from .._core.topics import GroupBacklog, Subscription, TopicOps
from .._core.transactions import Prepared, TopicTransactionOps
from .._core.validate import check_id, check_items
from ..message import Message
from ..settings import TopicSettings
from .backend import AsyncBackend
from .queue import Queue
from .transactions import Half, Transaction


class Topic:
    """A topic of ``settings.shards`` shards. Safe to share between threads (sync client)
    or between the tasks of its client's event loop (asyncio)."""

    def __init__(self, backend: AsyncBackend, ops: TopicOps) -> None:
        self.backend = backend
        self.ops = ops
        self.name = ops.name
        self.settings: TopicSettings = ops.settings
        self.transactions = TopicTransactionOps(
            ops
        )  # transactional messages (dynoq/_core/transactions.py)

    def __repr__(self) -> str:
        return f"<dynoq.asyncio.Topic {self.name!r} {self.settings}>"

    async def publish(
        self,
        payload: Any,
        *,
        id: str | None = None,
        delay: float = 0.0,
        priority: int = 0,
        key: str | None = None,
        tag: str | None = None,
        headers: dict[str, Any] | None = None,
        expires: float | None = None,
    ) -> str:
        """Publish a message to every subscribed group whose tags match ``tag``; return
        its id. Arguments and errors as ``Queue.push``; ``tag``: 1-128 characters without
        whitespace or '|'. An id already waiting in a group's queue adds nothing there.
        ``expires``: each group's copy not delivered within that many seconds is
        dead-lettered there."""
        with tracing.span("publish", self.name, ids=[id] if id else None, producer=True):
            out = self.ops.prepare(
                Message(
                    payload,
                    id=id,
                    delay=delay,
                    priority=priority,
                    key=key,
                    headers=tracing.inject(headers),
                    tag=tag,
                    expires=expires,
                )
            )
            await self.backend.drive(self.ops.publish([out]))
        return out.id

    async def publish_many(self, items: Iterable[Any]) -> list[str]:
        """Publish payloads or :class:`dynoq.Message` objects (with ``tag=``), at most
        100,000 per call; all are validated first. Returns their ids."""
        with tracing.span("publish", self.name, producer=True):
            outs = [
                self.ops.prepare(tracing.traced(item))
                for item in check_items(items, "publish_many()")
            ]
            if outs:
                await self.backend.drive(self.ops.publish(outs))
        return [o.id for o in outs]

    async def prepare(
        self,
        payload: Any,
        *,
        id: str | None = None,
        key: str | None = None,
        delay: float = 0.0,
        priority: int = 0,
        tag: str | None = None,
        headers: dict[str, Any] | None = None,
        check_after: float = 60.0,
    ) -> Half:
        """A transactional publish: stored, delivered to no group until
        ``await half.commit()``, which publishes it to every group subscribed then whose
        tags match; ``half.rollback()`` drops it. Arguments as ``Queue.prepare`` and
        :meth:`publish` (docs/transactions.md)."""
        msg_id, shard, call = self.transactions.prepare(
            payload,
            id=id,
            key=key,
            delay=delay,
            priority=priority,
            headers=headers,
            check_after_s=check_after,
            tag=tag,
        )
        await self.backend.run(call)
        return Half(self.backend, self.transactions, msg_id, shard)

    def transaction(
        self,
        payload: Any,
        *,
        id: str | None = None,
        key: str | None = None,
        delay: float = 0.0,
        priority: int = 0,
        tag: str | None = None,
        headers: dict[str, Any] | None = None,
        check_after: float = 60.0,
    ) -> Transaction:
        """``async with t.transaction(payload, ...) as half:`` as ``Queue.transaction``."""
        return Transaction(
            self.backend,
            self.transactions,
            payload,
            {
                "id": id,
                "key": key,
                "delay": delay,
                "priority": priority,
                "tag": tag,
                "headers": headers,
                "check_after_s": check_after,
            },
        )

    def half(self, id: str) -> Half:
        """The handle of a message prepared earlier on this topic, by id."""
        return Half(self.backend, self.transactions, check_id(id))

    async def prepared(self, limit: int = 100) -> list[Prepared]:
        """Up to ``limit`` (1..1000) prepared messages of the topic, next checked first."""
        return await self.backend.drive(self.transactions.prepared(limit))

    async def subscribe(self, group: str, *, mode: str = "clustering", tags: str = "*") -> None:
        """Subscribe consumer group ``group``: from now on it gets every message published
        whose tag matches ``tags`` ("*", or tags joined by "||": "paid || refunded").
        ``mode``: "clustering" (members share the group's messages) or "broadcasting"
        (every live member gets every message)."""
        await self.backend.drive(self.ops.subscribe(group, mode=mode, tags=tags))

    async def unsubscribe(self, group: str) -> bool:
        """Drop a group's subscription, and its queues with their messages; False if it
        was not subscribed."""
        return await self.backend.drive(self.ops.unsubscribe(group))

    async def subscriptions(self) -> list[Subscription]:
        """Every subscribed group: group, mode, tags."""
        return await self.backend.drive(self.ops.subscriptions())

    async def backlog(self) -> list[GroupBacklog]:
        """Every group queue (one per broadcasting member) with its counts."""
        return await self.backend.drive(self.ops.backlog())

    def group_queue(self, group: str, member: str | None = None) -> Queue:
        """The queue of a clustering group (or of a broadcasting group's ``member``), for
        its stats, peek and dead letters."""
        return Queue(self.backend, self.ops.group_queue(group, member))

    async def consumer_queue(self, group: str, mode: str | None, member: str) -> Queue:
        """The queue a consumer of ``group`` consumes (subscribing the group with tags "*"
        if it is not subscribed yet, and a broadcasting member's own queue). ``mode``
        None: the group's stored mode, else clustering; a mode that conflicts with the
        stored one raises GroupConflict."""
        return Queue(
            self.backend, await self.backend.drive(self.ops.consumer_queue(group, mode, member))
        )
