"""Key naming and shard selection (pure: no I/O).

Every key of one shard carries the hash tag ``{<queue>:<shard>}`` so that one Lua script
can touch all of them on Redis Cluster.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

from .errors import InvalidArgument, InvalidType

# The per-shard keys, in the order the Lua scripts receive them in KEYS.
SHARD_KEY_NAMES = ("delayed", "ready", "unack", "msgs", "dlv", "dead", "seq", "done", "lease")

_NAME_RE = re.compile(r"^[^{}\s]{1,200}$")


def check_name(value: object, what: str) -> str:
    """Return ``value`` if it is a usable queue/prefix name, else raise a typed error."""
    if not isinstance(value, str):
        raise InvalidType(f"{what} must be a str, got {type(value).__name__}")
    if not _NAME_RE.match(value):
        raise InvalidArgument(
            f"{what} {value!r} is invalid: use 1-200 characters without whitespace, '{{' or '}}'"
        )
    return value


def shard_of(routing: str, shards: int) -> int:
    """The stable shard of an id or ordering key (CRC-32, the same on every host)."""
    return zlib.crc32(routing.encode("utf-8")) % shards


@dataclass(frozen=True)
class ShardKeys:
    """The keys of one shard of one queue."""

    delayed: str
    ready: str
    unack: str
    msgs: str
    dlv: str  # id -> "attempts|saved ready score|delivery token"
    dead: str
    seq: str
    done: str  # id -> ack time, for the dedupe window
    lease: str

    def all(self) -> list[str]:
        return [getattr(self, name) for name in SHARD_KEY_NAMES]


@dataclass(frozen=True)
class QueueKeys:
    """Key names of one queue under one prefix."""

    prefix: str
    queue: str

    def shard(self, shard: int) -> ShardKeys:
        base = f"{self.prefix}:{{{self.queue}:{shard}}}:"
        return ShardKeys(*(base + name for name in SHARD_KEY_NAMES))

    @property
    def meta(self) -> str:
        return f"{self.prefix}:queue:{self.queue}"

    @property
    def wake_channel(self) -> str:
        """Pub/sub channel on which pushes wake blocked pops."""
        return f"{self.prefix}:wake:{self.queue}"


def registry_key(prefix: str) -> str:
    """The set of queue names under a prefix (the sweeper walks it)."""
    return f"{prefix}:queues"
