"""The asyncio client: assembles a backend, queues on it and consumers of them.

The twin of :mod:`dynoq.client`: the same prefix and payload rules, the same queue
opening (:class:`dynoq._core.catalog.Catalog`), the same consumer options. It is lazy:
:func:`connect` does no I/O and may be called outside a running event loop; the
connection is made on first use.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._core import codec, opening, topics, validate
from .._core.calls import Cmd, server_time
from .._core.catalog import Catalog
from .._core.flows import check_flow_id
from .._core.sweeper import DEFAULT_INTERVAL, REFRESH_INTERVAL, SweepObserver
from ..retry import RetryPolicy
from ..settings import ConsumerSettings
from .backend import AsyncBackend, open_backend, wrap
from .checker import Check, Checker
from .consumer import Consumer
from .flows import FlowHandle
from .queue import Queue
from .sweeper import Sweeper
from .topic import Topic

_D = ConsumerSettings  # the consumer options' defaults live on its fields


class Client:
    """A connection to one Redis (or Cluster) under one key prefix, for asyncio; ``async
    with client:`` closes it (and stops an embedded server). Use it from one event loop.

    ``Client(redis_client, prefix=...)`` wraps a ``redis.asyncio.Redis`` or
    ``RedisCluster`` you made (and leaves it open on close); :func:`connect` makes one from
    a URL."""

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
        self.backend: AsyncBackend = redis if isinstance(redis, AsyncBackend) else wrap(redis)
        self._catalog = Catalog(
            self.prefix,
            self.max_payload_bytes,
            cross_slot=self.backend.cross_slot,
            replicas=self.backend.replicas,
            where=self.backend.display_url,
        )

    async def redis(self) -> Any:
        """The underlying redis.asyncio client, for your own commands."""
        return await self.backend.client()

    @property
    def url(self) -> str:
        """A URL other processes can connect with (it may hold a password: do not print
        it; ``repr(client)`` shows a redacted one). For embedded://, known once used."""
        return self.backend.url

    def __repr__(self) -> str:
        return f"<dynoq.asyncio.Client {self.backend.display_url!r} prefix={self.prefix!r}>"

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.backend.close()

    async def ping(self) -> bool:
        return bool(await self.backend.run(Cmd(("PING",))))

    async def server_time(self) -> float:
        """The server's clock in seconds since the epoch (every stored time is on it)."""
        return float(await self.backend.run(server_time()))

    # -- queues ----------------------------------------------------------------------------

    async def queue(
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
        """Open a queue, creating it on first use (see :meth:`dynoq.Client.queue`)."""
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
        return Queue(self.backend, await self.backend.drive(self._catalog.queue(name, asked)))

    async def open_existing(self, name: str) -> Queue | None:
        """The registered queue ``name``, or None; never creates one."""
        found = await self.backend.drive(self._catalog.existing_queue(name))
        return None if found is None else Queue(self.backend, found)

    async def queue_names(self) -> list[str]:
        """Every registered queue under this prefix, sorted."""
        return list(await self.backend.run(opening.queue_names(self.prefix)))

    def sweeper(
        self,
        *,
        interval: float = DEFAULT_INTERVAL,
        refresh_interval: float = REFRESH_INTERVAL,
        observer: SweepObserver | None = None,
    ) -> Sweeper:
        """A :class:`dynoq.asyncio.Sweeper` of every queue under this client's prefix."""
        return Sweeper(
            self.backend,
            prefix=self.prefix,
            interval=interval,
            refresh_interval=refresh_interval,
            observer=observer,
        )

    # -- topics ----------------------------------------------------------------------------

    async def topic(
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
        """Open a topic, creating it on first use (see :meth:`dynoq.Client.topic`)."""
        asked = {
            "shards": shards,
            "ordered": ordered,
            "unack_timeout": unack_timeout,
            "max_retries": max_retries,
            "dedupe_window": dedupe_window,
            "member_grace": member_grace,
            "key_concurrency": key_concurrency,
        }
        return Topic(self.backend, await self.backend.drive(self._catalog.topic(name, asked)))

    async def open_existing_topic(self, name: str) -> Topic | None:
        """The registered topic ``name``, or None; never creates one."""
        found = await self.backend.drive(self._catalog.existing_topic(name))
        return None if found is None else Topic(self.backend, found)

    async def topic_names(self) -> list[str]:
        """Every registered topic under this prefix, sorted."""
        return list(await self.backend.run(topics.topic_names(self.prefix)))

    # -- workflows ---------------------------------------------------------------------------

    def flow(self, id: str) -> FlowHandle:
        """A handle on the flow of this id under this prefix (docs/workflows.md): its
        state, result, members, cancel, reconcile, without the tasks app (dynoq.asyncio.Tasks's
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
        queue: Queue | Topic,
        handler: Callable[..., Any],
        *,
        settings: ConsumerSettings | None = None,
        run_in_thread: bool = False,
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
        """A consumer of ``queue`` (a Queue or a Topic) with ``async def handler(msg)``;
        every option of :class:`dynoq.ConsumerSettings` by name, or ``settings=`` (see
        :class:`dynoq.asyncio.Consumer`, also for ``run_in_thread``)."""
        return Consumer(
            queue,
            handler,
            settings=settings,
            run_in_thread=run_in_thread,
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
    """A client for ``url`` (every scheme of :func:`dynoq.connect`); ``redis_options`` go
    to the redis.asyncio client, with the same bounds and retry window as
    :func:`dynoq.connect`'s. No I/O: an unreachable server raises ConnectionFailed at
    first use. May be called outside a running event loop."""
    validate.check_name(prefix, "prefix")
    backend = open_backend(url, dict(redis_options))
    return Client(backend, prefix=prefix, max_payload_bytes=max_payload_bytes)
