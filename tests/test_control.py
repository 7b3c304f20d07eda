"""Job control (DESIGN §3.9) on every backend and both clients: pausing a queue."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from helpers import FAST, wait_for

import dynoq

FLAVORS = ("sync", "async")

KINDS = {
    "concurrent": {"shards": 4},
    "ordered": {"shards": 2, "ordered": True},
    "keyed": {"shards": 2, "ordered": "key"},
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_paused_queue_keeps_pushes_and_delivers_nothing_until_resumed(
    client: dynoq.Client, kind: str
) -> None:
    q = client.queue("jobs", **KINDS[kind])
    q.push("first", key="k")
    [m] = q.pop()
    assert q.paused() is False
    assert q.pause() is True and q.pause() is False and q.paused() is True
    ids = [q.push(i, key="k" if kind == "keyed" else str(i)) for i in range(5)]
    assert q.pop(10) == [] and q.pop(10, wait=0.2) == []
    assert q.size() == 5 and q.ack(m) is True  # in flight before the pause: acked
    assert q.pop(10) == []
    assert [x.payload for x in q.peek(10)]  # still readable
    assert q.resume() is True and q.resume() is False and q.paused() is False
    got: list[dynoq.Message] = []
    while len(got) < 5:
        batch = q.pop(10, wait=1)
        assert batch, "nothing delivered after resume"
        got += batch
        q.ack_many(batch)
    assert sorted(x.id for x in got) == sorted(ids)


def test_a_pause_is_kept_by_the_server_across_clients(
    make_client: Callable[..., dynoq.Client],
) -> None:
    a, b = make_client(), make_client()
    a.queue("jobs", shards=3).pause()
    q = b.queue("jobs", shards=3)  # another process's view: it learns from the server
    q.push("x")
    assert q.paused() is True and q.pop() == []
    q.clear()  # clearing the messages keeps the pause
    q.push("y")
    assert q.paused() is True and q.pop() == []
    a.queue("jobs").resume()
    assert [m.payload for m in q.pop(wait=1)] == ["y"]


def test_a_paused_queue_pops_across_shards_nothing(client: dynoq.Client) -> None:
    # one pop looks at several shards on one server (pop-13.lua's other shards)
    q = client.queue("spread", shards=8)
    q.push_many(range(40))
    q.pause()
    assert q.pop(40) == [] and q.stats().ready == 40
    q.resume()
    assert len(q.pop(40)) >= 1


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_consumer_idles_while_paused_and_wakes_on_resume(
    client: dynoq.Client, consumers: list[Any], kind: str
) -> None:
    q = client.queue("work", **KINDS[kind])
    q.pause()
    seen: list[Any] = []
    lock = threading.Lock()

    def handle(m: dynoq.Message) -> None:
        with lock:
            seen.append(m.payload)

    q.push_many([dynoq.Message(i, key="k") for i in range(20)])
    c = client.consumer(q, handle, **FAST).start()
    consumers.append(c)
    time.sleep(1.0)
    assert seen == [] and q.size() == 20
    q.resume()
    wait_for(lambda: len(seen) == 20, what="the resumed queue drained", timeout=10)
    if kind != "concurrent":
        assert seen == list(range(20))  # order kept across the pause


def test_a_pause_inside_a_handler_stops_the_next_delivery_of_a_hot_key(
    client: dynoq.Client, consumers: list[Any]
) -> None:
    # A keyed ack takes the next messages of a hot key in its reply (kack-16.lua): not
    # while the queue is paused.
    q = client.queue("hot", shards=1, ordered="key")
    seen: list[Any] = []

    def handle(m: dynoq.Message) -> None:
        if not seen:
            q.pause()
        seen.append(m.payload)

    q.push_many([dynoq.Message(i, key="k") for i in range(10)])
    consumers.append(client.consumer(q, handle, batch_size=1, **FAST).start())
    wait_for(lambda: seen, what="the first delivery")
    time.sleep(1.0)
    assert seen == [0] and q.size() == 9
    q.resume()
    wait_for(lambda: len(seen) == 10, what="the rest", timeout=10)
    assert seen == list(range(10))


@pytest.mark.sync_only
@pytest.mark.parametrize("kind", list(KINDS))
def test_an_idle_consumers_probe_reads_a_paused_queue_as_empty(
    client: dynoq.Client, kind: str
) -> None:
    # What keeps a paused queue's idle consumers as cheap as an empty queue's: their one
    # probe call says there is nothing to pop (bench_idle measures the commands).
    q = client.queue("probed", **KINDS[kind])
    q.push_many([dynoq.Message(i, key=f"k{i}") for i in range(8)])

    def probes() -> list[list[int]]:  # a shard a call: on a cluster, one slot a call
        return [q.backend.run(q.ops.probe([s])) for s in range(q.ops.settings.shards)]

    assert any(rank > 0 for rank, _ in probes())
    q.pause()
    assert probes() == [[0, -1]] * q.ops.settings.shards


def test_a_skip_schedule_runs_one_occurrence_after_a_long_pause(client: dynoq.Client) -> None:
    # While paused, the sweeper keeps pushing each tick's occurrence; they wait with the
    # rest, and overlap="skip" runs the first of them alone (the others are skipped).
    q = client.queue("nightly", shards=1)
    q.pause()
    q.schedule("report", "r", every=0.2, overlap="skip")
    sweeper = client.sweeper()
    deadline = time.monotonic() + 1.3
    while time.monotonic() < deadline:
        sweeper.run_once()
        time.sleep(0.1)
    due = q.stats().ready  # the ticks come so far (the next one waits, delayed)
    assert due >= 4  # one a tick: nothing was delivered
    q.resume()
    got = q.pop(100, wait=1)
    assert len(got) == 1  # the ticks after it may be waiting already
    assert q.stats().total("acked") >= due - 1  # the rest skipped, acked unhandled
