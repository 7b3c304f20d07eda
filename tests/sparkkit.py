"""The fixtures every in-process Spark test module shares (import them by name): one
SparkSession for the whole run (under pytest-xdist every Spark test runs in one worker:
see conftest.py), one real server, a client with a private prefix per test."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import delete_prefix

import dynoq


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from dynoq.spark import spark_session

    # Spark's Python workers import test helpers (spark_gate) from this folder. Their
    # PYTHONPATH is the JVM's (fixed when it started: maybe by a doc block, earlier in
    # this worker) and spark.executorEnv's.
    here = str(Path(__file__).parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
    session, started = spark_session(
        "dynoq-tests",
        "local[2,4]",
        config={"spark.default.parallelism": "2", "spark.executorEnv.PYTHONPATH": here},
    )
    yield session
    if started:
        session.stop()


@pytest.fixture(scope="module")
def server_url(request: pytest.FixtureRequest) -> str:
    """One real server for the Spark tests: $REDIS_URL if set, else the embedded one."""
    if os.environ.get("REDIS_URL"):
        return os.environ["REDIS_URL"]
    server = request.getfixturevalue("embedded_server")
    return f"redis://{server.host}:{server.port}/0"


@pytest.fixture
def sclient(server_url: str) -> Iterator[dynoq.Client]:
    prefix = f"dqt-{uuid.uuid4().hex[:12]}"
    c = dynoq.connect(server_url, prefix=prefix)
    yield c
    c.close()
    delete_prefix(server_url, prefix)
