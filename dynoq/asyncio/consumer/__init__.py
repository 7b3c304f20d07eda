"""Consumers for asyncio: tasks instead of threads (RocketMQ's push consumer).

The modules mirror ``dynoq.consumer``: ``facade`` (the Consumer users start and stop),
``workers`` (the worker tasks), ``upkeep`` (heartbeat, renewal, rebalance, takeover),
``processing`` (handler call and settling), ``middleware``, ``lease``, ``group``,
``board`` (task coordination), ``context`` (what the tasks share). The decisions are in
``dynoq._core``, shared with the thread consumer.
"""

from ..._core.middleware import Middleware
from .facade import Consumer

__all__ = ["Consumer", "Middleware"]
