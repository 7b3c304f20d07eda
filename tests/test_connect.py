"""URLs and backends of dynoq.connect()."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest
import redis
from helpers import shard_keys

import dynoq
import dynoq.asyncio

FLAVORS = ("sync", "async")  # the tests that take the flavor fixture run on both clients
ASYNC_BACKENDS = "all"  # the I/O itself: the async client on every backend


def test_unix_socket_url(embedded_server: Any) -> None:
    with dynoq.connect(f"unix://{embedded_server.socket_file}", prefix="unix-t") as c:
        q = c.queue("u", shards=1)
        q.push("via socket")
        assert q.pop()[0].payload == "via socket"
        q.clear()


def test_url_from_environment(embedded_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DYNOQ_URL", f"redis://{embedded_server.host}:{embedded_server.port}/0")
    with dynoq.connect(prefix="env-t") as c:
        assert c.url.endswith(f":{embedded_server.port}/0")
        assert c.ping()


def test_default_url_without_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DYNOQ_URL", raising=False)
    from dynoq.backend import DEFAULT_URL

    try:
        c = dynoq.connect(socket_connect_timeout=0.5, retry=None)
    except dynoq.ConnectionFailed as exc:  # no server on this machine's default port
        assert "localhost:6379" in str(exc) or "6379" in str(exc)
    else:
        assert c.url == DEFAULT_URL
        c.close()


def test_embedded_url_starts_and_stops_a_private_server() -> None:
    c = dynoq.connect("embedded://", prefix="emb")
    url = c.url
    assert url.startswith("redis://127.0.0.1:")
    other = redis.Redis.from_url(url)  # other processes can use the URL
    q = c.queue("e", shards=2)
    q.push("x")
    assert other.hlen(shard_keys(q, q.shard_for(q.peek()[0].id or "")).msgs) == 1
    c.close()
    with pytest.raises(redis.ConnectionError):
        other.ping()
    other.close()


def test_client_is_a_context_manager_and_repr(url: str, prefix: str, make_client: Any) -> None:
    # make_client is not called: it is asked for so that its teardown deletes the prefix
    with dynoq.connect(url, prefix=prefix) as c:
        assert prefix in repr(c)
        assert "orders" in repr(c.queue("orders", shards=1))


@pytest.mark.parametrize("missing", ["fakeredis", "lupa"])
def test_memory_without_its_extra_says_what_to_install(
    missing: str, flavor: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: a bare ModuleNotFoundError (fakeredis), or "unknown command 'evalsha'" at
    # the first script (lupa, which runs fakeredis' Lua).
    monkeypatch.setitem(sys.modules, missing, None)
    with pytest.raises(dynoq.ConnectionFailed, match=r"pip install 'dynoq\[memory\]'"):
        if flavor == "sync":
            dynoq.connect("memory://no-extra").queue("q").push(1)
        else:

            async def use() -> None:
                client = dynoq.asyncio.connect("memory://no-extra")
                try:
                    await (await client.queue("q")).push(1)
                finally:
                    await client.close()

            asyncio.run(use())
