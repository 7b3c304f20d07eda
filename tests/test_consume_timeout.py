"""A handler call past consume_timeout. On an ordered shard it never lets the shard move
on while it may still run (no two calls of one shard, so of one key, ever overlap); on a
concurrent queue its message fails at once and is retried, as documented. Calls left
running are bounded (at most ``concurrency`` per consumer), counted in the stats and
logged when left and when they return. The async flavor runs the sync handlers with
``run_in_thread=True``: the same problem, threads that cannot be stopped."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from helpers import FAST, delete_prefix, wait_for

import dynoq
import dynoq.asyncio
from dynoq import Message
from dynoq._core.board import Abandoned, DeliveryState, InFlightBatch, extended, ran_out
from dynoq._core.keys import shard_of

FLAVORS = ("sync", "async")

# Ordered consumers here hold their leases far from the margin under which no handler
# starts (a third of lease_ttl), however loaded the machine: what is tested is the
# overrun, not lease renewal (a lost lease would take the shard over, fence and all).
HELD = {**FAST, "lease_ttl": 10.0}


@dataclass(frozen=True)
class Call:
    payload: Any
    key: str | None
    shard: int | None
    attempts: int
    fence: int | None
    start: float
    end: float


class Calls:
    """Every handler call, with when it began and ended, and the most that ran at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done: list[Call] = []
        self.running = 0
        self.peak = 0

    def handler(self, body: Callable[[dynoq.Message], None]) -> Callable[[dynoq.Message], None]:
        def handle(msg: dynoq.Message) -> None:
            start = time.monotonic()
            with self.lock:
                self.running += 1
                self.peak = max(self.peak, self.running)
            try:
                body(msg)
            finally:
                with self.lock:
                    self.running -= 1
                    self.done.append(
                        Call(
                            msg.payload,
                            msg.key,
                            msg.shard,
                            msg.attempts,
                            msg.fence,
                            start,
                            time.monotonic(),
                        )
                    )

        return handle

    def of(self, payload: Any) -> list[Call]:
        with self.lock:
            return [c for c in self.done if c.payload == payload]

    def overlapping(self, same: Callable[[Call, Call], bool]) -> list[tuple[Call, Call]]:
        with self.lock:
            calls = sorted(self.done, key=lambda c: c.start)
        return [
            (a, b)
            for i, a in enumerate(calls)
            for b in calls[i + 1 :]
            if same(a, b) and b.start < a.end
        ]


class Sampler:
    """Reads ``c.stats().abandoned`` every few ms while the test runs: its highest."""

    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer
        self.highest = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self.highest = max(self.highest, self.consumer.stats().abandoned)

    def close(self) -> int:
        self._stop.set()
        self._thread.join(5)
        return self.highest


@pytest.fixture
def sampled() -> Iterator[list[Sampler]]:
    made: list[Sampler] = []
    yield made
    for s in made:
        s.close()


def _keys(shards: int) -> list[str]:
    """One key per shard (a key's messages all live in its shard)."""
    found: dict[int, str] = {}
    i = 0
    while len(found) < shards:
        found.setdefault(shard_of(f"key-{i}", shards), f"key-{i}")
        i += 1
    return [found[s] for s in range(shards)]


