"""``dynoq worker`` with an ``async def`` handler or check: the sync consumer and checker
refuse one (nothing there would await it: its body would never run), so the worker runs
it on the asyncio client, connected to the server and prefix its probe reached. The
command line is the one edge above both clients (tests/test_architecture.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from .. import asyncio as aio
from ..errors import QueueGone
from ..message import ConsumerStats


async def consume(
    url: str,
    prefix: str,
    handler: Callable[..., Any],
    *,
    queue: str | None,
    topic: str | None,
    stop_timeout: float,
    **options: Any,
) -> ConsumerStats:
    """Consume ``queue`` (or ``topic``) with ``handler`` until SIGTERM/SIGINT; the counts."""
    async with aio.connect(url, prefix=prefix) as client:
        source: aio.Queue | aio.Topic | None = (
            await client.open_existing_topic(topic)
            if topic is not None
            else await client.open_existing(queue or "")
        )
        if source is None:  # it was there a moment ago (the sync probe opened it)
            raise QueueGone(f"{'topic' if topic else 'queue'} {topic or queue!r} is gone")
        consumer = client.consumer(source, handler, **options)
        await consumer.run(stop_timeout=stop_timeout)
        return consumer.stats()


async def check(
    url: str, prefix: str, fn: Callable[..., Any], *, queue: str, **options: Any
) -> Counter[str]:
    """Run a transaction checker of ``queue`` until SIGTERM/SIGINT; its outcomes."""
    async with aio.connect(url, prefix=prefix) as client:
        q = await client.open_existing(queue)
        if q is None:
            raise QueueGone(f"queue {queue!r} is gone")
        checker = client.checker(q, fn, **options)
        await checker.run()
        return checker.counts
