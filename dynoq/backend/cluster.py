"""Redis Cluster: ``redis+cluster://host:port[,host:port...]``, or a ``RedisCluster`` you
pass to :class:`dynoq.Client`.

Every key of a shard shares one hash tag, so each script touches one slot; a queue's
shards spread over the slots and so over every master. What plain redis-py lacks here,
:class:`DynoqCluster` adds:

- redis-py follows MOVED/ASK but gives up on TRYAGAIN (a slot mid-migration) and on a dead
  master within about a second, long before a failover ends. Commands here are retried
  with backoff for ``retry_window`` seconds (default 30), then :class:`ClusterUnavailable`
  (a ``redis.ConnectionError``, so dynoq raises ``ConnectionFailed``). redis-py's own
  retries are off (:mod:`.bounds`), so no retry loop nests in this one.
- redis-py's ClusterPipeline does not reload a script on NOSCRIPT (a promoted replica has
  an empty script cache), refuses multi-key DEL, and sends WAIT to some other connection.
  :class:`ClusterBatch` sends each node one batch (nodes in parallel), follows MOVED and
  ASK, reloads scripts, backs off on TRYAGAIN/CLUSTERDOWN/dropped nodes, and puts a WAIT
  after each node's commands on that node's connection.
- redis-py keeps one pool per node and fails at once when a node's pool is full (it has
  no blocking pool for a cluster). A full pool is load, not a failover: the command
  waits for a free connection, polling every few milliseconds without refreshing the
  slot map, for up to ``pool_timeout`` seconds, then ``PoolExhausted`` (DESIGN §2.11).

Every dynoq command is safe to resend (pushes are idempotent by id; a pop whose reply was
lost is redelivered after its visibility timeout), which is what makes retrying sound.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Generator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.commands.core import DataAccessCommands, ScriptCommands
from redis.exceptions import (
    AskError,
    ClusterDownError,
    ClusterError,
    MovedError,
    NoScriptError,
    ReadOnlyError,
    RedisClusterException,
    SlotNotCoveredError,
    TryAgainError,
)

from .._core import timeouts
from .._core.lua import SOURCES
from .._core.pool import DEFAULT_POOL_TIMEOUT, PoolLimits
from .._core.retry import CLUSTER_RETRY_WINDOW, RetryWindow
from .._core.timeouts import Timeouts
from ..errors import ScriptsNotInstalled
from .bounds import cluster_bounded
from .errors import pool_exhausted, refused_load
from .hosts import credentials, host_list
from .nodetable import keep_nodes

DEFAULT_RETRY_WINDOW = CLUSTER_RETRY_WINDOW  # > a failover with cluster-node-timeout 15 s
POOL_PAUSE = 0.005  # seconds between looks at a node's full pool (jittered)
MAX_PARALLEL = 16  # threads sending node batches at once

# Transient while a slot migrates or a master fails over: retry after a pause.
TRANSIENT = (
    redis.ConnectionError,
    redis.TimeoutError,
    TryAgainError,
    ClusterDownError,
    SlotNotCoveredError,
    ClusterError,
    MovedError,
    AskError,
    ReadOnlyError,
)


class ClusterUnavailable(redis.ConnectionError):
    """The cluster did not serve a command within the retry window."""


def is_transient(exc: BaseException) -> bool:
    # redis-py raises a bare RedisClusterException when no startup node answers (it is
    # also used for mistakes such as cross-slot keys, which are not retried).
    return isinstance(exc, TRANSIENT) or (
        isinstance(exc, RedisClusterException) and "cannot be connected" in str(exc)
    )


def parse_nodes(url: str) -> list[ClusterNode]:
    return [ClusterNode(h, p) for h, p in host_list(url, "cluster node")]  # type: ignore[no-untyped-call]


def open_cluster(url: str, options: dict[str, Any], limits: PoolLimits) -> DynoqCluster:
    """``options``: RedisCluster keyword arguments, plus ``retry_window`` (seconds; its
    older name ``cluster_retry_window`` too); ``limits``: each node's pool size and how
    long a command waits for a connection."""
    bounds = cluster_bounded(options)
    credentials(url, options)
    client = DynoqCluster(startup_nodes=parse_nodes(url), max_connections=limits.size, **options)
    client.timeouts = bounds
    client.pool_timeout = limits.timeout
    return client


def as_dynoq_cluster(rc: RedisCluster) -> DynoqCluster:
    """A DynoqCluster sharing ``rc``'s topology and connection pools (``rc`` itself if it
    already is one), so a RedisCluster built by the caller gets the same retries."""
    if isinstance(rc, DynoqCluster):
        return rc
    view = DynoqCluster.__new__(DynoqCluster)
    view.__dict__.update(rc.__dict__)
    view._setup()
    view.timeouts = timeouts.of(rc.nodes_manager.connection_kwargs, DEFAULT_RETRY_WINDOW)
    return view


def cluster_url(rc: RedisCluster) -> str:
    """A redis+cluster:// URL naming ``rc``'s startup nodes (for other processes)."""
    names = [n.name for n in rc.nodes_manager.startup_nodes.values()]
    return "redis+cluster://" + ",".join(names)


