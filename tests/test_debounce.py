"""Job control (DESIGN §3.9) on every backend and both clients: debounce, a burst of
pushes of one id collapsed into one delivery of the latest payload."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from helpers import FAST, wait_for

import dynoq

FLAVORS = ("sync", "async")
ASYNC_BACKENDS = ("embedded",)  # the async twin shares the core: one server


def test_a_burst_of_pushes_of_one_id_is_delivered_once_with_the_last_payload(
    client: dynoq.Client, consumers: list[Any]
) -> None:
    q = client.queue("search", shards=4)
    seen: list[Any] = []
    lock = threading.Lock()

    def handle(m: dynoq.Message) -> None:
        with lock:
            seen.append((m.id, m.payload))

    consumers.append(client.consumer(q, handle, concurrency=2, **FAST).start())
    # Each push moves the waiting copy to 1.5 s after it: only a pause of that long
    # between two pushes lets a copy go, however long the whole burst takes.
    gaps, last = [], time.monotonic()
    for i in range(1000):
        q.push({"version": i}, id="doc-42", debounce=1.5)
        gaps.append(time.monotonic() - last)
        last = time.monotonic()
    assert max(gaps) < 1.0, "a push stalled for most of the debounce"
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


@pytest.mark.parametrize("kind", [{"ordered": True}, {"ordered": "key"}])
def test_debounce_is_refused_where_it_cannot_hold_and_pushes_nothing(
    client: dynoq.Client, kind: dict[str, Any]
) -> None:
    q = client.queue("strict", shards=2, **kind)
    with pytest.raises(dynoq.OrderedQueueError, match="debounce"):
        q.push("x", id="a", key="k", debounce=1.0)
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
    assert q.size() == 0 and plain.size() == 0
