"""Connection pools that make a caller wait (DESIGN §2.11).

Every client dynoq builds from a URL gets redis-py's ``BlockingConnectionPool`` of
``max_connections`` with ``timeout=pool_timeout``: a caller that finds every connection
in use waits for one instead of failing at once, as redis-py's default pool does (at 100
connections from redis-py 8 on). What stays at the pool's limit after the wait becomes
:class:`dynoq.PoolExhausted` (:func:`dynoq.backend.errors.translate`).

Connections held for long do not come out of what callers share: each wake-up
subscription (a thread's blocked ``pop``, a consumer's workers and its group channel)
keeps one connection for its lifetime, so the pool grows by the most subscriptions that
were ever open at once (:func:`make_room`). A client the caller built keeps its pool as
it is; only its limits are read, for the error message (:func:`limits_of`).

Redis Cluster keeps redis-py's pool per node (it has no blocking one for a cluster);
:mod:`.cluster` waits out a node's full pool the same way, for up to ``pool_timeout``.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.sentinel import SentinelConnectionPool

from .._core.pool import PoolLimits


class BlockingSentinelPool(SentinelConnectionPool, redis.BlockingConnectionPool):
    """The master's pool of a sentinel URL, waiting for a free connection like the
    others (redis-py has no blocking sentinel pool)."""

    def disconnect(self, inuse_connections: bool = True) -> None:
        # Finding the master (at the first connection, and after a failover) disconnects
        # the idle connections with inuse_connections=False; BlockingConnectionPool takes
        # that argument only from redis-py 7: before, every connection is disconnected
        # (one in use fails, and its request is sent again: dynoq.backend.bounds).
        if _takes_inuse(redis.BlockingConnectionPool.disconnect):
            super().disconnect(inuse_connections)
        else:
            super().disconnect()


def _takes_inuse(method: Any) -> bool:
    return "inuse_connections" in inspect.signature(method).parameters


def blocking_options(limits: PoolLimits) -> dict[str, Any]:
    """Keyword arguments of a ``BlockingConnectionPool`` for ``limits``."""
    return {"max_connections": limits.size, "timeout": limits.timeout}


def plain_client(url: str, options: dict[str, Any], limits: PoolLimits) -> redis.Redis:
    """A client of ``url`` (redis://, rediss://, unix://) on a blocking pool, as
    ``redis.Redis.from_url`` would make it otherwise (options go to the connections)."""
    pool = redis.BlockingConnectionPool.from_url(url, **options, **blocking_options(limits))
    return redis.Redis(connection_pool=pool)


def host_client(host: str, port: int, options: dict[str, Any], limits: PoolLimits) -> redis.Redis:
    """A client of ``host:port`` on a blocking pool (the embedded server)."""
    pool = redis.BlockingConnectionPool(  # type: ignore[no-untyped-call]
        host=host, port=port, **options, **blocking_options(limits)
    )
    return redis.Redis(connection_pool=pool)


def memory_pool_class(limits: PoolLimits) -> Any:
    """The pool class fakeredis builds its pool with (``connection_pool_class``): it
    forwards ``max_connections`` itself, not the wait."""
    return functools.partial(redis.BlockingConnectionPool, timeout=limits.timeout)


def close_client(client: Any) -> None:
    """Close a client built here and its pool (redis-py 5.0's ``close`` leaves a pool
    passed to the client open)."""
    client.close()
    client.connection_pool.disconnect()


def limits_of(client: Any) -> PoolLimits | None:
    """The limits of a client's pool (one a caller built included), for the message of a
    pool that ran dry; None when they cannot be read."""
    if hasattr(client, "nodes_manager"):  # a RedisCluster, sync or asyncio
        size = client.nodes_manager.connection_kwargs.get("max_connections")
        timeout = getattr(client, "pool_timeout", None)
        if not isinstance(size, int) or timeout is None:
            return None
        return PoolLimits(size, float(timeout), per_node=True)
    pool = getattr(client, "connection_pool", None)
    size = getattr(pool, "max_connections", None)
    if not isinstance(size, int):
        return None
    timeout = getattr(pool, "timeout", None)
    if not isinstance(timeout, (int, float)):  # a plain ConnectionPool (or no bound)
        return PoolLimits(size, 0.0, waits=False)
    return PoolLimits(size, float(timeout))


def make_room(client: Any, more: int) -> None:
    """Let ``client``'s pool (each node's, on a cluster) hold ``more`` connections."""
    if more <= 0:
        return
    if isinstance(client, RedisCluster):
        kwargs = client.nodes_manager.connection_kwargs
        if isinstance(kwargs.get("max_connections"), int):
            kwargs["max_connections"] += more  # for nodes made from now on
        for node in list(client.nodes_manager.nodes_cache.values()):
            if node.redis_connection is not None:
                _grow(node.redis_connection.connection_pool, more)
        return
    _grow(client.connection_pool, more)


def _grow(pool: Any, more: int) -> None:
    if isinstance(pool, redis.BlockingConnectionPool):
        # Its free slots are a LIFO queue of connections and None placeholders (one per
        # connection not yet made): widen the queue first, then add the placeholders.
        queue = pool.pool
        with queue.mutex:
            queue.maxsize += more
        pool.max_connections += more
        for _ in range(more):
            queue.put_nowait(None)
    else:  # redis-py's ConnectionPool only counts what it made against this
        pool.max_connections += more
