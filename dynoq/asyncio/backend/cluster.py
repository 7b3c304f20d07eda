"""Redis Cluster for asyncio: redis.asyncio's RedisCluster with dynoq's retry window and
per-node batches.

The decisions are :mod:`dynoq.backend.cluster`'s (what is transient, how long to back
off, when to give up, MOVED/ASK/NOSCRIPT handling of a batch, WAIT per node): the pure
:class:`~dynoq.backend.cluster.Backoff` and :func:`~dynoq.backend.cluster.batch_rounds`
are driven here with awaits, each node's batch sent in one round trip, nodes at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import redis
import redis.asyncio as aredis
from redis.asyncio.cluster import ClusterNode, PipelineCommand, RedisCluster
from redis.exceptions import RedisClusterException

from ..._core.pool import DEFAULT_POOL_TIMEOUT, PoolLimits
from ..._core.timeouts import Timeouts
from ...backend.bounds import cluster_bounded
from ...backend.cluster import (
    DEFAULT_RETRY_WINDOW,
    TRANSIENT,
    Backoff,
    Load,
    Pause,
    _Call,
    _Sent,
    batch_results,
    batch_rounds,
    is_transient,
    take_replies,
)
from ...backend.errors import DROPPED
from ...backend.hosts import credentials, host_list


def open_cluster(url: str, options: dict[str, Any], limits: PoolLimits) -> AsyncDynoqCluster:
    """``options``: redis.asyncio RedisCluster keyword arguments, plus ``retry_window``
    (seconds; its older name ``cluster_retry_window`` too); ``limits``: each node's
    connections and how long a command waits for one (see
    :class:`~dynoq.backend.cluster.Backoff`). No I/O: the cluster is asked for its slots
    on first use."""
    bounds = cluster_bounded(options, aio=True)
    credentials(url, options)
    nodes = [ClusterNode(host, port) for host, port in host_list(url, "cluster node")]
    client = AsyncDynoqCluster(startup_nodes=nodes, max_connections=limits.size, **options)
    client.timeouts = bounds
    client.pool_timeout = limits.timeout
    return client


class AsyncDynoqCluster(RedisCluster):
    """RedisCluster (asyncio) retrying transient failures for ``retry_window`` seconds."""

    timeouts = Timeouts(None, None, DEFAULT_RETRY_WINDOW)
    pool_timeout = DEFAULT_POOL_TIMEOUT  # seconds a command waits for a node's connection

    @property
    def retry_window(self) -> float:
        return self.timeouts.retry_window

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        backoff = Backoff(self.retry_window, self.pool_timeout)
        while True:
            try:
                return await super().execute_command(*args, **kwargs)
            except (*TRANSIENT, RedisClusterException) as exc:
                if not is_transient(exc):
                    raise
                await pause(self, backoff.next(exc))


def pubsub(client: Any, **options: Any) -> Any:
    """A pub/sub of ``client``. redis.asyncio's RedisCluster has none before redis-py 8:
    then a plain client of one node serves (classic pub/sub is broadcast over the cluster
    bus, so one node hears every channel), the default node or, before the slot map is
    read, a startup node; if it goes away the subscription drops and is made again."""
    if hasattr(client, "pubsub"):
        return client.pubsub(**options)
    node = client.get_default_node() or next(iter(client.nodes_manager.startup_nodes.values()))
    pool = aredis.ConnectionPool(connection_class=node.connection_class, **node.connection_kwargs)
    return aredis.Redis(connection_pool=pool).pubsub(**options)


async def pause(cluster: RedisCluster, step: Pause) -> None:
    """Sleep, then (unless the error was TRYAGAIN) refresh the slot map."""
    await asyncio.sleep(step.seconds)
    if step.refresh:
        # Fails while no node answers; the next attempt tries again.
        with contextlib.suppress(redis.RedisError, RedisClusterException):
            await cluster.nodes_manager.initialize()


async def send_batch(
    cluster: RedisCluster, commands: list[tuple[Any, ...]], waits: list[tuple[int, int]]
) -> list[Any]:
    """Send ``commands`` to the nodes owning their slots, one round trip per node (all
    nodes at once), through resharding and failover; the replies in order (errors as
    replies), then the WAIT reply (the fewest replicas any node confirmed; ``waits`` are
    the steps of one WAIT, see _core.timeouts.wait_steps)."""
    wait = waits[0] if waits else None
    if cluster.nodes_manager.default_node is None:
        await cluster.initialize()
    calls = [_Call(args, {}) for args in commands]

    def route(args: tuple[Any, ...]) -> Any:
        key = _first_key(args)
        if key is None:  # PING, TIME: any node answers
            return cluster.get_default_node()
        node = cluster.nodes_manager.get_node_from_slot(cluster.keyslot(key))
        if node is None:
            raise RedisClusterException(f"no node serves the slot of {args[0]}")
        return node

    def ask(host: str, port: int) -> Any:
        return cluster.get_node(host=host, port=port)

    window = getattr(cluster, "retry_window", DEFAULT_RETRY_WINDOW)  # also a plain client
    rounds = batch_rounds(
        calls, wait, route, ask, window, getattr(cluster, "pool_timeout", DEFAULT_POOL_TIMEOUT)
    )
    try:
        step = next(rounds)
        while True:
            if isinstance(step, Pause):
                await pause(cluster, step)
            elif isinstance(step, Load):
                try:
                    await step.node.execute_command("SCRIPT", "LOAD", step.source)
                except redis.RedisError as exc:
                    step.error = exc
            else:
                await asyncio.gather(*(_send(b, waits) for b in step))
            step = next(rounds)
    except StopIteration as stop:
        acked = stop.value
    return batch_results(calls, wait, len(calls) if wait is not None else None, acked)


def _first_key(args: tuple[Any, ...]) -> Any:
    """The key a dynoq command is routed by (its scripts and commands name their keys
    first), or None for a command without one."""
    if str(args[0]).upper() in ("EVALSHA", "EVAL"):
        if int(args[2]) < 1:
            raise RedisClusterException(f"{args[0]} names no key to route it by")
        return args[3]
    return args[1] if len(args) > 1 else None


async def _send(batch: _Sent, waits: list[tuple[int, int]]) -> None:
    commands: list[PipelineCommand] = []
    for c in batch.calls:
        if c.ask is not None:
            commands.append(PipelineCommand(len(commands), "ASKING"))
        commands.append(PipelineCommand(len(commands), *c.args))
    for step in waits:
        commands.append(PipelineCommand(len(commands), "WAIT", *step))
    try:
        await batch.node.execute_pipeline(commands)
    except AttributeError as exc:
        if "'NoneType'" not in str(exc):
            raise
        # redis.asyncio 5.0 writes on a connection another task closed meanwhile (a
        # topology refresh during a resharding disconnects a node's connections): its
        # writer is gone, nothing was sent. Sent again, as a dropped connection is.
        batch.error = redis.ConnectionError(f"connection closed while in use ({exc})")
        return
    except Exception as exc:  # noqa: BLE001 - decided on by batch_rounds
        batch.error = exc
        return
    replies = [cmd.result for cmd in commands]
    # redis.asyncio hands a connection lost mid-read to each command still unread, where
    # the sync pipeline raises once: the whole batch failed (and is sent again).
    for r in replies:
        if isinstance(r, Exception) and isinstance(r, DROPPED):
            batch.error = r
            return
    take_replies(batch, replies, waits)
