"""Error translation: every exception of the Redis client library becomes a DynoqError
here, and nothing above this package catches a redis-py exception."""

from __future__ import annotations

import redis
from redis.exceptions import MaxConnectionsError, RedisClusterException

from .._core.calls import Call
from .._core.pool import PoolLimits, exhausted_message
from .._core.roles import refused_script
from ..errors import (
    ConnectionFailed,
    DynoqError,
    PermissionDenied,
    PoolExhausted,
    ScriptsNotInstalled,
    ServerError,
    ServerFull,
)

# What "the server is not reachable right now" looks like (transient: retry later).
DROPPED: tuple[type[BaseException], ...] = (redis.ConnectionError, redis.TimeoutError)
# Everything redis-py raises (its cluster errors are no RedisError): what translate takes.
CLIENT_ERRORS: tuple[type[BaseException], ...] = (redis.RedisError, RedisClusterException)

# What redis-py 5.0 to 8.x raise when a pool has no connection to give: a
# BlockingConnectionPool after its timeout (sync and asyncio: a bare ConnectionError with
# this text), a ConnectionPool at max_connections (MaxConnectionsError from 7.0 on, a bare
# ConnectionError before), an asyncio cluster node (MaxConnectionsError).
POOL_EMPTY = ("No connection available", "Too many connections")


def pool_exhausted(exc: BaseException) -> bool:
    """True when ``exc`` says a connection pool ran dry: load on this client, not a fault
    of the server (no connection was made, nothing was sent)."""
    return isinstance(exc, MaxConnectionsError) or (
        isinstance(exc, redis.ConnectionError) and str(exc).startswith(POOL_EMPTY)
    )


def translate(
    exc: BaseException, pool: PoolLimits | None = None, request: object = None
) -> DynoqError:
    """The DynoqError for ``exc``, with a one-line message that holds no secret; ``pool``
    (the client's pool limits) for the message of a pool that ran dry; ``request`` (what
    was sent) to name the script a refusal was of."""
    if isinstance(exc, DynoqError):
        return exc
    if pool_exhausted(exc):
        return PoolExhausted(exhausted_message(pool))
    text = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, (redis.AuthenticationError, redis.exceptions.NoPermissionError)) or (
        isinstance(exc, redis.ResponseError)
        and (
            text.startswith(("NOPERM", "WRONGPASS", "NOAUTH"))
            or "ACL failure" in text
            or "no permissions" in text
        )
    ):
        if "'evalsha'" in text:  # the server does not say which script: the request does
            if isinstance(request, Call):
                return PermissionDenied(f"{refused_script(request.script.name)} ({text})")
            return PermissionDenied(
                f"the server refused this user: {text} (its ACL does "
                "not allow this script: see the roles' scripts in "
                "docs/security.md; rules of another dynoq version "
                "allow other scripts: see upgrading there)"
            )
        return PermissionDenied(
            f"the server refused this user: {text} (check the "
            "password and the user's ACL: see docs/security.md)"
        )
    if isinstance(exc, RedisClusterException) and "cluster mode is not enabled" in text.lower():
        return ConnectionFailed(
            "this server is not a Redis Cluster (cluster mode is not "
            "enabled): connect to a single server with redis://, to a "
            "cluster with redis+cluster://"
        )
    if isinstance(exc, DROPPED) or (
        isinstance(exc, RedisClusterException) and "cannot be connected" in text
    ):
        return ConnectionFailed(f"Redis is unreachable or timed out: {text}")
    if isinstance(exc, redis.exceptions.OutOfMemoryError):  # redis-py's for every OOM reply
        return ServerFull(
            f"Redis is at its memory limit (maxmemory) and takes no new "
            f"messages until consumers drain it or the limit is raised: {text}"
        )
    if isinstance(exc, redis.ResponseError) and "unexpected symbol near '#'" in text:
        return ServerError(
            f"dynoq needs Redis 7 or later (or Valkey 8): this server cannot "
            f"read a script's '#!lua' line: {text}"
        )
    if isinstance(exc, redis.ResponseError):
        return ServerError(f"the server answered with an error: {text}")
    return ServerError(f"Redis client error: {text}")


NOT_INSTALLED = (
    "dynoq's scripts are not installed on this server (it restarted, failed "
    "over, or is new) and this user may not load them: run `dynoq acl "
    "install` as an admin, or keep `dynoq acl install --keep` running "
    "(docs/security.md)"
)


def refused_load(exc: BaseException) -> DynoqError:
    """The error for a SCRIPT LOAD that failed: ScriptsNotInstalled when the server
    refused it to this user (a least-privilege role, which only calls installed
    scripts), else what ``translate`` says."""
    error = translate(exc)
    if type(error) is PermissionDenied:
        return ScriptsNotInstalled(f"{NOT_INSTALLED}: {' '.join(str(exc).split())}")
    return error
