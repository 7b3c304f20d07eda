"""What a server says about itself, for ``dynoq check`` and the warning at connect: INFO
and ``CONFIG GET save`` of every master (the judging is pure: ``dynoq._core.risks``)."""

from __future__ import annotations

import logging
from typing import Any

import redis
from redis.cluster import RedisCluster

from .._core.risks import NodeFacts, eviction_warning
from .errors import translate
from .runner import Backend

log = logging.getLogger("dynoq")


def _masters(client: Any, where: str) -> list[tuple[str, Any]]:
    """(name, a client of that server alone) of every master."""
    if isinstance(client, RedisCluster):
        return [(n.name, client.get_redis_connection(n)) for n in client.get_primaries()]  # type: ignore[no-untyped-call]
    return [(where, client)]


def _answer(ask: Any) -> Any:
    """The reply, or None when the server refused (an ACL role without the command, a
    server that does not know it); a dropped connection raises ConnectionFailed."""
    try:
        return ask()
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise translate(exc) from exc
    except redis.RedisError:
        return None


def gather(backend: Backend, *, config: bool = True, section: str | None = None) -> list[NodeFacts]:
    """INFO (one ``section``, or the default ones) and, with ``config``, the ``save``
    setting of every master of ``backend``."""
    out = []
    for name, server in _masters(backend.redis, backend.display_url):
        info = _answer(lambda s=server: s.info(section) if section else s.info()) or {}
        save = None
        if config:
            got = _answer(lambda s=server: s.config_get("save"))
            save = None if got is None or "save" not in got else str(got["save"])
        out.append(NodeFacts(name, info, save))
    return out


def acl_user(client: Any) -> str | None:
    """The ACL user a redis-py client (sync or asyncio, plain or cluster) connects as."""
    for owner in (
        getattr(client, "connection_pool", None),
        getattr(client, "nodes_manager", None),
        client,
    ):
        kw = getattr(owner, "connection_kwargs", None)
        if isinstance(kw, dict) and kw.get("username"):
            return str(kw["username"])
    return None


def asks_info(client: Any, where: str) -> bool:
    """Whether the warning at connect may send INFO: not to an in-memory server, and not
    as a named ACL user (dynoq's roles are not granted INFO, which Redis counts as
    @dangerous: a refusal would only fill the server's ACL LOG). ``dynoq check``, run
    as an operator, says the same."""
    return not where.startswith("memory://") and acl_user(client) in (None, "default")


def warn_if_evicting(backend: Backend) -> None:
    """Log once (logger ``dynoq``) that the server evicts keys, if it does; never fails:
    a role without INFO, or an in-memory server, says nothing."""
    if not asks_info(backend.redis, backend.url):
        return
    try:
        nodes = gather(backend, config=False, section="memory")
    except Exception:  # noqa: BLE001 - a warning must never fail the connect
        return
    text = eviction_warning(backend.display_url, nodes)
    if text:
        log.warning(text)
