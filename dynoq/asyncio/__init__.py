"""dynoq for asyncio (as ``redis.asyncio`` sits beside ``redis``): the same queues,
consumers and sweeper, every operation awaited::

    import dynoq.asyncio

    client = dynoq.asyncio.connect("redis://localhost:6379/0")  # lazy: no I/O yet
    async with client:
        q = await client.queue("orders", shards=4)
        await q.push({"order": 1}, delay=30)
        for msg in await q.pop(count=10, wait=5.0):
            await q.ack(msg)

Tasks too: ``tasks = dynoq.asyncio.Tasks(client)``, ``@tasks.task`` on ``async def``
functions, ``await fn.delay(...)`` (see docs/tasks.md).

Topics too: ``await client.topic("events")``, ``await topic.publish(..., tag=...)`` and
``client.consumer(topic, handler, group=...)``.

The keys, records, scripts and decisions are the sync package's (``dynoq._core``), so sync
and asyncio clients work on the same queues. See docs/asyncio.md.
"""

from .._core.logcontext import current_message
from .._core.middleware import Middleware
from .checker import Checker
from .client import Client, connect
from .consumer import Consumer
from .consumer.many import Consumers
from .flows import FlowHandle
from .handles import TaskHandle
from .queue import Queue
from .sweeper import Sweeper
from .tasks import Task, Tasks
from .topic import Topic
from .transactions import Half, Transaction

__all__ = [
    "Checker",
    "Client",
    "Consumer",
    "Consumers",
    "FlowHandle",
    "Half",
    "Middleware",
    "Queue",
    "Sweeper",
    "Task",
    "TaskHandle",
    "Tasks",
    "Topic",
    "Transaction",
    "connect",
    "current_message",
]