@dataclass
class Pause:
    """Sleep ``seconds``, then refresh the slot map when ``refresh``."""

    seconds: float
    refresh: bool


class Backoff:
    """The retry window of one command or batch (shared by the sync and asyncio
    clusters; the pauses are :class:`dynoq._core.retry.RetryWindow`'s, as every
    backend's): each transient failure gets a Pause until ``window`` seconds after the
    first one, then ClusterUnavailable. A node's full pool gets short pauses without a
    slot map refresh until ``pool_timeout`` seconds after the first, then its own error
    again (translated to PoolExhausted)."""

    def __init__(self, window: float, pool_timeout: float = DEFAULT_POOL_TIMEOUT) -> None:
        self.window = window
        self._retry = RetryWindow(window)
        self.pool_timeout = pool_timeout
        self.pool_deadline = 0.0

    def next(self, exc: BaseException) -> Pause:
        now = time.monotonic()
        if pool_exhausted(exc):
            self.pool_deadline = self.pool_deadline or now + self.pool_timeout
            left = self.pool_deadline - now
            if left <= 0:
                raise exc
            return Pause(min(POOL_PAUSE * random.uniform(0.5, 1.5), left), False)
        seconds = self._retry.pause(now)
        if seconds is None:
            raise ClusterUnavailable(
                f"Redis Cluster did not recover within {self.window:g}s: {exc}"
            ) from exc
        return Pause(seconds, not isinstance(exc, TryAgainError))


class DynoqCluster(RedisCluster):
    """RedisCluster with a retry window and a per-node batching pipeline (see module doc)."""

    # The bounds (set by open_cluster; a RedisCluster made by the caller keeps its own
    # timeouts and gets the default window).
    timeouts = Timeouts(None, None, DEFAULT_RETRY_WINDOW)
    pool_timeout = DEFAULT_POOL_TIMEOUT  # seconds a command waits for a node's connection

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._setup()

    @property
    def retry_window(self) -> float:
        return self.timeouts.retry_window

    def _setup(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        keep_nodes(self.nodes_manager)

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        backoff = Backoff(self.retry_window, self.pool_timeout)
        while True:
            try:
                return super().execute_command(*args, **kwargs)  # type: ignore[no-untyped-call]
            except (*TRANSIENT, RedisClusterException) as exc:
                if not is_transient(exc):
                    raise
                self.pause(backoff.next(exc))

    def pause(self, pause: Pause) -> None:
        time.sleep(pause.seconds)
        if pause.refresh:
            self.refresh()

    def refresh(self) -> None:
        # Fails while no node answers; the next attempt tries again.
        with contextlib.suppress(redis.RedisError, RedisClusterException):
            self.nodes_manager.initialize()

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> ClusterBatch:
        if transaction:
            raise RedisClusterException(
                "dynoq sends no MULTI across a cluster: every atomic step is one script on one slot"
            )
        return ClusterBatch(self)

    def submit(self, fn: Any, *args: Any) -> Future[Any]:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(MAX_PARALLEL, thread_name_prefix="dynoq-cluster")
            return self._pool.submit(fn, *args)

    def close(self) -> None:
        with self._pool_lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False)
                self._pool = None
        super().close()


# -- batches: the rounds are pure decisions, shared with dynoq.asyncio ---------------------


