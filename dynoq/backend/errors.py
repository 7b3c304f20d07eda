"""Error translation: every exception of the Redis client library becomes a DynoqError
here, and nothing above this package catches a redis-py exception."""

from __future__ import annotations

import redis
from redis.exceptions import RedisClusterException

from ..errors import ConnectionFailed, DynoqError, PermissionDenied, ServerError, ServerFull

# What "the server is not reachable right now" looks like (transient: retry later).
DROPPED: tuple[type[BaseException], ...] = (redis.ConnectionError, redis.TimeoutError)
# Everything redis-py raises (its cluster errors are no RedisError): what translate takes.
CLIENT_ERRORS: tuple[type[BaseException], ...] = (redis.RedisError, RedisClusterException)


def translate(exc: BaseException) -> DynoqError:
    """The DynoqError for ``exc``, with a one-line message that holds no secret."""
    if isinstance(exc, DynoqError):
        return exc
    text = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, (redis.AuthenticationError, redis.exceptions.NoPermissionError)) or (
            isinstance(exc, redis.ResponseError)
            and (text.startswith(("NOPERM", "WRONGPASS", "NOAUTH"))
                 or "ACL failure" in text or "no permissions" in text)):
        return PermissionDenied(f"the server refused this user: {text} (check the "
                                "password and the user's ACL: see docs/security.md)")
    if isinstance(exc, RedisClusterException) and "cluster mode is not enabled" in text.lower():
        return ConnectionFailed("this server is not a Redis Cluster (cluster mode is not "
                                "enabled): connect to a single server with redis://, to a "
                                "cluster with redis+cluster://")
    if isinstance(exc, DROPPED) or (isinstance(exc, RedisClusterException)
                                    and "cannot be connected" in text):
        return ConnectionFailed(f"Redis is unreachable or timed out: {text}")
    if isinstance(exc, redis.exceptions.OutOfMemoryError):  # redis-py's for every OOM reply
        return ServerFull(f"Redis is at its memory limit (maxmemory) and takes no new "
                          f"messages until consumers drain it or the limit is raised: {text}")
    if isinstance(exc, redis.ResponseError) and "unexpected symbol near '#'" in text:
        return ServerError(f"dynoq needs Redis 7 or later (or Valkey 8): this server cannot "
                           f"read a script's '#!lua' line: {text}")
    if isinstance(exc, redis.ResponseError):
        return ServerError(f"the server answered with an error: {text}")
    return ServerError(f"Redis client error: {text}")
