"""The client: assembles a backend, queues on it and consumers of them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ._core import codec, opening, topics, validate
from ._core.calls import Cmd, server_time
from ._core.catalog import Catalog
from ._core.flows import check_flow_id
from ._core.sweeper import SweepObserver
from .backend import Backend, open_backend, wrap
from .backend.facts import warn_if_evicting
from .checker import Check, Checker
from .consumer import Consumer
from .flows import FlowHandle
from .queue import Queue
from .retry import RetryPolicy
from .settings import ConsumerSettings
from .sweeper import DEFAULT_INTERVAL, REFRESH_INTERVAL, Sweeper
from .topic import Topic

_D = ConsumerSettings  # the consumer options' defaults live on its fields


class Client:
    """A connection to one Redis (or Cluster) under one key prefix. Thread-safe; a context
    manager that closes the connection (and stops an embedded server) on exit.

    ``Client(redis_client, prefix=...)`` wraps a ``redis.Redis`` or ``RedisCluster`` you
    made; :func:`connect` makes one from a URL."""

    def __init__(
        self,
        redis: Any,
        *,
        prefix: str = "dq",
        max_payload_bytes: int = codec.DEFAULT_MAX_PAYLOAD_BYTES,
    ) -> None:
        self.prefix = validate.check_name(prefix, "prefix")
        self.max_payload_bytes = validate.check_int(
            max_payload_bytes, "max_payload_bytes", low=64, high=512 * 1024 * 1024
        )
        self.backend: Backend = redis if isinstance(redis, Backend) else wrap(redis)
        self._catalog = Catalog(
            self.prefix,
            self.max_payload_bytes,
            cross_slot=self.backend.cross_slot,
            replicas=self.backend.replicas,
            where=self.backend.display_url,
        )

    @property
    def redis(self) -> Any:
        """The underlying redis-py client, for your own commands."""
        return self.backend.redis

    @property
    def url(self) -> str:
        """A URL other processes (Spark executors, workers) can connect with. It holds the
        password, if any: do not print it (``repr(client)`` shows a redacted one)."""
        return self.backend.url

    def __repr__(self) -> str:
        return f"<dynoq.Client {self.backend.display_url!r} prefix={self.prefix!r}>"

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections (and stop an embedded server)."""
        self.backend.close()

    def ping(self) -> bool:
        """True when the server answers; ConnectionFailed when it cannot be reached."""
        return bool(self.backend.run(Cmd(("PING",))))

    def server_time(self) -> float:
        """The server's clock in seconds since the epoch (every stored time is on it)."""
        return float(self.backend.run(server_time()))

    # -- queues ----------------------------------------------------------------------------

    def queue(
        self,
        name: str,
        *,
        shards: int | None = None,
        ordered: bool | str | None = None,
        unack_timeout: float | None = None,
        max_retries: int | None = None,
        dedupe_window: float | None = None,
        min_replicas: int | None = None,
        replica_timeout: float | None = None,
        key_concurrency: int | None = None,
        key_rate_limit: tuple[int, float] | None = None,
        max_running: int | None = None,
    ) -> Queue:
        """Open a queue, creating it on first use with the given settings (the rest take
        :class:`dynoq.QueueSettings`' defaults). On a later open, omitted settings take
        the stored values and a setting that differs raises QueueConfigError."""
        asked = {
            "shards": shards,
            "ordered": ordered,
            "unack_timeout": unack_timeout,
            "max_retries": max_retries,
            "dedupe_window": dedupe_window,
            "min_replicas": min_replicas,
            "replica_timeout": replica_timeout,
            "key_concurrency": key_concurrency,
            "key_rate_limit": key_rate_limit,
            "max_running": max_running,
        }
        return Queue(self.backend, self.backend.drive(self._catalog.queue(name, asked)))

    def open_existing(self, name: str) -> Queue | None:
        """The registered queue ``name``, or None; unlike :meth:`queue` it never creates
        one (a typo cannot make a queue)."""
        found = self.backend.drive(self._catalog.existing_queue(name))
        return None if found is None else Queue(self.backend, found)

    def queue_names(self) -> list[str]:
        """Every registered queue under this prefix, sorted."""
        return list(self.backend.run(opening.queue_names(self.prefix)))

    def sweeper(
        self,
        *,
        interval: float = DEFAULT_INTERVAL,
        refresh_interval: float = REFRESH_INTERVAL,
        observer: SweepObserver | None = None,
    ) -> Sweeper:
        """A :class:`dynoq.Sweeper` of every queue under this client's prefix."""
        return Sweeper(
            self.backend,
            prefix=self.prefix,
            interval=interval,
            refresh_interval=refresh_interval,
            observer=observer,
        )

    # -- topics ----------------------------------------------------------------------------

    def topic(
        self,
        name: str,
        *,
        shards: int | None = None,
        ordered: bool | str | None = None,
        unack_timeout: float | None = None,
        max_retries: int | None = None,
        dedupe_window: float | None = None,
        member_grace: float | None = None,
        key_concurrency: int | None = None,
    ) -> Topic:
        """Open a topic, creating it on first use with the given settings (the rest take
        :class:`dynoq.TopicSettings`' defaults); as :meth:`queue` for later opens."""
        asked = {
            "shards": shards,
            "ordered": ordered,
            "unack_timeout": unack_timeout,
            "max_retries": max_retries,
            "dedupe_window": dedupe_window,
            "member_grace": member_grace,
            "key_concurrency": key_concurrency,
        }
        return Topic(self.backend, self.backend.drive(self._catalog.topic(name, asked)))

    def open_existing_topic(self, name: str) -> Topic | None:
        """The registered topic ``name``, or None; never creates one."""
        found = self.backend.drive(self._catalog.existing_topic(name))
        return None if found is None else Topic(self.backend, found)

    def topic_names(self) -> list[str]:
        """Every registered topic under this prefix, sorted."""
        return list(self.backend.run(topics.topic_names(self.prefix)))

    # -- workflows ---------------------------------------------------------------------------

    def flow(self, id: str) -> FlowHandle:
        """A handle on the flow of this id under this prefix (docs/workflows.md): its
        state, result, members, cancel, reconcile, without the tasks app (dynoq.Tasks's
        ``tasks.flow(id)`` is the same, opening queues with the app's settings)."""
        return FlowHandle(self, check_flow_id(id))

    # -- transaction checkers ----------------------------------------------------------------

    def checker(
        self,
        queue: Queue | Topic,
        check: Check,
        *,
        group: str = "producers",
        check_interval: float = 60.0,
        max_checks: int = 15,
        claim_timeout: float = 30.0,
        poll_interval: float = 1.0,
        concurrency: int = 1,
        batch_size: int = 10,
        instance_id: str | None = None,
        observer: Callable[[str, str, str], None] | None = None,
    ) -> Checker:
        """A checker of ``queue``'s (or a topic's) prepared messages left undecided past their
        ``check_after``: ``check(msg)`` answers "commit", "rollback" or "unknown" (see
        :class:`dynoq.Checker`; DESIGN.md §3.6). Checker groups are their own namespace,
        apart from consumer groups."""
        return Checker(
            queue,
            check,
            group=group,
            check_interval=check_interval,
            max_checks=max_checks,
            claim_timeout=claim_timeout,
            poll_interval=poll_interval,
            concurrency=concurrency,
            batch_size=batch_size,
            instance_id=instance_id,
            observer=observer,
        )

    # -- consumers -------------------------------------------------------------------------

    def consumer(
        self,
        queue: Queue | Topic | str,
        handler: Callable[..., Any],
        *,
        settings: ConsumerSettings | None = None,
        group: str = _D.group,
        concurrency: int = _D.concurrency,
        batch_size: int | str = _D.batch_size,
        batch_handler: bool = _D.batch_handler,
        max_in_flight: int | None = _D.max_in_flight,
        strategy: str | Callable[..., list[int]] = _D.strategy,
        strategy_options: Mapping[str, Any] | None = _D.strategy_options,
        retry_delays: Sequence[float] | RetryPolicy | None = _D.retry_delays,
        max_retries: int | None = _D.max_retries,
        lease_ttl: float = _D.lease_ttl,
        rebalance_interval: float = _D.rebalance_interval,
        instance_id: str | None = _D.instance_id,
        mode: str | None = _D.mode,
        max_continuous_time: float = _D.max_continuous_time,
        idle_wait: float = _D.idle_wait,
        visibility: float | None = _D.visibility,
        consume_timeout: float = _D.consume_timeout,
        rate_limit: tuple[int, float] | None = _D.rate_limit,
        before: Callable[..., Any] | None = _D.before,
        after: Callable[..., Any] | None = _D.after,
        middleware: Sequence[Any] = _D.middleware,
    ) -> Consumer:
        """A consumer of ``queue`` (a Queue, a queue name, or a Topic) with ``handler``, as
        one member of consumer group ``group``; see :class:`dynoq.ConsumerSettings` for
        every option, given by name or as ``settings=`` (not both). On a topic the group
        is subscribed (tags "*") if it is not yet, and ``mode`` says how its members share
        its messages (default: as the group is subscribed, else clustering)."""
        return Consumer(
            self.queue(queue) if isinstance(queue, str) else queue,
            handler,
            settings=settings,
            group=group,
            concurrency=concurrency,
            batch_size=batch_size,
            batch_handler=batch_handler,
            max_in_flight=max_in_flight,
            strategy=strategy,
            strategy_options=strategy_options,
            retry_delays=retry_delays,
            max_retries=max_retries,
            lease_ttl=lease_ttl,
            rebalance_interval=rebalance_interval,
            instance_id=instance_id,
            mode=mode,
            max_continuous_time=max_continuous_time,
            idle_wait=idle_wait,
            visibility=visibility,
            consume_timeout=consume_timeout,
            rate_limit=rate_limit,
            before=before,
            after=after,
            middleware=middleware,
        )


