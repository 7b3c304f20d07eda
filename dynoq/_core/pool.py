"""A client's connection pool limits (DESIGN §2.11): the two ``connect()`` options that
size and time it, checked, and what a caller is told when it ran dry. Pure: the sync
and asyncio backends build their pools from these.

A caller that finds every connection in use waits for one up to ``pool_timeout``
seconds; only then does it get :class:`dynoq.PoolExhausted`. Load is not an outage: the
error names the pool, never the server.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .validate import check_int, check_seconds

DEFAULT_MAX_CONNECTIONS = 100  # connections for commands (redis-py 8's default size)
DEFAULT_POOL_TIMEOUT = 10.0  # seconds a caller waits for a free connection
MAX_CONNECTIONS = 100_000  # more than any server's maxclients (Redis: 10,000 by default)
MIN_POOL_TIMEOUT = 0.001  # 0 would not wait at all: that is the failure this prevents


@dataclass(frozen=True)
class PoolLimits:
    """``size`` connections for commands; a caller waits ``timeout`` seconds for one.
    ``waits``: the pool makes callers wait (False for a plain redis-py ConnectionPool a
    caller built, which fails at once). ``per_node``: Redis Cluster, one pool per node."""

    size: int
    timeout: float
    waits: bool = True
    per_node: bool = False


def take_limits(options: dict[str, Any]) -> PoolLimits:
    """The pool limits in ``connect()``'s ``options`` (``max_connections``,
    ``pool_timeout``; defaults 100 and 10 s), checked and taken out of ``options``."""
    size = check_int(
        options.pop("max_connections", DEFAULT_MAX_CONNECTIONS),
        "max_connections",
        low=1,
        high=MAX_CONNECTIONS,
    )
    timeout = check_seconds(
        options.pop("pool_timeout", DEFAULT_POOL_TIMEOUT), "pool_timeout", minimum=MIN_POOL_TIMEOUT
    )
    return PoolLimits(size, timeout)


def exhausted_message(limits: PoolLimits | None) -> str:
    """What a caller that got no connection is told: the pool and how to raise it (the
    server was not asked, so nothing here blames it)."""
    if limits is None:
        return (
            "every connection of the client's pool is in use (the server was not "
            "asked): raise max_connections or pool_timeout, or make fewer concurrent "
            "calls on one client"
        )
    where = "one cluster node's pool" if limits.per_node else "the client's pool"
    if not limits.waits:
        return (
            f"all {limits.size} connections of {where} are in use and that redis-py "
            f"ConnectionPool does not wait (the server was not asked): build the "
            f"client you give dynoq on a redis.BlockingConnectionPool, or raise its "
            f"max_connections"
        )
    return (
        f"all {limits.size} connections of {where} stayed in use for "
        f"{limits.timeout:g}s (the server was not asked): raise max_connections "
        f"(now {limits.size}, e.g. dynoq.connect(url, max_connections="
        f"{limits.size * 2})) or pool_timeout (now {limits.timeout:g}s), or make "
        f"fewer concurrent calls on one client"
    )
