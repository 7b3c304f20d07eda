"""Stopping is awaited to its end wherever it starts: run() ending while another thread
or task is stopping the consumer returns only once that stop has finished, so closing
the client right after leaves the group cleanly."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest
from helpers import FAST, delete_prefix, wait_for

import dynoq
import dynoq.asyncio
from dynoq.consumer.group import members

FLAVORS = ("sync", "async")


def _dynoq_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("dynoq") and r.levelno >= logging.WARNING
    ]


def test_run_returns_after_a_stop_begun_elsewhere_has_finished(
    make_client: Callable[..., dynoq.Client],
    url: str,
    prefix: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = make_client()
    q = client.queue("stopping", shards=2)
    started, handled = threading.Event(), threading.Event()

    def handle(msg: dynoq.Message) -> None:
        started.set()
        # The stop waits for this call: it is still under way when run() sees it begin.
        handled.wait(0.6)

    c = client.consumer(q, handle, instance_id="m1", **FAST)
    runner = threading.Thread(target=c.run, name="runner")
    caplog.set_level(logging.WARNING, logger="dynoq")
    runner.start()
    q.push("x")
    assert started.wait(15)
    stopper = threading.Thread(target=c.stop, name="stopper")
    stopper.start()
    runner.join(15)
    assert not runner.is_alive()
    # run() returned: the stop it saw begin has finished, the member is gone at once.
    assert members(q, "default") == []
    client.close()
    stopper.join(15)
    assert not stopper.is_alive()
    assert _dynoq_warnings(caplog) == []
    with dynoq.connect(url, prefix=prefix) as fresh:
        q2 = fresh.queue("stopping")
        assert members(q2, "default") == []
        assert q2.stats().unacked == 0 and q2.size() == 0  # handled and acked
    delete_prefix(url, prefix)


def test_asyncio_run_and_stop_in_two_tasks_then_leave_the_client(
    url: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The shape: run() in one task, stop() from another, then `async with client`
    # ends while nobody awaited the stop.
    caplog.set_level(logging.WARNING, logger="dynoq")
    left: list[list[str]] = []

    async def main() -> None:
        async with dynoq.asyncio.connect(url, prefix=prefix) as client:
            q = await client.queue("stopping-tasks", shards=2)
            started = asyncio.Event()

            async def handle(msg: dynoq.Message) -> None:
                started.set()
                await asyncio.sleep(0.5)  # the stop waits for this call

            c = client.consumer(q, handle, instance_id="m1", **FAST)
            runner = asyncio.create_task(c.run())
            await q.push("x")
            await asyncio.wait_for(started.wait(), 15)
            stopper = asyncio.create_task(c.stop())  # never awaited by this code
            await asyncio.wait_for(runner, 15)
            assert stopper.done()  # run() returned with the stop, not before it
            left.append(await dynoq.asyncio.consumer.group.members(q, "default"))
        assert stopper.result() is True

    asyncio.run(main())
    assert left == [[]]
    assert _dynoq_warnings(caplog) == []
    with dynoq.connect(url, prefix=prefix) as fresh:
        q = fresh.queue("stopping-tasks")
        assert members(q, "default") == [] and q.stats().unacked == 0 and q.size() == 0
    delete_prefix(url, prefix)


def test_every_stop_call_waits_for_the_one_stop(client: dynoq.Client) -> None:
    q = client.queue("stop-twice", shards=1)
    started = threading.Event()

    def handle(msg: dynoq.Message) -> None:
        started.set()
        threading.Event().wait(0.5)

    c = client.consumer(q, handle, **FAST)
    c.start()
    q.push("x")
    assert started.wait(15)
    results: list[bool] = []
    first = threading.Thread(target=lambda: results.append(c.stop(10)))
    first.start()
    # The first stop is under way (it waits for the handler's call).
    wait_for(lambda: c._shared.stopping.is_set(), what="the first stop begun")
    assert first.is_alive()
    second = c.stop(10)  # begun elsewhere: waits for it, then reports its result
    assert members(q, "default") == [] and q.stats().unacked == 0
    first.join(15)
    assert results == [True] and second is True


@pytest.mark.sync_only  # asyncio: an async def handler, below (a thread cannot await)
def test_a_handler_may_stop_its_own_consumer(client: dynoq.Client) -> None:
    q = client.queue("self-stop", shards=1)
    box: list[Any] = []

    def handle(msg: dynoq.Message) -> None:
        box[0].stop(10)  # waits for the rest of the consumer, not for itself

    c = client.consumer(q, handle, **FAST)
    box.append(c)
    c.start()
    q.push("x")
    wait_for(lambda: members(q, "default") == [], what="the member gone")
    wait_for(lambda: q.stats().unacked == 0 and q.size() == 0, what="the message acked")


def test_an_async_handler_may_stop_its_own_consumer(url: str, prefix: str) -> None:
    async def main() -> tuple[list[str], int, int, bool]:
        async with dynoq.asyncio.connect(url, prefix=prefix) as client:
            q = await client.queue("self-stop-async", shards=1)
            box: list[Any] = []

            async def handle(msg: dynoq.Message) -> None:
                box.append(await box[0].stop(10))  # the stop does not wait for this task

            c = client.consumer(q, handle, **FAST)
            box.append(c)
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            await c.start()
            await q.push("x")
            await asyncio.wait_for(c.run(), 15)  # returns once the handler's stop ended
            stats = await q.stats()
            return (
                await dynoq.asyncio.consumer.group.members(q, "default"),
                stats.unacked + stats.ready,
                len(box),
                loop.time() - t0 < 5,
            )

    assert asyncio.run(main()) == ([], 0, 2, True)
    delete_prefix(url, prefix)


def test_consumers_run_stops_every_consumer_also_when_one_fails_to_start(
    flavor: str, url: str, prefix: str
) -> None:
    """Consumers.run (a task worker) stops its consumers when a start fails, as
    Consumer.run does: the one whose start failed after joining leaves the group too
    (the thread flavor once left it a member until its heartbeat ran out)."""

    def nothing(msg: dynoq.Message) -> None: ...

    async def anothing(msg: dynoq.Message) -> None: ...

    if flavor == "sync":
        with dynoq.connect(url, prefix=prefix) as client:
            q1, q2 = client.queue("many-1", shards=1), client.queue("many-2", shards=1)
            c1 = client.consumer(q1, nothing, instance_id="m1", **FAST)
            c2 = client.consumer(q2, nothing, instance_id="m2", **FAST)
            real = c2.start

            def failing() -> dynoq.Consumer:
                real()
                raise RuntimeError("boom")

            c2.start = failing  # type: ignore[method-assign]
            with pytest.raises(RuntimeError, match="boom"):
                dynoq.Consumers([c1, c2]).run(stop_timeout=10)
            left = (members(q1, "default"), members(q2, "default"))
    else:

        async def main() -> tuple[list[str], list[str]]:
            async with dynoq.asyncio.connect(url, prefix=prefix) as client:
                q1 = await client.queue("many-1", shards=1)
                q2 = await client.queue("many-2", shards=1)
                c1 = client.consumer(q1, anothing, instance_id="m1", **FAST)
                c2 = client.consumer(q2, anothing, instance_id="m2", **FAST)
                real = c2.start

                async def failing() -> dynoq.asyncio.Consumer:
                    await real()
                    raise RuntimeError("boom")

                c2.start = failing  # type: ignore[method-assign]
                with pytest.raises(RuntimeError, match="boom"):
                    await dynoq.asyncio.Consumers([c1, c2]).run(stop_timeout=10)
                group = dynoq.asyncio.consumer.group
                return (await group.members(q1, "default"), await group.members(q2, "default"))

        left = asyncio.run(main())
    delete_prefix(url, prefix)
    assert left == ([], [])
