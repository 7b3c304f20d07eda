"""Redis Cluster: ``redis+cluster://host:port[,host:port...]``, or a ``RedisCluster`` you
pass to :class:`dynoq.Client`.

Every key of a shard shares one hash tag, so each script touches one slot; a queue's
shards spread over the slots and so over every master. What plain redis-py lacks here,
:class:`DynoqCluster` adds:

- redis-py follows MOVED/ASK but gives up on TRYAGAIN (a slot mid-migration) and on a dead
  master within about a second, long before a failover ends. Commands here are retried
  with backoff for ``retry_window`` seconds, then :class:`ClusterUnavailable` (a
  ``redis.ConnectionError``, so dynoq raises ``ConnectionFailed``).
- redis-py's ClusterPipeline does not reload a script on NOSCRIPT (a promoted replica has
  an empty script cache), refuses multi-key DEL, and sends WAIT to some other connection.
  :class:`ClusterBatch` sends each node one batch (nodes in parallel), follows MOVED and
  ASK, reloads scripts, backs off on TRYAGAIN/CLUSTERDOWN/dropped nodes, and puts a WAIT
  after each node's commands on that node's connection.

Every dynoq command is safe to resend (pushes are idempotent by id; a pop whose reply was
lost is redelivered after its visibility timeout), which is what makes retrying sound.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.commands.core import DataAccessCommands, Script, ScriptCommands
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

from .connection import Backend
from .errors import InvalidArgument

DEFAULT_RETRY_WINDOW = 30.0  # > a failover with the default cluster-node-timeout of 15 s
PAUSE_FIRST, PAUSE_MAX = 0.02, 1.0  # backoff between retries, seconds
MAX_PARALLEL = 16  # threads sending node batches at once

# Transient while a slot migrates or a master fails over: retry after a pause.
TRANSIENT = (redis.ConnectionError, redis.TimeoutError, TryAgainError, ClusterDownError,
             SlotNotCoveredError, ClusterError, MovedError, AskError, ReadOnlyError)


class ClusterUnavailable(redis.ConnectionError):
    """The cluster did not serve a command within the retry window."""


def is_transient(exc: BaseException) -> bool:
    # redis-py raises a bare RedisClusterException when no startup node answers (it is
    # also used for mistakes such as cross-slot keys, which are not retried).
    return isinstance(exc, TRANSIENT) or (isinstance(exc, RedisClusterException)
                                          and "cannot be connected" in str(exc))


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
    """``options``: RedisCluster keyword arguments, plus ``cluster_retry_window`` (seconds)."""
    window = options.pop("cluster_retry_window", DEFAULT_RETRY_WINDOW)
    userinfo = urlsplit(url).netloc.rpartition("@")[0]
    if userinfo:
        user, _, password = userinfo.partition(":")
        options.setdefault("username", unquote(user) or None)
        options.setdefault("password", unquote(password) or None)
    client = DynoqCluster(startup_nodes=parse_nodes(url), **options)
    client.retry_window = float(window)
    return client, client.close, url


def as_dynoq_cluster(rc: RedisCluster) -> DynoqCluster:
    """A DynoqCluster sharing ``rc``'s topology and connection pools (``rc`` itself if it
    already is one), so a RedisCluster built by the caller gets the same retries."""
    if isinstance(rc, DynoqCluster):
        return rc
    view = DynoqCluster.__new__(DynoqCluster)
    view.__dict__.update(rc.__dict__)
    view._setup(DEFAULT_RETRY_WINDOW)
    return view


def cluster_url(rc: RedisCluster) -> str:
    """A redis+cluster:// URL naming ``rc``'s startup nodes (for other processes)."""
    names = [n.name for n in rc.nodes_manager.startup_nodes.values()]
    return "redis+cluster://" + ",".join(names)


def _pause(attempt: int) -> float:
    # Jittered so that many clients retrying after one failover do not move in step.
    return float(min(PAUSE_MAX, PAUSE_FIRST * 2 ** attempt) * random.uniform(0.5, 1.0))


class DynoqCluster(RedisCluster):
    """RedisCluster with a retry window and a per-node batching pipeline (see module doc)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._setup(DEFAULT_RETRY_WINDOW)

    def _setup(self, window: float) -> None:
        self.retry_window = window
        self.script_sources: dict[str, Any] = {}  # sha -> source, to reload on NOSCRIPT
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def register_script(self, script: Any) -> Script:
        s = Script(self, script)
        self.script_sources[s.sha] = s.script
        return s

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        deadline, attempt = 0.0, 0
        while True:
            try:
                return super().execute_command(*args, **kwargs)  # type: ignore[no-untyped-call]
            except (*TRANSIENT, RedisClusterException) as exc:
                if not is_transient(exc):
                    raise
                deadline = deadline or time.monotonic() + self.retry_window
                self.backoff(exc, attempt, deadline)
                attempt += 1

    def backoff(self, exc: Exception, attempt: int, deadline: float) -> None:
        """Sleep before retry ``attempt`` (refreshing the slot map unless the error was
        TRYAGAIN), or raise ClusterUnavailable once ``deadline`` has passed."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise ClusterUnavailable(f"Redis Cluster did not recover within "
                                     f"{self.retry_window:g}s: {exc}") from exc
        time.sleep(min(_pause(attempt), left))
        if not isinstance(exc, TryAgainError):
            self.refresh()

    def refresh(self) -> None:
        # Fails while no node answers; the next attempt tries again.
        with contextlib.suppress(redis.RedisError, RedisClusterException):
            self.nodes_manager.initialize()

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> ClusterBatch:
        if transaction:
            raise RedisClusterException("dynoq sends no MULTI across a cluster: every "
                                        "atomic step is one script on one slot")
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


