"""What only dynoq.asyncio has: cancellation, tasks sharing one loop, stopping mid-batch,
sync and async clients on the same queues, the sync-handler rule, laziness. The queue and
consumer suites run on dynoq.asyncio too (FLAVORS in test_queue.py, test_consumer.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest
from helpers import delete_prefix

import dynoq
import dynoq.asyncio

FAST = {"lease_ttl": 2.0, "rebalance_interval": 5.0, "idle_wait": 0.5}


@pytest.fixture
def run(url: str, prefix: str) -> Iterator[Callable[..., Any]]:
    """Run ``fn(client)`` (a coroutine function) on a fresh event loop with an asyncio
    client of the test's backend and prefix; keys deleted after."""

    def go(fn: Callable[[dynoq.asyncio.Client], Coroutine[Any, Any, Any]]) -> Any:
        async def main() -> Any:
            async with dynoq.asyncio.connect(url, prefix=prefix) as client:
                return await fn(client)

        return asyncio.run(main())

    yield go
    delete_prefix(url, prefix)


def test_cancelled_pop_wait_claims_nothing(run: Callable[..., Any]) -> None:
    async def body(client: dynoq.asyncio.Client) -> None:
        q = await client.queue("cancel", shards=2)
        waiting = asyncio.create_task(q.pop(wait=30))
        await asyncio.sleep(0.3)  # blocked in the wait (subscribed, nothing there)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await q.push("after")
        await asyncio.sleep(0.1)
        stats = await q.stats()
        assert (stats.ready, stats.unacked) == (1, 0)  # nobody claimed it
        [m] = await q.pop(wait=1)
        assert m.payload == "after" and m.attempts == 1

    run(body)


def test_a_handler_past_consume_timeout_fails_alone(run: Callable[..., Any]) -> None:
    # One timer watches the whole batch (the fast path): the call that runs over is
    # cancelled and fails (dead-lettered: no retries), the calls around it are not.
    async def body(client: dynoq.asyncio.Client) -> None:
        q = await client.queue("overrun", shards=1, max_retries=0)
        seen: list[int] = []
        swallowed: list[int] = []

        async def handler(msg: dynoq.Message) -> None:
            if msg.payload == 2:
                await asyncio.sleep(30)
            if msg.payload == 4:  # a handler that eats its cancellation still overran
                try:
                    await asyncio.sleep(30)
                except asyncio.CancelledError:
                    swallowed.append(4)
                    return
            await asyncio.sleep(0.05)  # each call well inside the limit, the batch not
            seen.append(msg.payload)

        await q.push_many(list(range(8)))
        c = client.consumer(
            q, handler, consume_timeout=0.3, batch_size=8, concurrency=1, idle_wait=0.1, lease_ttl=2
        )
        async with c:
            for _ in range(300):
                if (await q.stats()).dead == 2 and len(seen) == 6:
                    break
                await asyncio.sleep(0.05)
        assert sorted(seen) == [0, 1, 3, 5, 6, 7] and swallowed == [4]
        assert sorted(m.payload for m in await q.dead()) == [2, 4]
        assert all(m.failure and m.failure.error_type == "ConsumeTimeout" for m in await q.dead())
        assert c.stats().handled == 6

    run(body)


def test_a_slow_awaiting_handler_does_not_block_the_others(run: Callable[..., Any]) -> None:
    async def body(client: dynoq.asyncio.Client) -> None:
        q = await client.queue("slow", shards=2)
        slow_started, release = asyncio.Event(), asyncio.Event()
        fast: list[int] = []

        async def handler(msg: dynoq.Message) -> None:
            if msg.payload == "slow":
                slow_started.set()
                await release.wait()  # awaits for as long as the test wants
            else:
                fast.append(msg.payload)

        await q.push("slow")
        c = client.consumer(q, handler, concurrency=2, batch_size=1, **FAST)
        await c.start()
        await asyncio.wait_for(slow_started.wait(), 10)
        await q.push_many(range(50))
        deadline = time.monotonic() + 15
        while c.stats().handled < 50 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert sorted(fast) == list(range(50))  # handled (and acked) while "slow" waits
        assert c.stats().handled == 50 and not release.is_set()
        release.set()
        assert await c.stop(10)
        assert c.stats().handled == 51

    run(body)


