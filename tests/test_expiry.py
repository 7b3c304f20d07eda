"""Job control (DESIGN §3.9) on every backend and both clients: a message pushed with an
expiry that is not delivered by then is dead-lettered (reason "Expired"), counted."""

from __future__ import annotations

import time
from typing import Any

import pytest

import dynoq

FLAVORS = ("sync", "async")

KINDS = {
    "concurrent": {"shards": 3},
    "ordered": {"shards": 2, "ordered": True},
    "keyed": {"shards": 2, "ordered": "key"},
}


def _drain(q: Any) -> list[Any]:
    got: list[Any] = []
    while batch := q.pop(50, wait=0.2):
        got += batch
        q.ack_many(batch)
    return got


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_message_not_delivered_by_its_expiry_is_dead_lettered(
    client: dynoq.Client, kind: str
) -> None:
    q = client.queue("jobs", **KINDS[kind])
    q.push("stale", id="stale", key="k", expires=0.2)
    q.push("fresh", id="fresh", key="k", expires=60)
    q.push("plain", id="plain", key="k2")
    q.push_many([dynoq.Message(i, id=f"m{i}", key="k3", expires=0.2) for i in range(3)])
    assert q.get("stale").expires == 0.2  # type: ignore[union-attr]
    assert q.get("plain").expires is None  # type: ignore[union-attr]
    time.sleep(0.4)
    got = _drain(q)
    assert sorted(m.payload for m in got) == ["fresh", "plain"]
    assert got[0].expires in (60, None)
    stats = q.stats()
    assert stats.total("lapsed") == 4 and stats.dead == 4
    dead = {m.id: m for m in q.dead()}
    assert sorted(dead) == ["m0", "m1", "m2", "stale"]
    failure = dead["stale"].failure
    assert failure is not None and failure.error_type == "Expired"
    assert dead["stale"].attempts == 0  # never delivered
    assert q.replay_dead(["stale"]) == 1  # replayed: delivered now, its expiry spent
    [again] = q.pop(wait=1)
    assert again.id == "stale" and q.ack(again)


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_delivered_message_no_longer_expires(client: dynoq.Client, kind: str) -> None:
    # The expiry is of its delivery: one that was delivered and then retried runs again,
    # whenever that is.
    q = client.queue("jobs", **KINDS[kind])
    q.push("x", id="x", key="k", expires=1.0)  # (a second: a loaded machine pops in time)
    [m] = q.pop()
    assert q.nack(m, delay=1.2 if kind == "concurrent" else 0)
    time.sleep(1.3)
    [again] = q.pop(wait=1)
    assert again.id == "x" and again.attempts == 2 and q.ack(again)
    assert q.stats().total("lapsed") == 0


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_sweeper_dead_letters_what_expired_where_nobody_pops(
    client: dynoq.Client, kind: str
) -> None:
    q = client.queue("idle", **KINDS[kind])
    q.push_many([dynoq.Message(i, key=f"k{i % 2}", expires=0.1) for i in range(10)])
    q.push("stays", key="k0", expires=600)
    time.sleep(0.2)
    report = client.sweeper().run_once()
    assert report.total().dead_lettered >= 10
    stats = q.stats()
    assert (stats.total("lapsed"), stats.dead, stats.size) == (10, 10, 1)
    assert [m.payload for m in q.pop(5)] == ["stays"]


def test_a_push_without_an_expiry_replaces_one_with_it(client: dynoq.Client) -> None:
    q = client.queue("jobs", shards=1)
    q.push("first", id="same", expires=0.1)
    q.push("second", id="same")  # the same id, replaced: no expiry now
    q.push("third", id="other", expires=0.1)
    q.push("fourth", id="other", expires=60)  # replaced: its own expiry
    time.sleep(0.2)
    assert sorted(m.payload for m in _drain(q)) == ["fourth", "second"]
    assert q.stats().total("lapsed") == 0


def test_ensure_and_bad_expiries(client: dynoq.Client) -> None:
    q = client.queue("jobs", shards=2)
    assert q.ensure("a", id="e1", expires=0.1) is True
    for bad, error in (
        (0, dynoq.InvalidArgument),
        (-1, dynoq.InvalidArgument),
        (float("inf"), dynoq.InvalidArgument),
        ("5", dynoq.InvalidType),
    ):
        with pytest.raises(error, match="expires"):
            q.push("never", expires=bad)
        with pytest.raises(error, match="expires"):
            q.push_many([dynoq.Message("ok"), dynoq.Message("never", expires=bad)])
    assert q.stats().size == 1  # nothing of the refused pushes was written
    time.sleep(0.2)
    assert _drain(q) == [] and q.stats().total("lapsed") == 1


def test_a_topics_copies_expire_in_each_group(client: dynoq.Client) -> None:
    t = client.topic("events", shards=2)
    t.subscribe("fast")
    t.subscribe("slow")
    t.publish("news", key="k", expires=1.0, id="n1")
    fast, slow = t.group_queue("fast"), t.group_queue("slow")
    [m] = fast.pop()
    assert m.expires == 1.0 and fast.ack(m)
    time.sleep(1.1)
    assert slow.pop(wait=0.2) == []
    assert slow.stats().total("lapsed") == 1 and fast.stats().total("lapsed") == 0
    [dead] = slow.dead()
    assert dead.id == "n1" and dead.failure is not None
    assert dead.failure.error_type == "Expired"


def test_clear_deletes_the_expiries_with_the_messages(client: dynoq.Client) -> None:
    q = client.queue("jobs", shards=1)
    q.push("a", id="a", expires=0.2)
    q.clear()
    q.push("a", id="a")  # the same id again, no expiry: the old note is gone
    time.sleep(0.3)
    assert [m.payload for m in q.pop()] == ["a"] and q.stats().total("lapsed") == 0


def test_a_message_a_keyed_ack_delivers_no_longer_expires(client: dynoq.Client) -> None:
    # A hot key alone: the ack of its message delivers the next in its reply (kack-16's
    # take, the consumer's refill); that delivery drops its expiry too, so a retry of it
    # runs whenever it comes, while the one never delivered expires.
    q = client.queue("hot", shards=1, ordered="key")
    q.push_many([dynoq.Message(i, id=f"h{i}", key="k", expires=1.5) for i in range(3)])
    [first] = q.pop()
    took = q.ops.kind.ack_and_take([first], 1, 30_000)
    assert took is not None
    call, taken = took
    assert q.backend.run(call) == 1
    [second] = taken
    assert second.id == "h1" and q.nack(second)  # back at the head of its key, retried
    time.sleep(1.6)
    [again] = q.pop(wait=1)
    assert again.id == "h1" and again.attempts == 2 and q.ack(again)
    stats = q.stats()
    assert stats.total("lapsed") == 1 and [m.id for m in q.dead()] == ["h2"]
