"""dynoq: distributed delay queues and ordered queues on Redis.

Netflix Dyno-queues' storage model (a time+priority sorted set, a message hash and an
unack set per shard, every transition one Lua script) with Apache RocketMQ's ordered
consumption and consumer groups.
"""

from __future__ import annotations

from .client import Client, connect
from .consumer import Consumer
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
from .hooks import ConsumerStats, Middleware
from .message import Message, QueueStats, ShardStats
from .queue import Queue
from .retry import DeadLetter, Retry
from .settings import QueueSettings

__version__ = "0.1.0"

__all__ = [
    "Client",
    "ConnectionFailed",
    "Consumer",
    "ConsumerStats",
    "DeadLetter",
    "DynoqError",
    "InvalidArgument",
    "InvalidType",
    "LeaseLost",
    "Message",
    "Middleware",
    "OrderedQueueError",
    "PayloadError",
    "PayloadTooLarge",
    "PayloadTypeError",
    "Queue",
    "QueueConfigError",
    "QueueSettings",
    "QueueStats",
    "ReplicationError",
    "Retry",
    "ShardStats",
    "connect",
]