@dataclass
class _Call:
    args: tuple[Any, ...]
    options: dict[str, Any]
    result: Any = None
    done: bool = False
    ask: ClusterNode | None = None  # ASK target: send ASKING first, to that node
    redirects: int = 0


@dataclass
class _Sent:
    node: ClusterNode
    calls: list[_Call]
    replies: list[Any] = field(default_factory=list)
    acked: Any = None  # WAIT reply
    error: Exception | None = None  # the whole batch failed (connection)


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
        self._wait: tuple[Any, ...] | None = None
        self._wait_at: int | None = None

    def __enter__(self) -> ClusterBatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.reset()

    def __len__(self) -> int:
        return len(self._calls) + (self._wait_at is not None)

    def reset(self) -> None:
        self._calls, self._wait, self._wait_at = [], None, None

    def execute_command(self, *args: Any, **options: Any) -> ClusterBatch:
        if str(args[0]).upper() == "WAIT":
            if self._wait_at is not None:
                raise RedisClusterException("one WAIT per cluster pipeline")
            self._wait, self._wait_at = tuple(args[1:]), len(self._calls)
        else:
            self._calls.append(_Call(tuple(args), options))
        return self

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        calls, wait, wait_at = self._calls, self._wait, self._wait_at
        self.reset()
        acked = self._run(calls, wait)
        out = [c.result for c in calls]
        if wait_at is not None:
            # Nothing written means nothing to wait for: report the ask as met.
            out.insert(wait_at, min(acked) if acked else int(wait[0]) if wait else 0)
        if raise_on_error:
            for r in out:
                if isinstance(r, Exception):
                    raise r
        return out

    def _run(self, calls: list[_Call], wait: tuple[Any, ...] | None) -> list[int]:
        cluster, acked = self.cluster, []
        pending, deadline, attempt = calls, 0.0, 0
        while pending:
            try:
                batches = self._group(pending)
            except (*TRANSIENT, RedisClusterException) as exc:  # no slot owner known yet
                if not is_transient(exc):
                    raise
                deadline = deadline or time.monotonic() + cluster.retry_window
                cluster.backoff(exc, attempt, deadline)
                attempt += 1
                continue
            if len(batches) == 1:
                self._send(batches[0], wait)
            else:
                for f in [cluster.submit(self._send, b, wait) for b in batches]:
                    f.result()
            retry: list[_Call] = []
            transient: Exception | None = None
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
                    if not self._settle(c, r, b.node):
                        retry.append(c)
                        c.redirects += 1
                        if c.redirects > 3 or not isinstance(r, (AskError, NoScriptError)):
                            transient = r  # a first redirect or reload needs no pause
            if retry and transient is not None:
                deadline = deadline or time.monotonic() + cluster.retry_window
                cluster.backoff(transient, attempt, deadline)
                attempt += 1
            pending = retry
        return acked

    def _group(self, calls: Sequence[_Call]) -> list[_Sent]:
        by_node: dict[str, _Sent] = {}
        for c in calls:
            slot = self.cluster.determine_slot(*c.args)
            if slot is None:
                raise RedisClusterException(f"{c.args[0]} names no key to route it by")
            node = c.ask or self.cluster.nodes_manager.get_node_from_slot(slot)
            by_node.setdefault(node.name, _Sent(node, [])).calls.append(c)
        return list(by_node.values())

    def _send(self, batch: _Sent, wait: tuple[Any, ...] | None) -> None:
        try:
            pipe: Any = self.cluster.get_redis_connection(batch.node).pipeline(transaction=False)
            for c in batch.calls:
                if c.ask is not None:
                    pipe.execute_command("ASKING")
                pipe.execute_command(*c.args, **c.options)
            if wait is not None:
                pipe.execute_command("WAIT", *wait)
            replies = pipe.execute(raise_on_error=False)
        except Exception as exc:  # noqa: BLE001 - handed to the caller's thread
            batch.error = exc
            return
        if wait is not None:
            batch.acked = replies.pop()
        it = iter(replies)
        batch.replies = [(next(it), next(it))[1] if c.ask is not None else next(it)
                         for c in batch.calls]

    def _settle(self, c: _Call, reply: Any, node: ClusterNode) -> bool:
        """Record a reply; False if the call must be sent again."""
        c.ask = None
        if isinstance(reply, AskError):
            c.ask = self.cluster.get_node(host=reply.host,  # type: ignore[no-untyped-call]
                                          port=reply.port)
            return False
        if isinstance(reply, NoScriptError) and str(c.args[0]).upper() == "EVALSHA":
            source = self.cluster.script_sources.get(str(c.args[1]))
            if source is not None:
                # A promoted replica or a restarted node has an empty script cache.
                with contextlib.suppress(redis.RedisError):
                    self.cluster.get_redis_connection(node).script_load(source)
                return False
        if isinstance(reply, TRANSIENT):
            return False
        c.result, c.done = reply, True
        return True
