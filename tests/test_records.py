"""Records: an unreadable or hostile record is quarantined to the dead letters with a
reason and the rest of its batch is delivered; payloads that would not read back are
refused on push; a dead letter says why it died."""

from __future__ import annotations

import threading
import tracemalloc

import pytest
from helpers import dead_letter, shard_keys, wait_for

import dynoq
from dynoq import Message


def test_an_undecodable_record_is_quarantined_and_the_rest_delivered(
        client: dynoq.Client) -> None:
    q = client.queue("bad-record", shards=1)
    q.push_many([Message(i, id=f"m{i}") for i in range(5)])
    msgs = shard_keys(q, 0).msgs
    client.redis.hset(msgs, "m2", b"garbage without a header")  # a foreign record
    client.redis.hset(msgs, "m3", b"1,0,0," + b"\xc1")  # msgpack's never-used byte
    got = q.pop(10)
    assert sorted(m.payload for m in got) == [0, 1, 4]  # the rest is delivered
    dead = {m.id: m for m in q.dead()}
    assert set(dead) == {"m2", "m3"}
    for m in dead.values():
        assert m.payload is None and m.failure is not None
        assert m.failure.error_type == "RecordError"
    assert "no dynoq header" in dead["m2"].failure.error  # type: ignore[union-attr]
    assert q.stats().unacked == 3


def test_a_hostile_record_does_not_blow_up_memory(client: dynoq.Client) -> None:
    q = client.queue("hostile", shards=1)
    q.push("fine", id="ok")
    # 1 MB of empty lists: decoded unbounded it is about 65 MB of Python objects.
    body = b"\xdd" + (1_000_000).to_bytes(4, "big") + b"\x90" * 1_000_000
    client.redis.hset(shard_keys(q, 0).msgs, "evil", b"1,0,0," + body)
    client.redis.zadd(shard_keys(q, 0).ready, {"evil": 0})
    tracemalloc.start()
    try:
        got = q.pop(10)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [m.id for m in got] == ["ok"]
    assert peak < 20_000_000, f"decoding peaked at {peak / 1e6:.0f} MB"
    [evil] = q.dead()
    assert evil.id == "evil" and "lists and dicts" in (evil.failure.error if evil.failure else "")


@pytest.mark.parametrize("payload", [{(1, 2): "tuple key"}, {frozenset([1]): 1},
                                     [[[[]]]] * 70_000])
def test_payloads_that_would_not_read_back_are_refused(client: dynoq.Client,
                                                       payload: object) -> None:
    q = client.queue("unreadable", shards=1)
    with pytest.raises(dynoq.PayloadError):
        q.push(payload)
    assert q.size() == 0


def test_a_dead_letter_says_why(client: dynoq.Client) -> None:
    q = client.queue("why", shards=1, max_retries=1)
    q.push({"order": 1}, id="poison")
    done = threading.Event()

    def handle(msg: dynoq.Message) -> None:
        if msg.attempts >= 2:
            done.set()
        raise KeyError(f"no customer for order {msg.payload['order']}")

    c = client.consumer(q, handle, retry_delays=[0.05], idle_wait=0.1, instance_id="billing-1")
    with c:
        wait_for(lambda: q.stats().dead == 1, what="dead-lettered")
    [dead] = q.dead()
    f = dead.failure
    assert f is not None and dead.attempts == 2
    assert (f.error_type, f.consumer) == ("KeyError", "billing-1")
    assert "no customer for order 1" in f.error and "raise KeyError" in f.traceback
    assert f.first_failed_at < f.last_failed_at
    assert len(f.traceback) <= 4000
    assert q.replay_dead() == 1
    [m] = q.pop()
    q.ack(m)  # success: the reason is forgotten with the message
    assert client.redis.hlen(shard_keys(q, 0).why) == 0


def test_expired_retries_say_why_too(client: dynoq.Client) -> None:
    q = client.queue("expiry-why", shards=1, max_retries=0, unack_timeout=0.05)
    q.push("x", id="lost")
    q.pop()
    wait_for(lambda: q.requeue_expired() == 1 or q.stats().dead == 1)
    [dead] = q.dead()
    assert dead.failure is not None and dead.failure.error_type == "VisibilityTimeout"


def test_dead_lettered_by_the_caller_has_no_reason(client: dynoq.Client) -> None:
    q = client.queue("plain-dead", shards=1)
    q.push("x")
    [m] = q.pop()
    assert dead_letter(q, m)
    [dead] = q.dead()
    assert dead.failure is None and dead.payload == "x"


def test_the_header_is_compact_and_older_decimal_headers_still_read(
        client: dynoq.Client) -> None:
    q = client.queue("header", shards=1)
    before = client.server_time()
    q.push_many([Message("x", id="new", priority=3)])
    raw = client.redis.hget(shard_keys(q, 0).msgs, "new")
    enq, due_off, prio, _ = raw.split(b",", 3)
    assert len(enq) == 8 and (due_off, prio) == (b"0", b"3")  # base 36: 8 chars, not 13
    assert abs(int(enq, 36) / 1000 - before) < 5
    # A record written with the decimal header (dynoq 0.2) reads, sorts and reschedules.
    client.redis.hset(shard_keys(q, 0).msgs, "old",
                      raw.replace(enq, str(int(enq, 36) - 1000).encode(), 1))
    client.redis.zadd(shard_keys(q, 0).ready, {"old": 0})
    old = q.get("old")
    assert old is not None and old.enqueued_at == pytest.approx(int(enq, 36) / 1000 - 1)
    assert q.stats().shards[0].oldest_ready_at == pytest.approx(old.enqueued_at)
    assert q.reschedule("old", delay=60)
    moved = q.get("old")
    assert moved is not None and moved.enqueued_at == old.enqueued_at
    assert moved.deliver_at is not None and moved.deliver_at - before > 55