@dataclass
class _Call:
    args: tuple[Any, ...]
    options: dict[str, Any]
    result: Any = None
    done: bool = False
    ask: Any = None  # ASK target node: send ASKING first, to that node
    redirects: int = 0


@dataclass
class _Sent:
    node: Any
    calls: list[_Call]
    replies: list[Any] = field(default_factory=list)
    acked: Any = None  # WAIT reply
    error: Exception | None = None  # the whole batch failed (connection)


@dataclass
class Load:
    """Load ``source`` into ``node``'s script cache; the driver sets ``error`` when that
    failed (the call is resent, unless the node refused this user SCRIPT LOAD)."""

    node: Any
    source: str
    error: Exception | None = None


Step = list[_Sent] | Pause | Load


def batch_rounds(
    calls: list[_Call],
    wait: tuple[Any, ...] | None,
    route: Any,
    ask: Any,
    window: float,
    pool_timeout: float = DEFAULT_POOL_TIMEOUT,
) -> Generator[Step, None, list[int]]:
    """Send ``calls`` until each has a final reply (set on the call): yields the node
    batches to send (the driver fills in their replies or error), scripts to load and
    pauses; returns the WAIT replies. ``route(args)`` is the node of a command's slot,
    ``ask(host, port)`` the node an ASK names. MOVED, ASK, NOSCRIPT, TRYAGAIN and dropped
    nodes are retried within ``window`` seconds."""
    acked: list[int] = []
    pending, backoff = calls, Backoff(window, pool_timeout)
    while pending:
        try:
            batches = _group(pending, route)
        except (*TRANSIENT, RedisClusterException) as exc:  # no slot owner known yet
            if not is_transient(exc):
                raise
            yield backoff.next(exc)
            continue
        yield batches
        retry: list[_Call] = []
        transient: Exception | None = None
        loaded: dict[tuple[str, str], Exception | None] = {}
        for b in batches:
            if b.error is not None:
                if not is_transient(b.error):
                    raise b.error
                transient = b.error
                retry += b.calls
                continue
            if wait is not None:
                if isinstance(b.acked, Exception):
                    raise b.acked
                acked.append(int(b.acked))
            for c, r in zip(b.calls, b.replies, strict=True):
                if (yield from _take_reply(c, r, b.node, ask, loaded)):
                    continue
                retry.append(c)
                c.redirects += 1
                if c.redirects > 3 or not isinstance(r, (AskError, NoScriptError)):
                    transient = r  # a first redirect or reload needs no pause
        if retry and transient is not None:
            yield backoff.next(transient)
        pending = retry
    return acked


def _take_reply(
    c: _Call, r: Any, node: Any, ask: Any, loaded: dict[tuple[str, str], Exception | None]
) -> Generator[Load, None, bool]:
    """True when ``r`` is ``c``'s final reply (set on it); False when ``c`` is sent again:
    to the node an ASK names, after loading a script ``node`` lacks (once a round per node
    and script: ``loaded``), or after a transient error."""
    c.ask = None
    if isinstance(r, AskError):
        c.ask = ask(r.host, r.port)
        return False
    if (
        isinstance(r, NoScriptError)
        and str(c.args[0]).upper() == "EVALSHA"
        and str(c.args[1]) in SOURCES
    ):
        # A promoted replica or a restarted node has an empty script cache.
        where = (node.name, str(c.args[1]))
        if where not in loaded:
            load = Load(node, SOURCES[where[1]])
            yield load
            loaded[where] = load.error
        error = loaded[where]
        if error is not None and isinstance(refused := refused_load(error), ScriptsNotInstalled):
            c.result, c.done = refused, True  # a role: an admin loads them
            return True
        return False
    if not isinstance(r, TRANSIENT):
        c.result, c.done = r, True
        return True
    return False


def _group(calls: Sequence[_Call], route: Any) -> list[_Sent]:
    by_node: dict[str, _Sent] = {}
    for c in calls:
        node = c.ask or route(c.args)
        by_node.setdefault(node.name, _Sent(node, [])).calls.append(c)
    return list(by_node.values())


def batch_results(
    calls: list[_Call], wait: tuple[Any, ...] | None, wait_at: int | None, acked: list[int]
) -> list[Any]:
    """The replies in order, with the WAIT reply (the fewest replicas any node confirmed)
    where it was queued."""
    out = [c.result for c in calls]
    if wait_at is not None:
        # Nothing written means nothing to wait for: report the ask as met.
        out.insert(wait_at, min(acked) if acked else int(wait[0]) if wait else 0)
    return out


