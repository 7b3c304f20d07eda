"""A topic for asyncio: every operation of :class:`dynoq.Topic`, awaited.

A shell like the sync one: the decisions are in :class:`dynoq._core.topics.TopicOps`. Get
one with ``await client.topic(name, ...)``; consume it with
``client.consumer(topic, handler, group=...)``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .. import tracing
from .._core.topics import GroupBacklog, Subscription, TopicOps
from .._core.validate import check_items
from ..message import Message
from ..settings import TopicSettings
from .backend import AsyncBackend
from .queue import Queue


class Topic:
    """A topic of ``settings.shards`` shards, for asyncio (see :class:`dynoq.Topic`)."""

    def __init__(self, backend: AsyncBackend, ops: TopicOps) -> None:
        self.backend = backend
        self.ops = ops
        self.name = ops.name
        self.settings: TopicSettings = ops.settings

    def __repr__(self) -> str:
        return f"<dynoq.asyncio.Topic {self.name!r} {self.settings}>"

    async def publish(self, payload: Any, *, id: str | None = None, delay: float = 0.0,
                      priority: int = 0, key: str | None = None, tag: str | None = None,
                      headers: dict[str, Any] | None = None) -> str:
        """Publish to every subscribed group whose tags match ``tag``; return the id (see
        :meth:`dynoq.Topic.publish`)."""
        with tracing.span("publish", self.name, ids=[id] if id else None, producer=True):
            out = self.ops.prepare(Message(payload, id=id, delay=delay, priority=priority,
                                           key=key, headers=tracing.inject(headers), tag=tag))
            await self.backend.drive(self.ops.publish([out]))
        return out.id

    async def publish_many(self, items: Iterable[Any]) -> list[str]:
        """Publish payloads or Messages (see :meth:`dynoq.Topic.publish_many`)."""
        with tracing.span("publish", self.name, producer=True):
            outs = [self.ops.prepare(tracing.traced(item))
                    for item in check_items(items, "publish_many()")]
            if outs:
                await self.backend.drive(self.ops.publish(outs))
        return [o.id for o in outs]

    async def subscribe(self, group: str, *, mode: str = "clustering",
                        tags: str = "*") -> None:
        """Subscribe consumer group ``group`` (see :meth:`dynoq.Topic.subscribe`)."""
        await self.backend.drive(self.ops.subscribe(group, mode=mode, tags=tags))

    async def unsubscribe(self, group: str) -> bool:
        """Drop a group's subscription and its queues; False if it was not subscribed."""
        return await self.backend.drive(self.ops.unsubscribe(group))

    async def subscriptions(self) -> list[Subscription]:
        """Every subscribed group: group, mode, tags."""
        return await self.backend.drive(self.ops.subscriptions())

    async def backlog(self) -> list[GroupBacklog]:
        """Every group queue (one per broadcasting member) with its counts."""
        return await self.backend.drive(self.ops.backlog())

    def group_queue(self, group: str, member: str | None = None) -> Queue:
        """The queue of a clustering group (or of a broadcasting group's ``member``)."""
        return Queue(self.backend, self.ops.group_queue(group, member))

    async def consumer_queue(self, group: str, mode: str | None, member: str) -> Queue:
        """The queue a consumer of ``group`` consumes (see
        :meth:`dynoq.Topic.consumer_queue`)."""
        return Queue(self.backend, await self.backend.drive(
            self.ops.consumer_queue(group, mode, member)))