def connect(
    url: str | None = None,
    *,
    prefix: str = "dq",
    max_payload_bytes: int = codec.DEFAULT_MAX_PAYLOAD_BYTES,
    **redis_options: Any,
) -> Client:
    """Connect to ``url`` (default: $DYNOQ_URL, else redis://localhost:6379/0).

    Schemes: redis://, rediss:// (TLS), unix://, redis+cluster://h:p[,h:p] (Redis
    Cluster), memory:// (in-process fakeredis with Lua, for your unit tests) and
    embedded:// (a private Valkey server from the ``embedded`` extra, stopped on close).
    ``redis_options`` go to the redis-py client, with dynoq's bounds as defaults:
    ``socket_connect_timeout`` 5 s, ``socket_timeout`` 10 s, and ``retry_window`` (dynoq's:
    a request that failed on a dropped connection or a timeout is sent again until this
    long after its first failure; 5 s, 30 on a cluster); see docs/queue.md. Raises
    ConnectionFailed when the server cannot be reached, PermissionDenied when it refuses
    the user. Logs a warning (logger ``dynoq``) when the server evicts keys when full
    (``dynoq check`` says more)."""
    validate.check_name(prefix, "prefix")
    backend = open_backend(url, dict(redis_options))
    try:
        client = Client(backend, prefix=prefix, max_payload_bytes=max_payload_bytes)
        client.ping()
        warn_if_evicting(backend)
    except BaseException:
        backend.close()
        raise
    return client