class ClusterBatch(DataAccessCommands, ScriptCommands):
    """A non-transactional pipeline over a cluster: commands queue up, ``execute()`` sends
    each node its commands in one round trip and returns the replies in order.

    ``WAIT n ms`` is not routed by key: it runs after the commands on every node that got
    some, on the same connection, and its reply is the fewest replicas any node confirmed.
    Nothing across nodes is atomic.
    """

    _event_dispatcher: Any = None  # the command mixins declare it; unused here

    def __init__(self, cluster: DynoqCluster) -> None:
        self.cluster = cluster
        self._calls: list[_Call] = []
        self._waits: list[tuple[Any, ...]] = []  # WAIT steps (see _core.timeouts.wait_steps)
        self._wait_at: int | None = None

    def __enter__(self) -> ClusterBatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.reset()

    def __len__(self) -> int:
        return len(self._calls) + (self._wait_at is not None)

    def reset(self) -> None:
        self._calls, self._waits, self._wait_at = [], [], None

    def execute_command(self, *args: Any, **options: Any) -> ClusterBatch:
        if str(args[0]).upper() == "WAIT":
            # One wait, perhaps in steps (consecutive WAITs), after the writes.
            if self._wait_at not in (None, len(self._calls)):
                raise RedisClusterException("one WAIT per cluster pipeline, after the writes")
            self._waits.append(tuple(args[1:]))
            self._wait_at = len(self._calls)
        else:
            self._calls.append(_Call(tuple(args), options))
        return self

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        calls, waits, wait_at = self._calls, self._waits, self._wait_at
        self.reset()
        wait = waits[0] if waits else None
        out = batch_results(calls, wait, wait_at, self._run(calls, waits))
        if raise_on_error:
            for r in out:
                if isinstance(r, Exception):
                    raise r
        return out

    def _route(self, args: tuple[Any, ...]) -> Any:
        slot = self.cluster.determine_slot(*args)
        if slot is None:
            raise RedisClusterException(f"{args[0]} names no key to route it by")
        return self.cluster.nodes_manager.get_node_from_slot(slot)

    def _ask(self, host: str, port: int) -> Any:
        return self.cluster.get_node(host=host, port=port)  # type: ignore[no-untyped-call]

    def _run(self, calls: list[_Call], waits: list[tuple[Any, ...]]) -> list[int]:
        cluster = self.cluster
        rounds = batch_rounds(
            calls,
            waits[0] if waits else None,
            self._route,
            self._ask,
            cluster.retry_window,
            cluster.pool_timeout,
        )
        try:
            step = next(rounds)
            while True:
                if isinstance(step, Pause):
                    cluster.pause(step)
                elif isinstance(step, Load):
                    try:
                        cluster.get_redis_connection(step.node).script_load(step.source)
                    except redis.RedisError as exc:
                        step.error = exc
                elif len(step) == 1:
                    self._send(step[0], waits)
                else:
                    for f in [cluster.submit(self._send, b, waits) for b in step]:
                        f.result()
                step = next(rounds)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]

    def _send(self, batch: _Sent, waits: list[tuple[Any, ...]]) -> None:
        try:
            pipe: Any = self.cluster.get_redis_connection(batch.node).pipeline(transaction=False)
            for c in batch.calls:
                if c.ask is not None:
                    pipe.execute_command("ASKING")
                pipe.execute_command(*c.args, **c.options)
            for step in waits:
                pipe.execute_command("WAIT", *step)
            replies = pipe.execute(raise_on_error=False)
        except Exception as exc:  # noqa: BLE001 - handed to the caller's thread
            batch.error = exc
            return
        take_replies(batch, replies, waits)


def take_replies(batch: _Sent, replies: list[Any], waits: list[tuple[Any, ...]]) -> None:
    """Put a node's pipeline replies on its batch (an ASKING reply is skipped; of the
    WAIT steps' replies the last is the count)."""
    if waits:
        batch.acked = replies[-1]
        del replies[-len(waits) :]
    it = iter(replies)
    batch.replies = [
        (next(it), next(it))[1] if c.ask is not None else next(it) for c in batch.calls
    ]
