"""The bounds of every connection dynoq makes, as redis-py options (sync and asyncio).

The numbers and the rules are :mod:`dynoq._core.timeouts`'s and :mod:`dynoq._core.retry`'s.
Here they become redis-py keyword arguments, the same on every redis-py version
``pyproject.toml`` allows (5.0 sets no socket timeout, 8.x sets 5 s; both retry inside
``connect()`` and inside a health check, which multiplies the waits on a half-open path):

- ``socket_connect_timeout`` and ``socket_timeout`` get dynoq's defaults;
- redis-py sends each command once (``Retry(NoBackoff(), 0)``): dynoq resends a failed
  request itself, within the retry window, once per request (see the runners), so no
  retry loop nests in another. A ``retry=`` given to ``connect()`` goes to redis-py as
  before and then dynoq resends nothing; ``retry=None`` sends each command once;
- no ``CLIENT SETINFO`` on connect (:func:`unlabelled`).
"""

from __future__ import annotations

import inspect
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.retry
from redis.backoff import NoBackoff
from redis.retry import Retry

from .._core import timeouts
from .._core.timeouts import Timeouts
from .errors import pool_exhausted

_GIVEN = object()


def bounded(options: dict[str, Any], *, cluster: bool = False, aio: bool = False) -> Timeouts:
    """Put dynoq's bounds into ``options`` (a client's keyword arguments, for redis-py's
    asyncio client when ``aio``; changed in place) and return them."""
    bounds = timeouts.take(options, cluster=cluster)
    retry = options.pop("retry", _GIVEN)
    options["retry"] = once(aio) if retry is _GIVEN or retry is None else retry
    if retry is not _GIVEN:  # the caller's choice: redis-py's retries or none at all
        bounds = Timeouts(bounds.connect, bounds.command, 0.0)
    unlabelled(options, cluster=cluster, aio=aio)
    return bounds


def unlabelled(options: dict[str, Any], *, cluster: bool = False, aio: bool = False) -> None:
    """Tell redis-py not to send ``CLIENT SETINFO`` when it connects, unless the caller
    chose a label (``driver_info``, ``lib_name``, ``lib_version``). A role's ACL rules then
    need not allow it: Redis 7.0 and 7.1 refuse ``+client|setinfo`` in a rule (it came in
    7.2), and a refused one fills the server's ACL LOG. redis-py 7.2.2 and later take
    ``driver_info=None``, earlier ones ``lib_name=None, lib_version=None``; 7.2.0 and 7.2.1
    always send it (refused, it is ignored)."""
    if options.keys() & {"driver_info", "lib_name", "lib_version"}:
        return
    # The class whose keywords reach the connections (a sync cluster's nodes are Redis).
    cls = (
        redis.asyncio.RedisCluster
        if aio and cluster
        else redis.asyncio.Redis
        if aio
        else redis.Redis
    )
    takes = inspect.signature(cls.__init__).parameters
    if "driver_info" in takes:
        if redis.VERSION >= (7, 2, 2):
            options["driver_info"] = None
    elif "lib_name" in takes:
        options["lib_name"] = options["lib_version"] = None


def cluster_bounded(options: dict[str, Any], aio: bool = False) -> Timeouts:
    """:func:`bounded` for a RedisCluster: the cluster client resends within the window
    (dynoq.backend.cluster), redis-py's cluster loop not at all (redis-py 5 counts its
    resends in ``cluster_error_retry_attempts``, later versions in ``retry``)."""
    bounds = bounded(options, cluster=True, aio=aio)
    if redis.VERSION < (6,):
        options.setdefault("cluster_error_retry_attempts", 0)
    return bounds


def once(aio: bool = False) -> Any:
    """A redis-py Retry that sends once (for the asyncio client when ``aio``): the caller
    (dynoq's runner) decides on resends."""
    return redis.asyncio.retry.Retry(NoBackoff(), 0) if aio else Retry(NoBackoff(), 0)


def sentinel_options(
    options: dict[str, Any], given: dict[str, Any] | None, aio: bool = False
) -> dict[str, Any]:
    """The sentinels' own client options: what the caller gave as ``sentinel_kwargs``,
    plus the master's timeouts and no retry of redis-py's unless given there (finding the
    master asks each sentinel once per attempt; each answer is bounded)."""
    out = dict(given or {})
    for name in ("socket_connect_timeout", "socket_timeout"):
        out.setdefault(name, options.get(name))
    if "retry" not in out:
        out["retry"] = once(aio)
    return out


def dropped(exc: BaseException, also: tuple[type[BaseException], ...] = ()) -> bool:
    """Whether ``exc`` (or the redis-py error it was translated from) means the request
    did not go through and may be sent again: a dropped connection, a timeout, or what
    the backend adds (``also``: READONLY from a demoted master behind Sentinel). A pool
    that ran dry is not one: its caller already waited ``pool_timeout``."""
    kinds: tuple[type[BaseException], ...] = (redis.ConnectionError, redis.TimeoutError, *also)
    raw = exc if isinstance(exc, kinds) else exc.__cause__
    return isinstance(raw, kinds) and not pool_exhausted(raw)
