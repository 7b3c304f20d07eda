"""Job control (DESIGN §3.9) on every backend and both clients: cancelling a message that
waits or runs, and the progress a running handler reports."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from helpers import FAST, wait_for

import dynoq
import dynoq.asyncio

FLAVORS = ("sync", "async")

KINDS = {
    "concurrent": {"shards": 4},
    "ordered": {"shards": 2, "ordered": True},
    "keyed": {"shards": 2, "ordered": "key"},
}


def _cancelled(q: Any) -> int:
    return int(q.stats().total("cancelled"))


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_waiting_message_cancelled_is_taken_off_and_counted(
    client: dynoq.Client, kind: str
) -> None:
    q = client.queue("jobs", **KINDS[kind])
    ids = [q.push(i, key="k") for i in range(3)]
    later = q.push("later", key="k2", delay=0 if kind != "concurrent" else 60)
    assert q.cancel(ids[1]) is True and q.cancel(ids[1]) is False  # once
    assert q.cancel(later) is True
    assert q.cancel("never-pushed") is False
    got: list[Any] = []
    while batch := q.pop(10, wait=0.5):
        got += [m.payload for m in batch]
        q.ack_many(batch)
    assert sorted(got) == [0, 2] and _cancelled(q) == 2
    assert q.get(ids[1]) is None and q.stats().dead == 0  # not a dead letter


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_running_message_cancelled_ends_cancelled_at_its_nack_not_before(
    client: dynoq.Client, kind: str
) -> None:
    q = client.queue("jobs", **KINDS[kind])
    first = q.push("first", key="k")
    q.push("second", key="k")
    [m] = q.pop()
    assert m.id == first or kind == "concurrent"
    assert q.cancel(m.id) is True
    # still in flight (an ordered shard or a key stays blocked until its handler is done)
    got = q.get(m.id)
    assert got is not None and q.stats().unacked == 1
    if kind != "concurrent":
        assert q.pop(wait=0.2) == []
    assert q.nack(m) is False  # whatever the failure says: it ends cancelled, no retry
    assert q.get(m.id) is None and _cancelled(q) == 1 and q.stats().dead == 0
    [rest] = q.pop(wait=1)
    assert rest.payload != m.payload and q.pop(wait=0.2) == []


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_cancelled_delivery_whose_consumer_died_never_comes_back(
    client: dynoq.Client, kind: str
) -> None:
    # A consumer killed after the cancel: its delivery's visibility runs out, and what
    # gives it back (a pop, the sweeper) ends it cancelled instead.
    q = client.queue("jobs", **KINDS[kind])
    q.push("doomed", key="k", id="doomed")
    q.push("next", key="k", id="next")
    [m] = [x for x in q.pop(1, visibility=0.3)]
    if m.id != "doomed":  # a concurrent queue's shards: take the other one too
        [m] = [x for x in q.pop(1, visibility=0.3) if x.id == "doomed"]
    assert q.cancel("doomed") is True
    time.sleep(0.5)
    seen = []
    while batch := q.pop(5, wait=0.5):
        seen += [x.id for x in batch]
        q.ack_many(batch)
    assert "doomed" not in seen and q.get("doomed") is None
    assert _cancelled(q) == 1 and q.stats().dead == 0


def test_the_sweeper_ends_a_cancelled_delivery_that_expired(client: dynoq.Client) -> None:
    for kind, options in KINDS.items():
        q = client.queue(f"swept-{kind}", **options)
        q.push("doomed", key="k", id="doomed")
        [m] = q.pop(visibility=0.2)
        assert q.cancel(m.id) is True
        time.sleep(0.3)
        client.sweeper().run_once()
        assert q.get("doomed") is None and _cancelled(q) == 1, kind
        assert q.stats().unacked == 0 and q.stats().size == 0


def test_an_ack_after_a_cancel_acks_and_forgets_it(client: dynoq.Client) -> None:
    # The handler ended well before it heard: an ack is an ack (counted acked), and what
    # the cancel left (control's x:<id>) goes with it, so the id pushed again runs.
    q = client.queue("late", shards=1)
    q.push("a", id="same")
    [m] = q.pop()
    assert q.cancel("same") is True and q.ack(m) is True
    assert q.stats().total("acked") == 1 and _cancelled(q) == 0
    q.push("b", id="same")
    [again] = q.pop()
    assert q.nack(again, delay=0) is True  # retried: not cancelled by the old ask
    [third] = q.pop(wait=1)
    assert third.attempts == 2 and q.ack(third)


def test_progress_is_refused_unless_a_small_number_or_dict() -> None:
    m = dynoq.Message("x")
    assert m.progress() is None
    assert m.progress(5) == 5 and m.progress() == 5
    assert m.progress({"done": 3, "of": 10}) == {"done": 3, "of": 10}
    with pytest.raises(dynoq.InvalidType, match="number or a dict"):
        m.progress("half")
    with pytest.raises(dynoq.InvalidType):
        m.progress(True)
    with pytest.raises(dynoq.InvalidArgument, match="finite"):
        m.progress(float("nan"))
    with pytest.raises(dynoq.InvalidArgument, match="1024 bytes"):
        m.progress({"x": "y" * 2000})
    with pytest.raises(dynoq.InvalidArgument, match="JSON"):
        m.progress({"x": {1, 2}})
    deep: dict[str, Any] = {}
    for _ in range(100_000):  # nested past what JSON writes: a typed error, not a crash
        deep = {"d": deep}
    with pytest.raises(dynoq.InvalidArgument, match="JSON"):
        m.progress(deep)
    assert m.progress() == {"done": 3, "of": 10}  # a refused report changes nothing
    m.heartbeat()  # not cancelled: nothing


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_running_handler_hears_a_cancel_and_reports_progress(
    client: dynoq.Client, consumers: list[Any], kind: str
) -> None:
    # A sync handler in a long loop calling progress(): the cancel reaches it within a
    # second, as dynoq.Cancelled; the message ends cancelled, never retried, and the
    # next message of its shard or key runs after it.
    q = client.queue("long", **KINDS[kind])
    events: list[Any] = []
    heard = threading.Event()

    def handle(m: dynoq.Message) -> None:
        if m.payload != "long":
            events.append(m.payload)
            return
        i = 0
        try:
            while True:
                i += 1
                m.progress({"step": i})
                time.sleep(0.02)
        except dynoq.Cancelled:
            events.append(("cancelled", m.cancelled))
            heard.set()
            raise

    q.push("long", key="k", id="long")
    q.push("after", key="k")
    consumers.append(client.consumer(q, handle, max_retries=5, **FAST).start())
    wait_for(lambda: (q.get("long") or dynoq.Message(0)).progress() is not None, what="progress")
    step = q.get("long").progress()["step"]  # type: ignore[union-attr]
    assert step >= 1
    asked = time.monotonic()
    assert q.cancel("long") is True
    assert heard.wait(5)
    assert time.monotonic() - asked < 1.5  # within a second, plus a loaded machine's slack
    wait_for(lambda: _cancelled(q) == 1, what="counted")
    wait_for(lambda: "after" in events, what="the next message")
    if kind != "concurrent":  # (on a concurrent queue "after" may run meanwhile)
        assert events[0] == ("cancelled", True)
    time.sleep(0.5)
    assert events.count(("cancelled", True)) == 1  # never delivered again
    assert q.get("long") is None and q.stats().dead == 0 and q.stats().total("retried") == 0


def test_a_handler_that_ignores_the_cancel_still_ends_cancelled(
    client: dynoq.Client, consumers: list[Any]
) -> None:
    q = client.queue("deaf", shards=1)
    started, release = threading.Event(), threading.Event()
    flags: list[bool] = []

    def handle(m: dynoq.Message) -> None:
        started.set()
        release.wait(10)
        flags.append(m.cancelled)

    q.push("x", id="deaf")
    consumers.append(client.consumer(q, handle, **FAST).start())
    assert started.wait(10)
    assert q.cancel("deaf") is True
    time.sleep(1.2)  # the consumer heard it meanwhile
    release.set()
    wait_for(lambda: _cancelled(q) == 1, what="ended cancelled")
    assert flags == [True] and q.stats().total("acked") == 0


def test_progress_is_cleared_when_the_delivery_ends(client: dynoq.Client) -> None:
    # What a consumer's look writes (lua/steer-3.lua), read by get(): kept while the
    # delivery runs, gone with its ack, and never kept for a delivery that ended.
    from dynoq._core.steering import look

    q = client.queue("p", shards=2)
    q.push("x", id="a")
    q.push("y", id="b")
    a, b = sorted(q.pop(2), key=lambda m: m.id or "")
    a.progress(40)
    b.progress({"rows": 7})
    drive = getattr(q, "drive", None) or q.backend.drive  # type: ignore[attr-defined]
    assert drive(look(q.ops, [a, b])) == []  # type: ignore[attr-defined]
    assert q.get("a").progress() == 40  # type: ignore[union-attr]
    assert q.get("b").progress() == {"rows": 7}  # type: ignore[union-attr]
    assert q.ack(a) and q.nack(b, delay=0)
    assert q.get("b").progress() is None  # type: ignore[union-attr]
    [b2] = q.pop(wait=1)
    b2.progress(1)
    assert q.ack(b2)
    assert drive(look(q.ops, [b2])) == []  # type: ignore[attr-defined]
    assert q.get("b") is None


class _Hooks(dynoq.Middleware):
    """A middleware: the consumer then calls its handler through its Invoker."""


@pytest.mark.parametrize("shape", ["fast path", "ordered", "middleware"])
def test_a_coroutine_handler_is_cancelled_at_once(real_url: str, prefix: str, shape: str) -> None:
    options: dict[str, Any] = {"ordered": True} if shape == "ordered" else {}
    hooks = {"middleware": [_Hooks()]} if shape == "middleware" else {}

    async def main() -> tuple[list[Any], float]:
        client = dynoq.asyncio.connect(real_url, prefix=prefix)
        try:
            q = await client.queue("coro", shards=1, **options)
            events: list[Any] = []
            started = asyncio.Event()

            async def handle(m: dynoq.Message) -> None:
                if m.payload == "after":
                    events.append("after")
                    return
                started.set()
                try:
                    await asyncio.sleep(60)
                except asyncio.CancelledError:
                    events.append(("cut", time.monotonic()))
                    raise

            await q.push("long", id="long")
            await q.push("after")
            c = client.consumer(q, handle, **FAST, **hooks)
            await c.start()
            await asyncio.wait_for(started.wait(), 10)
            asked = time.monotonic()
            assert await q.cancel("long") is True
            for _ in range(100):
                if "after" in events:
                    break
                await asyncio.sleep(0.05)
            await c.stop(timeout=5)
            stats = await q.stats()
            assert stats.total("cancelled") == 1 and stats.dead == 0
            return events, asked
        finally:
            await client.close()

    events, asked = asyncio.run(main())
    [cut] = [e for e in events if e != "after"]
    assert "after" in events and cut[0] == "cut"
    assert cut[1] - asked < 1.5