def test_stop_mid_batch_leaves_nothing_in_flight(run: Callable[..., Any]) -> None:
    async def body(client: dynoq.asyncio.Client) -> None:
        q = await client.queue("midbatch", shards=1, unack_timeout=60)
        handled: list[int] = []

        async def handler(msg: dynoq.Message) -> None:
            if msg.payload >= 3:
                await asyncio.sleep(60)  # far longer than stop() waits
            handled.append(msg.payload)

        await q.push_many(range(10))
        c = client.consumer(q, handler, concurrency=1, batch_size=10, **FAST)
        await c.start()
        deadline = time.monotonic() + 10
        while len(handled) < 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert not await c.stop(timeout=0.3)  # cut short: the worker was cancelled
        stats = await q.stats()
        # The 3 handled were acked, the 7 others given back at once: nothing waits for
        # the 60 s visibility timeout, and no attempt was counted.
        assert (stats.unacked, stats.ready) == (0, 7)
        again = await q.pop(10)
        assert sorted(m.payload for m in again) == list(range(3, 10))
        assert {m.attempts for m in again} == {1}
        assert client.backend.open_subscriptions == 0

    run(body)


def test_sync_and_async_clients_share_queues(
    url: str, prefix: str, run: Callable[..., Any]
) -> None:
    with dynoq.connect(url, prefix=prefix) as sync:
        sq = sync.queue("both", shards=3)
        sq.push_many(range(20))
        sq.push("keyed", id="k1", priority=5)

        async def body(client: dynoq.asyncio.Client) -> None:
            q = await client.queue("both")
            assert q.settings == sq.settings
            got: list[Any] = []

            async def handler(msg: dynoq.Message) -> None:
                got.append(msg.payload)

            c = client.consumer(q, handler, **FAST)
            await c.start()
            deadline = time.monotonic() + 10
            while len(got) < 21 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert await c.stop(10)
            assert sorted(got, key=str) == sorted([*range(20), "keyed"], key=str)
            await q.push({"from": "async"}, id="a1")

        run(body)
        [m] = sq.pop()
        assert (m.id, m.payload) == ("a1", {"from": "async"})
        assert sq.ack(m) and sq.stats().size == 0


def test_sync_handler_is_refused_unless_run_in_thread(run: Callable[..., Any]) -> None:
    async def body(client: dynoq.asyncio.Client) -> None:
        q = await client.queue("rule", shards=1)
        with pytest.raises(dynoq.InvalidType, match="run_in_thread=True"):
            client.consumer(q, lambda m: None)

        async def handler(msg: dynoq.Message) -> None:
            pass

        with pytest.raises(TypeError, match="for a sync handler"):
            client.consumer(q, handler, run_in_thread=True)
        with pytest.raises(TypeError):
            client.consumer(q, handler, no_such_option=1)
        with pytest.raises(ValueError):
            client.consumer(q, handler, concurrency=0)
        seen: list[str] = []
        await q.push("t")
        c = client.consumer(q, lambda m: seen.append(m.payload), run_in_thread=True, **FAST)
        await c.start()
        deadline = time.monotonic() + 10
        while not seen and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert await c.stop(10) and seen == ["t"]

    run(body)


def test_async_hooks_are_awaited_and_run_stops(run: Callable[..., Any]) -> None:
    async def body(client: dynoq.asyncio.Client) -> None:
        q = await client.queue("hooks", shards=1)
        events: list[str] = []

        class Trace(dynoq.asyncio.Middleware):
            async def before(self, msg: dynoq.Message) -> None:  # type: ignore[override]
                await asyncio.sleep(0)
                events.append(f"before {msg.payload}")

            def after(
                self, msg: dynoq.Message, error: BaseException | None, seconds: float
            ) -> None:
                events.append(f"after {msg.payload} {type(error).__name__}")

        async def handler(msg: dynoq.Message) -> None:
            events.append(f"handle {msg.payload}")

        c = client.consumer(q, handler, middleware=[Trace()], **FAST)
        runner = asyncio.create_task(c.run())
        await q.push("m")
        deadline = time.monotonic() + 10
        while len(events) < 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert events == ["before m", "handle m", "after m NoneType"]
        await c.stop()
        await asyncio.wait_for(runner, 10)  # run() returns once stopped

    run(body)


