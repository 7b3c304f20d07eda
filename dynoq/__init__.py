"""dynoq: distributed delay queues and ordered queues on Redis.

Netflix Dyno-queues' storage model (a time+priority sorted set, a message hash and an
unack set per shard, every transition one Lua script) with Apache RocketMQ's ordered
consumption and consumer groups.
"""

from __future__ import annotations

from .client import Client, connect
from .errors import (
    ConnectionFailed,
    DynoqError,
    InvalidArgument,
    InvalidType,
    LeaseLost,
    OrderedQueueError,
    PayloadError,
    PayloadTooLarge,
    PayloadTypeError,
    QueueConfigError,
    ReplicationError,
)
from .message import Message, QueueStats, ShardStats
from .queue import Queue
from .settings import QueueSettings

__version__ = "0.1.0"

__all__ = [
    "Client",
    "ConnectionFailed",
    "DynoqError",
    "InvalidArgument",
    "InvalidType",
    "LeaseLost",
    "Message",
    "OrderedQueueError",
    "PayloadError",
    "PayloadTooLarge",
    "PayloadTypeError",
    "Queue",
    "QueueConfigError",
    "QueueSettings",
    "QueueStats",
    "ReplicationError",
    "ShardStats",
    "connect",
]