def test_an_ordered_shard_never_moves_on_while_a_timed_out_call_runs(
    client: dynoq.Client,
    consumers: list[Any],
    sampled: list[Sampler],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The trial: a poison message that always sleeps past consume_timeout ran 4
    # times at once with the messages after it, every call at fence 1.
    q = client.queue("ordered-overrun", shards=2, ordered=True, max_retries=2)
    poison_key, other_key = _keys(2)
    calls = Calls()

    def body(msg: dynoq.Message) -> None:
        time.sleep(1.0 if msg.payload == "poison" else 0.01)

    caplog.set_level(logging.WARNING, logger="dynoq")
    c = client.consumer(
        q, calls.handler(body), consume_timeout=0.3, retry_delays=[0.05], concurrency=2, **HELD
    )
    consumers.append(c.start())
    sampled.append(Sampler(c))
    q.push_many(
        [Message(p, key=poison_key) for p in ("a", "poison", "b", "c")]
        + [Message(i, key=other_key) for i in range(20)]
    )
    wait_for(
        lambda: (
            len(calls.of("c")) == 1
            and len(calls.of(19)) == 1
            and len(calls.of("poison")) == 3
            and calls.running == 0
        ),
        timeout=30,
        what="both shards handled, every call ended",
    )

    assert calls.overlapping(lambda a, b: a.shard == b.shard) == []  # so no key either
    poison = calls.of("poison")
    assert [p.attempts for p in poison] == [1, 2, 3]  # one at a time, then dead-lettered
    assert calls.of("b")[0].start >= poison[-1].end  # the shard waited for the last call
    with calls.lock:
        order = [
            x.payload for x in sorted(calls.done, key=lambda x: x.start) if x.key == poison_key
        ]
        assert [
            x.payload for x in sorted(calls.done, key=lambda x: x.start) if x.key == other_key
        ] == list(range(20))
    assert order == ["a", "poison", "poison", "poison", "b", "c"]
    assert len({x.fence for x in calls.done}) == 1  # no takeover: the shard never moved on
    [dead] = q.dead()
    assert dead.payload == "poison" and dead.failure is not None
    assert dead.failure.error_type == "ConsumeTimeout"
    # (a call's message is settled, and counted, just after the call has returned)
    wait_for(
        lambda: c.stats().handled == 23 and c.stats().abandoned == 0,
        what="every message settled, every left call counted back",
    )
    stats = c.stats()
    assert (stats.timed_out, stats.handled, stats.dead_lettered) == (3, 23, 1)
    assert sampled[0].close() <= 2  # at most concurrency calls left running
    log = [r.getMessage() for r in caplog.records if r.name == "dynoq.consumer"]
    left = [m for m in log if "its thread is left running" in m]
    back = [m for m in log if "returned after" in m]
    assert len(left) == 3 and len(back) == 3
    assert all(dead.id in m for m in left + back) and all("shard" in m for m in left)


def test_calls_left_running_are_bounded(
    client: dynoq.Client, consumers: list[Any], sampled: list[Sampler]
) -> None:
    # Concurrency 1, every call hangs past its timeout: once one call is left running,
    # the next stuck worker is not replaced but waits, so at most 2 calls run at once
    # (the issue saw 7 threads at once, never reclaimed).
    q = client.queue("bounded-overrun", shards=1, max_retries=0)
    calls = Calls()
    c = client.consumer(
        q, calls.handler(lambda m: time.sleep(0.6)), consume_timeout=0.1, concurrency=1, **FAST
    )
    consumers.append(c.start())
    sampled.append(Sampler(c))
    q.push_many(list(range(6)))
    wait_for(lambda: q.stats().dead == 6, timeout=30, what="every message timed out")
    wait_for(lambda: len(calls.done) == 6 and c.stats().abandoned == 0, what="every call returned")
    assert calls.peak <= 2  # one worker, one call left running
    assert sampled[0].close() <= 1
    assert c.stats().timed_out == 6
    assert all(m.failure is not None and m.failure.error_type == "ConsumeTimeout" for m in q.dead())


def test_a_concurrent_queue_fails_a_timed_out_message_at_once(
    client: dynoq.Client, consumers: list[Any]
) -> None:
    # As documented: on a concurrent queue the message fails at consume_timeout and is
    # retried (after its retry delay) even while the call left running has not returned;
    # the worker is replaced, so the other messages go on meanwhile.
    q = client.queue("concurrent-overrun", shards=1, max_retries=1)
    release = threading.Event()
    calls = Calls()

    def body(msg: dynoq.Message) -> None:
        if msg.payload == "slow" and msg.attempts == 1:
            release.wait(20)

    c = client.consumer(
        q, calls.handler(body), consume_timeout=0.2, retry_delays=[0.05], concurrency=1, **FAST
    )
    consumers.append(c.start())
    q.push_many(["slow", *range(5)])
    try:
        wait_for(
            lambda: len(calls.of("slow")) == 1 and all(calls.of(i) for i in range(5)),
            what="the retry and the others handled while the first call runs",
        )
        assert c.stats().abandoned == 1 and c.stats().timed_out == 1
    finally:
        release.set()
    wait_for(
        lambda: len(calls.of("slow")) == 2 and c.stats().abandoned == 0,
        what="the left call returned",
    )
    first, retry = sorted(calls.of("slow"), key=lambda x: x.attempts)
    assert retry.start < first.end  # the retry did not wait for the call left running
    wait_for(lambda: c.stats().handled == 6, what="every ack")
    assert q.stats().dead == 0


def test_a_hung_ordered_handler_holds_only_its_shard(
    client: dynoq.Client, consumers: list[Any]
) -> None:
    # A call that never returns (until released) keeps its shard blocked however long
    # (the fence never changes), while a new worker takes the other shard.
    q = client.queue("hung-ordered", shards=2, ordered=True, max_retries=1)
    hung_key, free_key = _keys(2)
    release, hung = threading.Event(), threading.Event()
    calls = Calls()

    def body(msg: dynoq.Message) -> None:
        if msg.payload == "hang":
            hung.set()
            release.wait(20)

    c = client.consumer(
        q, calls.handler(body), consume_timeout=0.2, retry_delays=[0.05], concurrency=1, **HELD
    )
    consumers.append(c.start())
    q.push_many([Message(p, key=hung_key) for p in ("first", "hang", "after-1", "after-2")])
    try:
        assert hung.wait(15)
        # The only worker is stuck: these are handled only if another takes its place.
        q.push_many([Message(i, key=free_key) for i in range(5)])
        wait_for(
            lambda: all(calls.of(i) for i in range(5)),
            what="the other shard handled by a new worker",
        )
        # The first call is hung: for as long as we look (well past several timeouts
        # and retry delays), nothing after it in its shard is delivered.
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            assert not calls.of("after-1") and not calls.of("hang")
            assert q.stats().unacked == 1  # the hung message, still in flight
            time.sleep(0.05)
        assert c.stats().abandoned == 1 and c.stats().timed_out == 1
    finally:
        release.set()
    wait_for(lambda: len(calls.of("after-2")) == 1, what="the shard to move on")
    with calls.lock:
        order = [x.payload for x in sorted(calls.done, key=lambda x: x.start) if x.key == hung_key]
    assert order == ["first", "hang", "hang", "after-1", "after-2"]  # retried once, in place
    assert [x.attempts for x in calls.of("hang")] == [1, 2]
    assert calls.overlapping(lambda a, b: a.shard == b.shard) == []
    wait_for(lambda: c.stats().handled == 9, what="the last ack")  # just after the call
    assert q.stats().dead == 0


def test_a_timed_out_coroutine_has_ended_before_its_shard_moves_on(url: str, prefix: str) -> None:
    # asyncio: a coroutine past consume_timeout is cancelled, and the shard moves on only
    # once it has ended, even one that swallows its cancellation (it still ran over: it
    # fails with ConsumeTimeout, here dead-lettered, and is not acked).
    events: list[tuple[str, Any]] = []

    async def main() -> tuple[list[Any], int]:
        async with dynoq.asyncio.connect(url, prefix=prefix) as client:
            q = await client.queue("coroutine-overrun", shards=1, ordered=True, max_retries=0)

            async def handle(msg: dynoq.Message) -> None:
                events.append(("start", msg.payload))
                if msg.payload == "stubborn":
                    try:
                        await asyncio.sleep(30)
                    except asyncio.CancelledError:
                        await asyncio.sleep(0.5)  # goes on for a while, then returns
                events.append(("end", msg.payload))

            c = client.consumer(q, handle, consume_timeout=0.2, retry_delays=[0.05], **HELD)
            async with c:
                await q.push_many([Message(p, key="k") for p in ("stubborn", "next")])
                for _ in range(300):
                    if ("end", "next") in events:
                        break
                    await asyncio.sleep(0.02)
            return [
                m.failure.error_type if m.failure else None for m in await q.dead()
            ], c.stats().timed_out

    dead, timed_out = asyncio.run(main())
    delete_prefix(url, prefix)
    assert events == [
        ("start", "stubborn"),
        ("end", "stubborn"),
        ("start", "next"),
        ("end", "next"),
    ]
    assert dead == ["ConsumeTimeout"] and timed_out == 1


# -- the pure bookkeeping (dynoq._core.board) ---------------------------------------------


def test_overdue_keeps_an_ordered_batch_with_its_worker() -> None:
    # A running call is marked once; an ordered batch stays with its worker (still
    # extended), a concurrent one is the watchdog's to settle.
    state = DeliveryState()
    ordered, concurrent = (InFlightBatch([Message(i)], 0, 0.0, 0) for i in range(2))
    state.start(1, ordered)
    state.start(2, concurrent)

    def one_second(msgs: Any) -> float:  # every call's timeout (a task's: its own)
        return 1.0

    assert state.overdue(100.0, one_second, ordered=True) == []  # no call runs: none late
    ordered.call_started = concurrent.call_started = 10.0
    assert state.overdue(10.5, one_second, ordered=True) == []  # within the timeout
    assert [w for w, _ in state.overdue(12.0, one_second, ordered=True)] == [1, 2]
    assert ordered.overran and not ordered.abandoned  # its worker settles it later
    assert state.overdue(99.0, one_second, ordered=True) == []  # once
    assert state.slow(99.0, 1.0) == [ordered, concurrent]  # still extended
    assert state.settle(1)  # the worker may settle it when the call returns
    other = InFlightBatch([Message(9)], None, 0.0, 1)
    state.start(3, other)
    other.call_started = 10.0
    other.calling = other.msgs
    by_call: dict[int, float] = {9: 5.0}  # its message's own timeout: 5 s
    assert state.overdue(12.0, lambda ms: by_call[ms[0].payload], ordered=False) == []
    [(_, late)] = state.overdue(15.5, lambda ms: by_call[ms[0].payload], ordered=False)
    assert late.overran and late.abandoned and not state.settle(3)  # the watchdog's now


def test_abandon_all_spares_the_worker_that_stops_its_consumer() -> None:
    state = DeliveryState()
    for worker in (1, 2, 3):
        state.start(worker, InFlightBatch([Message(worker)], None, 0.0, 0))
    assert state.settle(3)  # being settled: too late to take
    assert [w for w, _ in state.abandon_all(keep=1)] == [2]


def test_calls_left_running_have_a_cap() -> None:
    left = Abandoned(2)
    assert left.take() and left.take() and not left.take()
    left.returned()
    assert left.take() and left.count == 2


def test_an_extension_restarts_a_batch_clock_only_when_it_went_through() -> None:
    # The clock of a batch restarts when its extension was asked (not when the upkeep
    # looked); a delivery found no longer in flight makes it lapsed; a failed request
    # (an exception: `extended` is never called) leaves the clock running.
    state = DeliveryState()
    batch = InFlightBatch([Message(1), Message(2)], None, 0.0, 0)
    state.start(1, batch)
    assert state.slow(0.4, 0.5) == [] and state.slow(0.6, 0.5) == [batch]
    assert state.slow(0.7, 0.5) == [batch]  # looked at, not extended: asked again
    assert ran_out(batch, 0.95, 1.0) and not ran_out(batch, 0.85, 1.0)
    extended(batch, 0.7, [True, True])
    assert state.slow(1.1, 0.5) == [] and not ran_out(batch, 1.5, 1.0)
    extended(batch, 1.3, [True, False])  # one was given back meanwhile
    assert batch.lapsed and ran_out(batch, 1.31, 1.0)


def test_a_keyed_batch_whose_extension_failed_is_not_handled_past_its_deadline(
    client: dynoq.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two keys' heads in one batch; the first handler outlives the visibility while
    every extension fails (a dropped connection): the second message's delivery may be
    someone else's by then, so this worker does not handle it; it comes back (its
    key's fence raised) and is handled once."""

    def refused(*_: Any) -> bool:
        raise dynoq.ConnectionFailed("dropped")

    async def refused_async(*_: Any) -> bool:
        raise dynoq.ConnectionFailed("dropped")

    monkeypatch.setattr(dynoq.Queue, "extend", refused)
    monkeypatch.setattr(dynoq.asyncio.Queue, "extend", refused_async)
    q = client.queue("lapse", shards=1, ordered="key", unack_timeout=1.0)
    q.push_many([Message("first", key="a"), Message("second", key="b")])
    calls = Calls()

    def body(msg: dynoq.Message) -> None:
        if msg.payload == "first" and msg.attempts == 1:
            time.sleep(1.3)

    c = client.consumer(q, calls.handler(body), concurrency=1, batch_size=2, **FAST).start()
    try:
        wait_for(lambda: calls.of("second") and calls.of("first"), timeout=20, what="both handled")
        time.sleep(1.5)  # a stale second handling would come now
    finally:
        c.stop()
    [second] = calls.of("second")
    assert second.attempts == 2 and second.fence == 2, second
