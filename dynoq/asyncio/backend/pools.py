"""Connection pools that make a caller wait, for asyncio: the rules of
:mod:`dynoq.backend.pools` (``max_connections`` for commands, a wait of up to
``pool_timeout`` for a free one, then ``PoolExhausted``) on redis.asyncio's
``BlockingConnectionPool``. The asyncio backend holds one connection for good (its
wake-up hub, whatever the number of consumers), so its pool has one more.
"""

from __future__ import annotations

import functools
from typing import Any

import redis.asyncio as aredis
from redis.asyncio.sentinel import SentinelConnectionPool

from ..._core.pool import PoolLimits

HUB = 1  # the wake-up hub's pub/sub connection (see .wakeup)


class BlockingSentinelPool(SentinelConnectionPool, aredis.BlockingConnectionPool):
    """The master's pool of a sentinel URL, waiting for a free connection."""


def blocking_options(limits: PoolLimits) -> dict[str, Any]:
    """Keyword arguments of a ``BlockingConnectionPool`` for ``limits`` (and the hub)."""
    return {"max_connections": limits.size + HUB, "timeout": limits.timeout}


def plain_client(url: str, options: dict[str, Any], limits: PoolLimits) -> aredis.Redis:
    """A client of ``url`` on a blocking pool (no I/O)."""
    pool = aredis.BlockingConnectionPool.from_url(url, **options, **blocking_options(limits))
    return aredis.Redis(connection_pool=pool)


def host_client(host: str, port: int, options: dict[str, Any], limits: PoolLimits) -> aredis.Redis:
    """A client of ``host:port`` on a blocking pool (the embedded server)."""
    pool = aredis.BlockingConnectionPool(
        host=host, port=port, **options, **blocking_options(limits)
    )
    return aredis.Redis(connection_pool=pool)


def memory_options(limits: PoolLimits) -> dict[str, Any]:
    """fakeredis' options for a blocking pool (fakeredis >= 2.35 forwards
    ``max_connections`` to ``connection_pool_class`` itself, not the wait)."""
    return {
        "max_connections": limits.size + HUB,
        "connection_pool_class": functools.partial(
            aredis.BlockingConnectionPool, timeout=limits.timeout
        ),
    }


async def close_client(client: Any) -> None:
    """Close a client built here and its pool (one given to the client is not closed
    with it)."""
    await client.aclose()
    await client.connection_pool.disconnect()
