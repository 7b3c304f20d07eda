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
        return [(n.name, client.get_redis_connection(n))
                for n in client.get_primaries()]  # type: ignore[no-untyped-call]
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


def gather(backend: Backend, *, config: bool = True,
           section: str | None = None) -> list[NodeFacts]:
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


def warn_if_evicting(backend: Backend) -> None:
    """Log once (logger ``dynoq``) that the server evicts keys, if it does; never fails:
    a role without INFO, or an in-memory server, says nothing."""
    if backend.url.startswith("memory://"):
        return
    try:
        nodes = gather(backend, config=False, section="memory")
    except Exception:  # noqa: BLE001 - a warning must never fail the connect
        return
    text = eviction_warning(backend.display_url, nodes)
    if text:
        log.warning(text)
