"""Redis Cluster: ``redis+cluster://host:port[,host:port...]``.

Every key of a shard shares one hash tag, so each script touches one slot; a queue's
shards spread over the slots and so over every master.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from redis.cluster import ClusterNode, RedisCluster

from .connection import Backend
from .errors import InvalidArgument


def parse_nodes(url: str) -> list[ClusterNode]:
    netloc = urlsplit(url).netloc
    nodes = []
    for part in filter(None, netloc.rsplit("@", 1)[-1].split(",")):
        host, _, port = part.rpartition(":")
        if not host or not port.isdigit():
            raise InvalidArgument(f"cluster node {part!r} in {url!r} is not host:port")
        nodes.append(ClusterNode(host, int(port)))  # type: ignore[no-untyped-call]
    if not nodes:
        raise InvalidArgument(f"{url!r} names no cluster node: use redis+cluster://host:port")
    return nodes


def open_cluster(url: str, options: dict[str, Any]) -> Backend:
    client = RedisCluster(startup_nodes=parse_nodes(url), **options)
    return client, client.close, url
