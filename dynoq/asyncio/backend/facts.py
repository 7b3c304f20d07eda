"""The warning at connect when the server evicts keys, for asyncio (the twin of
``dynoq.backend.facts.warn_if_evicting``); logged on the client's first use, since
connecting is lazy."""

from __future__ import annotations

import logging
from typing import Any

import redis
from redis.asyncio.cluster import RedisCluster

from ..._core.risks import NodeFacts, eviction_warning
from ...backend.facts import asks_info

log = logging.getLogger("dynoq")


async def warn_if_evicting(client: Any, where: str) -> None:
    """Log once (logger ``dynoq``) that the server evicts keys, if it does; never fails."""
    if not asks_info(client, where):
        return
    try:
        if isinstance(client, RedisCluster):
            nodes = [
                NodeFacts(n.name, await client.execute_command("INFO", "memory", target_nodes=n))
                for n in client.get_primaries()
            ]
        else:
            nodes = [NodeFacts(where, await client.info("memory"))]
    except (redis.RedisError, OSError):  # refused (ACL), unknown, unreachable: say nothing
        return
    text = eviction_warning(where, nodes)
    if text:
        log.warning(text)
