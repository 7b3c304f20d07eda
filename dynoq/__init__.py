"""dynoq: distributed delay queues and ordered queues on Redis.

Netflix Dyno-queues' storage model (a time+priority sorted set, a message hash and an
unack set per shard, every transition one Lua script) with Apache RocketMQ's ordered
consumption and consumer groups.
"""

# No `from __future__ import annotations` and only private names of what is imported for
# use here: dir(dynoq) is the public API and the package's modules.
import logging as _logging
from importlib.metadata import PackageNotFoundError as _PackageNotFoundError
from importlib.metadata import version as _version

from ._core.canvas import Chain, Group, Signature
from ._core.flows import FlowInfo
from ._core.logcontext import current_message
from ._core.tasks import TaskInfo, TaskState
from ._core.topics import Subscription
from .checker import Checker
from .client import Client, connect
from .consumer import Consumer, Middleware
from .consumer.many import Consumers
from .errors import (
    AwaitableReturned,
    Cancelled,
    ConnectionFailed,
    DynoqError,
    GroupConflict,
    InvalidArgument,
    InvalidType,
    LayoutError,
    LeaseLost,
    OrderedQueueError,
    PayloadError,
    PayloadTooLarge,
    PayloadTypeError,
    PermissionDenied,
    PoolExhausted,
    QueueConfigError,
    QueueGone,
    ReplicationError,
    ResultNotKept,
    ResultTimeout,
    ScriptsNotInstalled,
    ServerError,
    ServerFull,
    TaskArgumentError,
    TaskCancelled,
    TaskFailed,
)
from .flows import FlowHandle
from .handles import TaskHandle
from .message import ConsumerStats, KeyState, Message, QueueStats, ShardStats
from .queue import Queue
from .retry import DeadLetter, RateLimited, Retry
from .settings import ConsumerSettings, QueueSettings, TopicSettings
from .sweeper import Sweeper
from .tasks import Task, Tasks
from .topic import Topic
from .transactions import Half, Transaction

try:  # one version, pyproject.toml's, as installed (wheel or editable)
    __version__ = _version("dynoq")
except _PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

# A library adds no handler of its own but this one: without it, Python's last-resort
# handler prints every WARNING dynoq logs to stderr of an application that configured no
# logging. The application's own configuration decides where dynoq's records go.
_logging.getLogger("dynoq").addHandler(_logging.NullHandler())

__all__ = [
    "AwaitableReturned",
    "Cancelled",
    "Chain",
    "Checker",
    "Client",
    "ConnectionFailed",
    "Consumer",
    "ConsumerSettings",
    "ConsumerStats",
    "Consumers",
    "DeadLetter",
    "DynoqError",
    "FlowHandle",
    "FlowInfo",
    "Group",
    "GroupConflict",
    "Half",
    "InvalidArgument",
    "InvalidType",
    "KeyState",
    "LayoutError",
    "LeaseLost",
    "Message",
    "Middleware",
    "OrderedQueueError",
    "PayloadError",
    "PayloadTooLarge",
    "PayloadTypeError",
    "PermissionDenied",
    "PoolExhausted",
    "Queue",
    "QueueConfigError",
    "QueueGone",
    "QueueSettings",
    "QueueStats",
    "RateLimited",
    "ReplicationError",
    "ResultNotKept",
    "ResultTimeout",
    "Retry",
    "ScriptsNotInstalled",
    "ServerError",
    "ServerFull",
    "ShardStats",
    "Signature",
    "Subscription",
    "Sweeper",
    "Task",
    "TaskArgumentError",
    "TaskCancelled",
    "TaskFailed",
    "TaskHandle",
    "TaskInfo",
    "TaskState",
    "Tasks",
    "Topic",
    "TopicSettings",
    "Transaction",
    "connect",
    "current_message",
]