def test_sweeper_passes(run: Callable[..., Any]) -> None:
    async def body(client: dynoq.asyncio.Client) -> None:
        q = await client.queue("sweep", shards=2)
        await q.push_many(range(4))
        assert len(await q.pop(4, visibility=0.05)) == 4
        await asyncio.sleep(0.1)
        sweeper = client.sweeper(interval=0.02)
        assert (await sweeper.run_once()).total().requeued == 4
        forever = asyncio.create_task(sweeper.run_forever())
        await asyncio.sleep(0.1)
        sweeper.stop()
        totals = await asyncio.wait_for(forever, 10)
        assert totals.passes >= 1 and (await q.stats()).ready == 4

    run(body)


def test_connect_is_lazy_and_outside_a_loop() -> None:
    client = dynoq.asyncio.connect(
        "redis://127.0.0.1:1/0", prefix="lazy", retry=None, socket_connect_timeout=0.5
    )
    assert "127.0.0.1:1" in repr(client)
    with pytest.raises(dynoq.InvalidArgument):
        dynoq.asyncio.connect("ftp://nowhere")

    async def first_use() -> None:
        with pytest.raises(dynoq.ConnectionFailed):
            await client.queue("q")
        await client.close()

    asyncio.run(first_use())


def test_password_never_shown() -> None:
    client = dynoq.asyncio.connect("redis://user:s3cret@127.0.0.1:1/0")
    assert "s3cret" not in repr(client) and "s3cret" not in repr(client.backend)
    assert "s3cret" in client.url  # usable by other processes


def test_wrapping_a_redis_asyncio_client(real_url: str, prefix: str) -> None:
    import redis.asyncio as aredis
    from redis.asyncio.cluster import RedisCluster

    from dynoq.backend.hosts import host_list

    async def body() -> None:
        if real_url.startswith("redis+cluster://"):
            host, port = host_list(real_url, "cluster node")[0]
            r: Any = RedisCluster(host=host, port=port)
        else:
            r = aredis.Redis.from_url(real_url)
        client = dynoq.asyncio.Client(r, prefix=prefix)
        q = await client.queue("wrapped", shards=6)
        await q.push_many(range(30))
        got = await q.pop(30)
        assert len(got) == 30 and await q.ack_many(got) == 30
        assert await client.ping()
        await client.close()  # leaves the caller's client open
        assert await r.ping()
        await r.aclose()

    try:
        asyncio.run(body())
    finally:
        delete_prefix(real_url, prefix)


def test_an_async_handler_that_stalls_gives_the_rest_of_its_batch_back(
    run: Callable[..., Any],
) -> None:
    # batch_size "auto" (the default) on the no-middleware fast path: once a call has
    # run a second, the messages behind it in its batch go to the other worker task.
    async def body(client: dynoq.asyncio.Client) -> None:
        q = await client.queue("stall", shards=1)
        seen: list[object] = []
        release = asyncio.Event()

        async def handler(msg: dynoq.Message) -> None:
            if msg.payload == "stuck":
                await asyncio.wait_for(release.wait(), 30)
            seen.append(msg.payload)

        async with client.consumer(q, handler, concurrency=2, **FAST):
            await q.push_many(list(range(1000)))  # the batches grow to their cap
            for _ in range(300):
                if len(seen) >= 1000:
                    break
                await asyncio.sleep(0.05)
            await q.push_many(["stuck", *range(1000, 1100)])
            for _ in range(200):  # 10 s; without the hand-back they wait for "stuck"
                if len(seen) >= 1100:
                    break
                await asyncio.sleep(0.05)
            handled = len(seen)
            release.set()
            for _ in range(100):
                if len(seen) >= 1101:
                    break
                await asyncio.sleep(0.05)
        assert handled == 1100
        assert sorted(x for x in seen if x != "stuck") == list(range(1100))

    run(body)
