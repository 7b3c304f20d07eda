"""The client: one connection pool, the registered scripts, and the queues on it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from redis.cluster import RedisCluster

from . import codec
from .cluster import as_dynoq_cluster, cluster_url
from .connection import open_backend, translate
from .errors import InvalidType, QueueConfigError
from .keys import QueueKeys, check_name, registry_key
from .queue import Queue
from .scripts import Scripts
from .settings import QueueSettings, merge
from .waiter import Waiter

if TYPE_CHECKING:
    from .consumer import Consumer


class Client:
    """A connection to one Redis (or Cluster) under one key prefix. Thread-safe."""

    def __init__(self, redis: Any, *, prefix: str = "dq", url: str = "",
                 max_payload_bytes: int = codec.DEFAULT_MAX_PAYLOAD_BYTES,
                 closer: Callable[[], None] | None = None) -> None:
        self.prefix = check_name(prefix, "prefix")
        if isinstance(max_payload_bytes, bool) or not isinstance(max_payload_bytes, int):
            raise InvalidType("max_payload_bytes must be an int")
        self.max_payload_bytes = max_payload_bytes
        if isinstance(redis, RedisCluster):
            # Same pools, plus retries through resharding/failover and a batching pipeline.
            redis = as_dynoq_cluster(redis)
            url = url or cluster_url(redis)
        self.redis = redis
        self.url = url  # a URL other processes (Spark executors, subprocesses) can use
        self.scripts = Scripts.register(redis)
        self.waiter = Waiter(redis)
        self._closer = closer or redis.close
        self._settings: dict[str, QueueSettings] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<dynoq.Client {self.url!r} prefix={self.prefix!r}>"

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.waiter.close()
        self._closer()

    @translate
    def ping(self) -> bool:
        return bool(self.redis.ping())

    @translate
    def queue(self, name: str, *, shards: int | None = None, ordered: bool | None = None,
              unack_timeout: float | None = None, max_retries: int | None = None,
              dedupe_window: float | None = None, min_replicas: int | None = None,
              replica_timeout: float | None = None) -> Queue:
        """Open (creating on first use) a queue. Settings given on a later open must match
        the stored ones, else QueueConfigError; omitted settings take the stored values.

        ``min_replicas``/``replica_timeout``: pushes WAIT for that many replicas (see
        docs/cluster.md), raising ReplicationError when fewer confirm in time."""
        check_name(name, "queue name")
        asked = {"shards": shards, "ordered": ordered, "unack_timeout": unack_timeout,
                 "max_retries": max_retries, "dedupe_window": dedupe_window,
                 "min_replicas": min_replicas, "replica_timeout": replica_timeout}
        with self._lock:
            known = self._settings.get(name)
        if known is None:
            wanted = merge(None, asked, name)  # validates before anything is written
            if wanted.min_replicas and self.url.startswith("memory://"):
                raise QueueConfigError("memory:// has no replicas: min_replicas needs a "
                                       "real server with replicas (see docs/cluster.md)")
            flat = [x for kv in wanted.to_hash().items() for x in kv]
            raw = self.scripts.run_raw("open", [QueueKeys(self.prefix, name).meta], flat)
            stored = QueueSettings.from_hash(
                {raw[i].decode(): raw[i + 1].decode() for i in range(0, len(raw), 2)})
            self.redis.sadd(registry_key(self.prefix), name)
            with self._lock:
                self._settings[name] = stored
            known = stored
        return Queue(self, name, merge(known, asked, name))

    @translate
    def queue_names(self) -> list[str]:
        """Every registered queue under this prefix."""
        return sorted(n.decode() for n in self.redis.smembers(registry_key(self.prefix)))

    def consumer(self, queue: Queue | str, handler: Callable[..., Any],
                 **options: Any) -> Consumer:
        """A consumer of ``queue`` in a consumer group; see :class:`dynoq.Consumer`."""
        from .consumer import Consumer

        q = self.queue(queue) if isinstance(queue, str) else queue
        return Consumer(q, handler, **options)


def connect(url: str | None = None, *, prefix: str = "dq",
            max_payload_bytes: int = codec.DEFAULT_MAX_PAYLOAD_BYTES,
            **redis_options: Any) -> Client:
    """Connect to ``url`` (default: $DYNOQ_URL, else redis://localhost:6379/0).

    Schemes: redis://, rediss://, unix://, redis+cluster://h:p[,h:p], memory:// (in-process
    fakeredis with Lua) and embedded:// (a private Valkey server, stopped on close).
    """
    check_name(prefix, "prefix")
    redis, closer, resolved = open_backend(url, dict(redis_options))
    try:
        client = Client(redis, prefix=prefix, url=resolved,
                        max_payload_bytes=max_payload_bytes, closer=closer)
        client.ping()
    except BaseException:
        closer()
        raise
    return client
