"""Job control (DESIGN §3.9) on every backend and both clients: debounce, a burst of
pushes of one id collapsed into one delivery of the latest payload, on every queue kind
(an ordered queue's held copies: lua/lib/debounce.lua)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from helpers import FAST, wait_for

import dynoq

FLAVORS = ("sync", "async")
ASYNC_BACKENDS = ("embedded",)  # the async twin shares the core: one server
ORDERED = [
    pytest.param({"ordered": True}, id="shard"),
    pytest.param({"ordered": "key"}, id="key"),
]
KINDS = [pytest.param({}, id="concurrent"), *ORDERED]


@pytest.mark.parametrize("kind", KINDS)
def test_a_burst_of_pushes_of_one_id_is_delivered_once_with_the_last_payload(
    client: dynoq.Client, consumers: list[Any], kind: dict[str, Any]
) -> None:
    q = client.queue("search", shards=4, **kind)
    seen = _recorded(client, q, consumers, lambda m: (m.id, m.payload))
    # Each push moves the waiting copy to 1.5 s after it: only a pause of that long
    # between two pushes lets a copy go, however long the whole burst takes.
    gaps, last = [], time.monotonic()
    for i in range(1000):
        q.push({"version": i}, id="doc-42", key="doc", debounce=1.5)
        gaps.append(time.monotonic() - last)
        last = time.monotonic()
    assert max(gaps) < 1.0, "a push stalled for most of the debounce"
    # delivered when its wait ends: an idle consumer hears of it without polling for it
    wait_for(lambda: seen, what="the one delivery", timeout=10)
    time.sleep(0.5)  # nothing more comes
    assert seen == [("doc-42", {"version": 999})]
    assert q.size() == 0 and q.stats().total("acked") == 1


def test_a_push_while_it_waits_replaces_it_and_moves_its_due_time(client: dynoq.Client) -> None:
    q = client.queue("moved", shards=2)
    q.push("first", id="x", debounce=0.4)
    due = q.get("x")
    assert due is not None and due.deliver_at is not None
    time.sleep(0.2)
    q.push("second", id="x", debounce=0.4)
    moved = q.get("x")
    assert moved is not None and moved.payload == "second"
    assert moved.deliver_at is not None and moved.deliver_at >= due.deliver_at + 0.15
    assert q.pop() == [] and q.size() == 1  # not before its new due time
    [m] = q.pop(wait=2)
    assert m.payload == "second"


def test_while_one_runs_at_most_one_more_waits_with_the_latest_payload(
    client: dynoq.Client,
) -> None:
    q = client.queue("running", shards=2)
    q.push("v1", id="job")
    [running] = q.pop()
    for v in ("v2", "v3", "v4"):
        q.push(v, id="job", debounce=0.2)
    assert q.size() == 1 and q.peek(5) == [] and q.stats().delayed == 1
    waiting = q.get("job")
    assert waiting is not None and waiting.payload == "v4"
    [after] = q.pop(wait=2)
    assert after.payload == "v4" and after.attempts == 1
    assert q.ack(running) is False  # superseded: its ack changes nothing
    assert q.ack(after) is True and q.size() == 0


def test_debounce_refuses_bad_arguments_and_pushes_nothing(client: dynoq.Client) -> None:
    plain = client.queue("plain", shards=2)
    with pytest.raises(dynoq.InvalidArgument, match="give an id"):
        plain.push("x", debounce=1.0)
    with pytest.raises(dynoq.InvalidArgument, match="delay or debounce"):
        plain.push("x", id="a", delay=1.0, debounce=1.0)
    for bad in (0, -1.0, float("nan")):
        with pytest.raises(dynoq.InvalidArgument, match="debounce"):
            plain.push("x", id="a", debounce=bad)
    with pytest.raises(dynoq.InvalidType, match="debounce"):
        plain.push("x", id="a", debounce="1")  # type: ignore[arg-type]
    strict = client.queue("strict", shards=2, ordered="key")
    with pytest.raises(dynoq.InvalidArgument, match="expires"):
        strict.push("x", id="a", key="k", debounce=1.0, expires=5)
    with pytest.raises(dynoq.OrderedQueueError, match="key"):
        strict.push("x", id="a", debounce=1.0)  # a keyed queue's message needs its key
    assert plain.size() == 0 and strict.size() == 0 and not strict.contains("a")


# -- ordered queues (by shard, by key): a held copy takes its place when its wait ends ----


@pytest.mark.parametrize("kind", ORDERED)
def test_ordered_a_held_copy_goes_last_when_its_wait_ends(
    client: dynoq.Client, kind: dict[str, Any]
) -> None:
    q = client.queue("feed", shards=3, **kind)
    q.push("a", key="k")
    q.push("d1", id="d", key="k", debounce=0.3)
    q.push("b", key="k")
    q.push("d2", id="d", key="k", debounce=0.3)  # replaces the held copy, moves it
    held = q.get("d")
    assert held is not None and held.payload == "d2" and held.key == "k"
    assert held.deliver_at is not None and held.attempts == 0
    assert q.contains("d") and q.size() == 3 and q.stats().delayed == 1
    heads = ["a"] if kind["ordered"] == "key" else ["a", "b"]  # a keyed peek: keys' heads
    assert [m.payload for m in q.peek(10)] == heads  # not the held copy
    first = _drain(q, 2)
    assert [m.payload for m in first] == ["a", "b"]  # not before its wait ends
    q.push("c", key="k")  # pushed while it waits: before it
    time.sleep(0.4)
    assert [m.payload for m in _drain(q, 2, wait=2)] == ["c", "d2"]
    assert q.size() == 0 and not q.contains("d")


@pytest.mark.parametrize("kind", ORDERED)
def test_ordered_a_waiting_copy_of_its_id_is_replaced(
    client: dynoq.Client, kind: dict[str, Any]
) -> None:
    q = client.queue("replace", shards=2, **kind)
    q.push("v1", id="job", key="k")  # waits, not yet delivered
    q.push("v2", id="job", key="k", debounce=0.2)
    assert q.size() == 1 and q.peek(5) == []
    assert q.pop() == []  # the waiting copy is gone: it never runs
    [m] = q.pop(wait=2)
    assert m.payload == "v2" and m.attempts == 1 and q.ack(m)
    assert q.stats().total("pushed") == 2 and q.stats().total("acked") == 1


@pytest.mark.parametrize("kind", ORDERED)
def test_ordered_while_one_runs_one_more_waits_behind_it(
    client: dynoq.Client, kind: dict[str, Any]
) -> None:
    q = client.queue("running", shards=2, **kind)
    q.push("v1", id="job", key="k")
    [running] = q.pop()
    for v in ("v2", "v3", "v4"):
        q.push(v, id="job", key="k", debounce=0.1)
    waiting = q.get("job")
    assert waiting is not None and waiting.payload == "v1"  # the running copy
    time.sleep(0.3)
    # its wait has ended, but it stays behind the running copy: the shard (key) holds
    assert q.pop(5) == [] and q.stats().delayed == 1
    assert q.ack(running) is True  # not superseded: the running copy keeps its place
    [after] = q.pop(wait=2)
    assert after.payload == "v4" and after.attempts == 1
    assert q.ack(after) is True and q.size() == 0


@pytest.mark.parametrize("kind", ORDERED)
def test_ordered_a_failing_copy_keeps_its_follower_behind_its_retries(
    client: dynoq.Client, kind: dict[str, Any]
) -> None:
    q = client.queue("retried", shards=2, max_retries=1, **kind)
    q.push("v1", id="job", key="k")
    [m] = q.pop()
    q.push("v2", id="job", key="k", debounce=0.05)
    assert q.nack(m, delay=0.2)  # a retry: still in the shard
    time.sleep(0.1)
    assert q.pop() == []
    [again] = q.pop(wait=2)
    assert again.payload == "v1" and again.attempts == 2
    assert q.nack(again)  # past max_retries: dead-lettered, and the follower goes in
    [after] = q.pop(wait=2)
    assert after.payload == "v2" and q.ack(after)
    assert q.dead() == []  # it replaced the dead letter of its id, as a push does


@pytest.mark.parametrize("kind", ORDERED)
def test_ordered_a_held_copy_replaces_a_dead_letter_of_its_id(
    client: dynoq.Client, kind: dict[str, Any]
) -> None:
    q = client.queue("buried", shards=2, max_retries=0, **kind)
    q.push("v1", id="job", key="k")
    [m] = q.pop()
    assert q.nack(m) and [d.payload for d in q.dead()] == ["v1"]
    q.push("v2", id="job", key="k", debounce=0.05)
    assert q.get("job") is not None and q.get("job").payload == "v1"  # type: ignore[union-attr]
    [after] = q.pop(wait=2)
    assert after.payload == "v2" and q.ack(after)
    assert q.dead() == [] and not q.contains("job")


@pytest.mark.parametrize("kind", ORDERED)
def test_ordered_cancel_remove_and_clear_take_held_copies(
    client: dynoq.Client, kind: dict[str, Any]
) -> None:
    q = client.queue("control", shards=4, **kind)
    q.push("x", id="a", key="ka", debounce=30)
    q.push("y", id="b", key="kb", debounce=30)
    assert q.cancel("a") is True and not q.contains("a") and q.get("a") is None
    assert q.stats().total("cancelled") == 1
    assert q.remove("b") is True and not q.contains("b") and q.size() == 0
    assert q.cancel("a") is False and q.remove("b") is False
    # a running copy asked to stop, its held follower taken off: neither runs again
    q.push("r", id="c", key="kc")
    [running] = q.pop()
    q.push("r2", id="c", key="kc", debounce=0.05)
    assert q.cancel("c") is True
    assert q.nack(running) is False  # it ends cancelled, no retry
    time.sleep(0.1)
    assert q.pop(wait=0.3) == [] and q.size() == 0
    q.push("z", id="d", key="kd", debounce=30)
    q.clear()
    assert q.size() == 0 and not q.contains("d")


@pytest.mark.parametrize("kind", ORDERED)
def test_ordered_a_consumer_delivers_held_copies_in_order_with_the_rest(
    client: dynoq.Client, consumers: list[Any], kind: dict[str, Any]
) -> None:
    q = client.queue("stream", shards=2, **kind)
    seen = _recorded(client, q, consumers, lambda m: m.payload)
    for i in range(20):
        q.push(i, key="k")
        q.push({"latest": i}, id="summary", key="k", debounce=0.3)
    wait_for(lambda: len(seen) == 21, what="every message and one summary", timeout=10)
    time.sleep(0.5)
    assert seen == [*range(20), {"latest": 19}]


def _recorded(client: dynoq.Client, q: dynoq.Queue, consumers: list[Any], what: Any) -> list[Any]:
    """What a consumer of ``q`` (started here) handles, ``what(m)`` of each message."""
    seen: list[Any] = []
    lock = threading.Lock()

    def handle(m: dynoq.Message) -> None:
        with lock:
            seen.append(what(m))

    consumers.append(client.consumer(q, handle, concurrency=2, **FAST).start())
    return seen


def _drain(q: dynoq.Queue, n: int, wait: float = 0.0) -> list[dynoq.Message]:
    """Pop and ack one message at a time until ``n`` came (an ordered shard delivers
    the next once the last is acked)."""
    out: list[dynoq.Message] = []
    while len(out) < n:
        got = q.pop(1, wait=wait)
        if not got:
            break
        out += got
        assert q.ack_many(got) == len(got)
    return out


@pytest.mark.parametrize("kind", ORDERED)
def test_ordered_held_copies_read_well_in_every_listing(
    client: dynoq.Client, kind: dict[str, Any]
) -> None:
    """What walks a shard's delayed set (an export's scan, the dashboard's pages and its
    lookup by id, the blocked keys) reads a held copy as the delayed message it is."""
    from dynoq._core import inspect, scan

    q = client.queue("listed", shards=1, max_retries=3, **kind)
    q.push("first", id="r", key="kr")
    [m] = q.pop()
    assert q.nack(m, delay=30)  # a retry waiting in delayed
    q.push("later", id="h", key="kh", debounce=30)
    found, _ = q.backend.drive(scan.walk_page(q.ops, 0, "delayed", None, ("delayed",)))
    assert [(f.message.id, f.message.payload, f.state) for f in found] == [
        ("r", "first", "delayed"),
        ("h", "later", "delayed"),
    ]
    assert 25 < found[1].at - time.time() < 31  # its due time, not the held score
    entries, more = q.backend.drive(inspect.page(q.ops, "delayed", shards=[0]))
    assert [(e.message.id, e.message.payload) for e in entries] == [("r", "first"), ("h", "later")]
    assert not more and 25 < entries[1].at - time.time() < 31
    located = q.backend.drive(inspect.find(q.ops, "h"))
    assert located is not None and located.state == "delayed" and located.message.payload == "later"
    assert located.at is not None and 25 < located.at - time.time() < 31
    if kind["ordered"] == "key":  # the blocked keys: the retry's, not the held copy's
        assert [b["key"] for b in q.keys()["blocked"]] == ["kr"]
