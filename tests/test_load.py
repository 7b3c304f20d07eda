"""Load never looks like an outage (DESIGN §2.11): hundreds of threads or asyncio tasks on
one client, with consumers running, get no errors; callers wait for a free connection up
to ``pool_timeout``; only a real exhaustion raises PoolExhausted, which names the pool
and never blames the server. Every backend, both clients."""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
from helpers import FAST, delete_prefix, wait_for
from test_sentinel import SERVICE, sentinel_setup  # noqa: F401 - its fixture, used here

import dynoq
import dynoq.asyncio

FLAVORS = ("sync", "async")
CALLERS = 300  # threads (sync) or tasks (asyncio) pushing at once
PLAIN_EACH, ORDERED_EACH = 3, 2  # messages each caller pushes to each queue


@pytest.fixture
def loop(flavor: str, request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue("event_loop_thread") if flavor == "async" else None


@pytest.fixture
def cleanup(url: str, prefix: str) -> Iterator[None]:
    yield
    delete_prefix(url, prefix)


class Seen:
    """What the handlers saw: ids, and each key's payloads in the order handled."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ids: set[str] = set()
        self.by_key: dict[str, list[int]] = defaultdict(list)

    def add(self, msg: dynoq.Message) -> None:
        with self.lock:
            self.ids.add(msg.id)
            if msg.key is not None:
                self.by_key[msg.key].append(msg.payload)


def expected_ids() -> set[str]:
    return {f"p{c}-{i}" for c in range(CALLERS) for i in range(PLAIN_EACH)} | {
        f"o{c}-{i}" for c in range(CALLERS) for i in range(ORDERED_EACH)
    }


def check(
    seen: Seen,
    errors: list[BaseException],
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    assert errors == [], f"{len(errors)} callers failed, first: {errors[:1]!r}"
    assert seen.ids == expected_ids()
    for key, payloads in seen.by_key.items():  # an ordered queue keeps each key's order
        assert payloads == sorted(payloads), key
    logged = [
        r
        for r in caplog.records
        if r.name.startswith("dynoq") and (r.levelno >= logging.ERROR or r.exc_info)
    ]
    assert logged == [], [r.getMessage() for r in logged]
    assert "Traceback" not in capfd.readouterr().err


def test_hundreds_of_callers_push_while_consumers_run(
    flavor: str,
    url: str,
    prefix: str,
    loop: Any,
    cleanup: None,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.WARNING, logger="dynoq")
    seen = Seen()
    errors: list[BaseException] = []
    if flavor == "sync":
        _sync_load(url, prefix, seen, errors)
    else:
        loop.run(_async_load(url, prefix, seen, errors), timeout=110)
    check(seen, errors, caplog, capfd)


def _sync_load(url: str, prefix: str, seen: Seen, errors: list[BaseException]) -> None:
    with dynoq.connect(url, prefix=prefix) as client:
        plain = client.queue("load", shards=4)
        ordered = client.queue("load-ordered", shards=4, ordered=True)
        consumers = [
            client.consumer(plain, seen.add, concurrency=8, **FAST),
            client.consumer(ordered, seen.add, concurrency=4, **FAST),
        ]
        for c in consumers:
            c.start()
        try:
            start = threading.Barrier(CALLERS)

            def caller(n: int) -> None:
                try:
                    start.wait(30)
                    for i in range(PLAIN_EACH):
                        plain.push(i, id=f"p{n}-{i}")
                    for i in range(ORDERED_EACH):
                        ordered.push(i, id=f"o{n}-{i}", key=f"k{n}")
                except BaseException as exc:  # noqa: BLE001 - what the test counts
                    errors.append(exc)

            threads = [threading.Thread(target=caller, args=(n,)) for n in range(CALLERS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            want = len(expected_ids())
            wait_for(
                lambda: len(seen.ids) >= want or bool(errors), timeout=60, what="every message"
            )
        finally:
            for c in consumers:
                c.stop(timeout=10)


async def _async_load(url: str, prefix: str, seen: Seen, errors: list[BaseException]) -> None:
    client = dynoq.asyncio.connect(url, prefix=prefix)
    try:
        plain = await client.queue("load", shards=4)
        ordered = await client.queue("load-ordered", shards=4, ordered=True)

        async def handle(msg: dynoq.Message) -> None:
            seen.add(msg)

        consumers = [
            client.consumer(plain, handle, concurrency=8, **FAST),
            client.consumer(ordered, handle, concurrency=4, **FAST),
        ]
        for c in consumers:
            await c.start()
        try:

            async def caller(n: int) -> None:
                try:
                    for i in range(PLAIN_EACH):
                        await plain.push(i, id=f"p{n}-{i}")
                    for i in range(ORDERED_EACH):
                        await ordered.push(i, id=f"o{n}-{i}", key=f"k{n}")
                except Exception as exc:  # noqa: BLE001 - what the test counts
                    errors.append(exc)

            await asyncio.gather(*(caller(n) for n in range(CALLERS)))
            want = len(expected_ids())
            deadline = time.monotonic() + 60
            while len(seen.ids) < want and not errors and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
        finally:
            for c in consumers:
                await c.stop(timeout=10)
    finally:
        await client.close()


@pytest.mark.sync_only
def test_blocked_pops_do_not_starve_the_callers(url: str, prefix: str, cleanup: None) -> None:
    """Each thread blocked in ``pop(wait=...)`` holds a wake-up subscription (one
    connection) for good: the pool grows by them, so commands still get connections."""
    with dynoq.connect(url, prefix=prefix, max_connections=2, pool_timeout=1.0) as client:
        q = client.queue("blocked", shards=2)
        got: list[dynoq.Message] = []
        errors: list[BaseException] = []

        def popper() -> None:
            try:
                deadline = time.monotonic() + 20
                while len(got) < 6 and time.monotonic() < deadline:
                    got.extend(q.pop(wait=0.5))
            except BaseException as exc:  # noqa: BLE001 - what the test counts
                errors.append(exc)

        threads = [threading.Thread(target=popper) for _ in range(6)]
        for t in threads:
            t.start()
        wait_for(
            lambda: client.backend.open_subscriptions >= 6 or bool(errors),
            timeout=10,
            what="six subscribed threads",
        )
        for i in range(6):
            q.push(i)
        for t in threads:
            t.join(30)
        assert errors == []
        assert sorted(m.payload for m in got) == list(range(6))


# -- a real exhaustion -----------------------------------------------------------------


def _take(pool: Any) -> Any:
    return pool.get_connection()


def _hold_sync(client: dynoq.Client) -> list[tuple[Any, Any]]:
    """Take every connection of the client's pool (each node's, on a cluster)."""
    r = client.redis
    pools = (
        [n.redis_connection.connection_pool for n in r.get_nodes()]
        if isinstance(r, redis.cluster.RedisCluster)
        else [r.connection_pool]
    )
    return [(p, _take(p)) for p in pools for _ in range(p.max_connections)]


async def _hold_async(client: Any) -> list[tuple[Any, Any]]:
    r = await client.backend.client()
    if isinstance(r, aredis.RedisCluster):
        held = []
        for node in r.get_nodes():
            while True:
                try:
                    held.append((node, node.acquire_connection()))
                except redis.exceptions.MaxConnectionsError:
                    break
        return held
    pool = r.connection_pool
    return [(pool, await pool.get_connection()) for _ in range(pool.max_connections)]


async def _give_back_async(held: list[tuple[Any, Any]]) -> None:
    for owner, conn in held:
        if isinstance(owner, aredis.cluster.ClusterNode):
            owner.release(conn)
        else:
            await owner.release(conn)


def test_a_real_exhaustion_raises_pool_exhausted_after_waiting(
    flavor: str, url: str, prefix: str, loop: Any, cleanup: None
) -> None:
    exhaust(flavor, url, prefix, loop)


def exhaust(flavor: str, url: str, prefix: str, loop: Any) -> None:
    """Take every connection of a client's pool of 2: a push waits ``pool_timeout``, then
    raises PoolExhausted; once they are given back, pushes go through again."""
    wait = 0.4
    if flavor == "sync":
        with dynoq.connect(url, prefix=prefix, max_connections=2, pool_timeout=wait) as c:
            q = c.queue("full")
            held = _hold_sync(c)
            started = time.monotonic()
            with pytest.raises(dynoq.PoolExhausted) as caught:
                q.push("x")
            waited = time.monotonic() - started
            for pool, conn in held:
                pool.release(conn)
            assert q.push("y", id="after")  # the pool serves again
    else:

        async def go() -> tuple[pytest.ExceptionInfo[dynoq.PoolExhausted], float]:
            c = dynoq.asyncio.connect(url, prefix=prefix, max_connections=2, pool_timeout=wait)
            try:
                q = await c.queue("full")
                held = await _hold_async(c)
                started = time.monotonic()
                with pytest.raises(dynoq.PoolExhausted) as caught:
                    await q.push("x")
                waited = time.monotonic() - started
                await _give_back_async(held)
                assert await q.push("y", id="after")
            finally:
                await c.close()
            return caught, waited

        caught, waited = loop.run(go())
    error = caught.value
    assert type(error) is dynoq.PoolExhausted
    assert isinstance(error, dynoq.DynoqError)
    assert not isinstance(error, (dynoq.ConnectionFailed, ConnectionError))
    text = str(error)
    assert "all 2 connections" in text and "max_connections" in text
    assert "pool_timeout" in text and "unreachable" not in text
    assert wait * 0.9 <= waited < wait + 5  # it waited about pool_timeout, then gave up


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (-1, dynoq.InvalidArgument),
        (0, dynoq.InvalidArgument),
        (math.nan, dynoq.InvalidArgument),
        (math.inf, dynoq.InvalidArgument),
        ("10", dynoq.InvalidType),
        (True, dynoq.InvalidType),
        (None, dynoq.InvalidType),
    ],
)
def test_bad_pool_timeout_is_refused(
    flavor: str, url: str, value: Any, kind: type[Exception]
) -> None:
    connect: Any = dynoq.connect if flavor == "sync" else dynoq.asyncio.connect
    with pytest.raises(kind, match="pool_timeout"):
        connect(url, pool_timeout=value)


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (0, dynoq.InvalidArgument),
        (-5, dynoq.InvalidArgument),
        (10**9, dynoq.InvalidArgument),
        (2.5, dynoq.InvalidType),
        ("8", dynoq.InvalidType),
        (False, dynoq.InvalidType),
        (None, dynoq.InvalidType),
    ],
)
def test_bad_max_connections_is_refused(
    flavor: str, url: str, value: Any, kind: type[Exception]
) -> None:
    connect: Any = dynoq.connect if flavor == "sync" else dynoq.asyncio.connect
    with pytest.raises(kind, match="max_connections"):
        connect(url, max_connections=value)


def test_a_wrapped_clients_pool_is_left_alone_and_its_exhaustion_translated(
    flavor: str, embedded_server: Any, prefix: str, loop: Any
) -> None:
    """``Client(redis_client)``: dynoq neither replaces nor grows the caller's pool, and
    a full one (redis-py's ConnectionPool does not wait) raises PoolExhausted at once."""
    host, port = embedded_server.host, int(embedded_server.port)
    if flavor == "sync":
        r = redis.Redis(host=host, port=port, max_connections=3)
        client = dynoq.Client(r, prefix=prefix)
        q = client.queue("wrapped")
        q.pop(wait=0.05)  # a wake-up subscription: held, and not made room for
        assert r.connection_pool.max_connections == 3
        assert type(r.connection_pool) is redis.ConnectionPool
        held = [r.connection_pool.get_connection() for _ in range(2)]
        with pytest.raises(dynoq.PoolExhausted, match=r"all 3 connections.*does not wait"):
            q.push("x")
        for conn in held:
            r.connection_pool.release(conn)
        q.clear()
        client.close()
        return

    async def go() -> None:
        r = aredis.Redis(host=host, port=port, max_connections=3)
        client = dynoq.asyncio.Client(r, prefix=prefix)
        try:
            q = await client.queue("wrapped")
            await q.pop(wait=0.05)  # the hub's subscription
            assert r.connection_pool.max_connections == 3
            held = [await r.connection_pool.get_connection() for _ in range(2)]
            with pytest.raises(dynoq.PoolExhausted, match=r"all 3 connections.*does not wait"):
                await q.push("x")
            for conn in held:
                await r.connection_pool.release(conn)
            await q.clear()
        finally:
            await client.close()
            await r.aclose()

    loop.run(go())


def test_sentinel_holds_under_load_and_names_an_exhausted_pool(
    flavor: str,
    prefix: str,
    loop: Any,
    request: pytest.FixtureRequest,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """redis+sentinel:// (the master's pool is a blocking sentinel pool)."""
    servers = request.getfixturevalue("sentinel_setup")
    url = f"redis+sentinel://127.0.0.1:{servers['sentinel']}/{SERVICE}"
    caplog.set_level(logging.WARNING, logger="dynoq")
    seen = Seen()
    errors: list[BaseException] = []
    if flavor == "sync":
        _sync_load(url, prefix, seen, errors)
    else:
        loop.run(_async_load(url, prefix, seen, errors), timeout=110)
    check(seen, errors, caplog, capfd)
    exhaust(flavor, url, prefix + "-x", loop)
