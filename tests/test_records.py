"""Records: an unreadable or hostile record is quarantined to the dead letters with a
reason and the rest of its batch is delivered; payloads that would not read back are
refused on push; a dead letter says why it died."""

from __future__ import annotations

import threading
import tracemalloc
from typing import Any

import msgpack
import pytest
from helpers import dead_letter, shard_keys, wait_for

import dynoq
from dynoq import Message
from dynoq._core import codec

FLAVORS = ("sync", "async")
ASYNC_BACKENDS = "all"  # the I/O itself: the async client on every backend


def test_an_undecodable_record_is_quarantined_and_the_rest_delivered(client: dynoq.Client) -> None:
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


@pytest.mark.parametrize("payload", [{(1, 2): "tuple key"}, {frozenset([1]): 1}, [[[[]]]] * 70_000])
def test_payloads_that_would_not_read_back_are_refused(
    client: dynoq.Client, payload: object
) -> None:
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


def test_the_header_is_compact_and_older_decimal_headers_still_read(client: dynoq.Client) -> None:
    q = client.queue("header", shards=1)
    before = client.server_time()
    q.push_many([Message("x", id="new", priority=3)])
    raw = client.redis.hget(shard_keys(q, 0).msgs, "new")
    enq, due_off, prio, _ = raw.split(b",", 3)
    assert len(enq) == 8 and (due_off, prio) == (b"0", b"3")  # base 36: 8 chars, not 13
    assert abs(int(enq, 36) / 1000 - before) < 5
    # A record written with the decimal header (dynoq 0.2) reads, sorts and reschedules.
    client.redis.hset(
        shard_keys(q, 0).msgs, "old", raw.replace(enq, str(int(enq, 36) - 1000).encode(), 1)
    )
    client.redis.zadd(shard_keys(q, 0).ready, {"old": 0})
    old = q.get("old")
    assert old is not None and old.enqueued_at == pytest.approx(int(enq, 36) / 1000 - 1)
    assert q.stats().shards[0].oldest_ready_at == pytest.approx(old.enqueued_at)
    assert q.reschedule("old", delay=60)
    moved = q.get("old")
    assert moved is not None and moved.enqueued_at == old.enqueued_at
    assert moved.deliver_at is not None and moved.deliver_at - before > 55


# -- hostile records: every field of a record, malformed (docs/security.md) ----------------


def _pack(*fields: Any) -> bytes:
    return bytes(msgpack.packb(list(fields), use_bin_type=True))


# A record body after its header, as dynoq writes it: msgpack [payload, key, headers, tag].
BAD_BODIES = {
    "headers a list": _pack(1, None, [1, 2]),
    "headers a str": _pack(1, None, "h"),
    "key an int": _pack(1, 5),
    "key a dict": _pack(1, {"k": 1}),
    "tag an int": _pack(1, None, None, 7),
    "tag with spaces": _pack(1, None, None, "a b"),
    "tag an ext type": _pack(1, None, None, msgpack.ExtType(1, b"")),
    "an extra field": _pack(1, None, None, None, 1),
    "no field": _pack(),
    "a map": bytes(msgpack.packb({"payload": 1})),
    "a scalar": bytes(msgpack.packb(5)),
    "not msgpack": b"\xc1",
    "truncated": _pack("a long enough payload")[:-3],
    "nothing": b"",
}
# A whole record (the header's fields malformed), of a message pushed at ``enq``.
BAD_HEADERS = {
    "no header": lambda enq: b"garbage",
    "priority a word": lambda enq: enq + b",0,high," + _pack(1),
    "priority out of range": lambda enq: enq + b",0,12345678901234567890," + _pack(1),
    "due offset a word": lambda enq: enq + b",soon,0," + _pack(1),
    "due offset with an underscore": lambda enq: enq + b",1_0,0," + _pack(1),
    "due in year 10000": lambda enq: enq + b",9999999999999999,0," + _pack(1),
    "enqueued time with a sign": lambda enq: b"+" + enq + b",0,0," + _pack(1),
    "enqueued time huge": lambda enq: b"9" * 400 + b",0,0," + _pack(1),
    "enqueued in year 20000": lambda enq: b"599999999999999,0,0," + _pack(1),
}


def _hostile_queue(
    client: dynoq.Client, name: str, **settings: Any
) -> tuple[dynoq.Queue, set[str], set[str]]:
    """A one-shard queue holding good messages and one message for every malformed
    record (its record rewritten raw, as any role that may write records can): the ids
    of the good ones and of the bad ones. On a keyed queue each bad one waits first in
    its own key, before a good one of the same key."""
    q = client.queue(name, shards=1, **settings)
    keyed = settings.get("ordered") == "key"
    bad = [f"bad {n}" for n in [*BAD_BODIES, *BAD_HEADERS]]
    good = [f"good {i}" for i in range(len(bad) + 1)]
    order = [x for pair in zip(good, bad, strict=False) for x in pair] + good[len(bad) :]
    if keyed:  # each bad one first in its key, a good one after it
        order = [x for pair in zip(bad, good, strict=False) for x in pair] + good[len(bad) :]
    q.push_many(
        [Message(i, id=i, key=f"key {k // 2}" if keyed else None) for k, i in enumerate(order)]
    )
    msgs = shard_keys(q, 0).msgs
    for name_, body in BAD_BODIES.items():
        record = client.redis.hget(msgs, f"bad {name_}")
        end = len(codec.encode_body(f"bad {name_}", None, None, 1 << 20))
        client.redis.hset(msgs, f"bad {name_}", record[:-end] + body)  # header kept
    for name_, make in BAD_HEADERS.items():
        enq = client.redis.hget(msgs, f"bad {name_}").split(b",", 1)[0]
        client.redis.hset(msgs, f"bad {name_}", make(enq))
    return q, set(good), set(bad)


def _pop_all(q: dynoq.Queue, want: int) -> list[Message]:
    got: list[Message] = []
    for _ in range(want + 5):  # a keyed pop takes one message of each key at a time
        batch = q.pop(100)
        got += batch
        q.ack_many(batch)
        if len(got) >= want:
            break
    return got


@pytest.mark.parametrize("kind", ["concurrent", "ordered", "keyed"])
def test_a_hostile_record_in_any_field_is_dead_lettered_and_the_rest_delivered(
    client: dynoq.Client, kind: str
) -> None:
    """Every way a record can be malformed: the pop that meets it dead-letters it with
    the reason (RecordError) and delivers the rest of its batch; it raises nothing."""
    settings: dict[str, Any] = {
        "concurrent": {},
        "ordered": {"ordered": True},
        "keyed": {"ordered": "key"},
    }[kind]
    q, good, bad = _hostile_queue(client, f"hostile-{kind}", max_retries=1, **settings)
    got = _pop_all(q, len(good))
    assert sorted(m.id for m in got) == sorted(good)  # type: ignore[type-var]
    assert all(m.payload == m.id and m.unreadable is None for m in got)
    dead = {m.id: m for m in q.dead(1000)}
    assert set(dead) == bad
    for m in dead.values():
        assert m.failure is not None and m.failure.error_type == "RecordError", m
        # at the first pop that met it (a keyed pop dead-letters a record that does
        # not name its key before delivering it: 0 attempts)
        assert m.attempts <= 1 and m.unreadable, m
    assert q.stats().unacked == 0 and q.size() == 0


def _corrupt(client: dynoq.Client, q: dynoq.Queue, msg_id: str, key: str | None = None) -> None:
    """Headers that are not a dict: the record of the issue (raw HSET on msgs). ``key``:
    the message's key in its body (an ordered queue's)."""
    msgs = shard_keys(q, 0).msgs
    record = client.redis.hget(msgs, msg_id)
    end = len(codec.encode_body(msg_id, key, None, 1 << 20))
    client.redis.hset(msgs, msg_id, record[:-end] + _pack(msg_id, key, ["not", "a dict"]))


@pytest.mark.parametrize("ordered", [False, True, "key"])
def test_a_consumer_dead_letters_a_hostile_record_at_the_first_pop_that_meets_it(
    client: dynoq.Client, ordered: bool | str
) -> None:
    """max_retries=1 and a short visibility timeout: the record is dead-lettered at its
    first delivery (never expiring again and again), and the consumer handles the rest
    (on a keyed queue the key's next message too, delivered with the ack of the one
    before: a hot key alone)."""
    q = client.queue(
        f"hostile-consumer-{ordered}", shards=1, max_retries=1, unack_timeout=1.0, ordered=ordered
    )
    key = "one key" if ordered else None
    q.push_many([Message(i, id=i, key=key) for i in ("m0", "m1", "m2")])
    _corrupt(client, q, "m1", key if ordered is True else None)
    handled: list[str] = []
    c = client.consumer(
        q, lambda m: handled.append(m.payload), idle_wait=0.05, instance_id="reader-1"
    )
    with c:
        wait_for(
            lambda: sorted(handled) == ["m0", "m2"] and q.stats().dead == 1,
            what="the rest handled, the hostile record dead",
        )
    [dead] = q.dead()
    assert dead.id == "m1" and dead.attempts == 1 and dead.unreadable
    assert dead.failure is not None and dead.failure.error_type == "RecordError"
    assert dead.failure.consumer == "reader-1" and "headers" in dead.failure.error
    stats = q.stats()
    assert (stats.unacked, stats.size, stats.total("expired")) == (0, 0, 0)


def test_views_show_an_unreadable_record_and_never_raise(client: dynoq.Client) -> None:
    """peek, get and the dead letters show an unreadable record as such (its id, why it
    cannot be read) before a pop met it and after; a dead letter whose record was
    broken later shows its failure and why it cannot be read."""
    q = client.queue("hostile-views", shards=1)
    q.push_many([Message(i, id=i) for i in ("m0", "m1", "m2")])
    _corrupt(client, q, "m1")
    client.redis.hset(shard_keys(q, 0).dlv, "m2", b"not a state")
    peeked = q.peek(10)
    assert [m.id for m in peeked] == ["m0", "m1", "m2"]
    assert peeked[1].payload is None and "headers" in (peeked[1].unreadable or "")
    seen = q.get("m1")
    assert seen is not None and seen.unreadable and seen.failure is None
    [m0] = q.pop()
    assert dead_letter(q, m0)
    client.redis.hset(shard_keys(q, 0).msgs, "m0", b"broken after it died")
    assert q.get("m2") is not None and q.get("m2").attempts == 0  # type: ignore[union-attr]
    got = q.pop(10)
    assert [m.id for m in got] == ["m2"]
    dead = {m.id: m for m in q.dead()}
    assert dead["m0"].unreadable and dead["m0"].failure is None  # its record, not a failure
    assert dead["m1"].unreadable and dead["m1"].failure is not None


@pytest.mark.parametrize("state", [b"99999999999999999999|", b"18446744073709551615|"])
def test_a_delivery_state_of_absurd_attempts_is_dead_lettered_not_delivered(
    client: dynoq.Client, state: bytes
) -> None:
    """Attempts no delivery reaches (a delivery state written raw): a handler never sees
    the count (a task's worker would fail to keep its result), the message is
    dead-lettered at once, the rest delivered."""
    q = client.queue("hostile-attempts", shards=1, max_retries=100)
    q.push_many([Message(i, id=i) for i in ("m0", "m1")])
    client.redis.hset(shard_keys(q, 0).dlv, "m1", state)
    got = q.pop(10)
    assert [(m.id, m.attempts) for m in got] == [("m0", 1)]
    [dead] = q.dead()
    assert dead.id == "m1" and dead.failure is not None
    assert dead.failure.error_type == "RecordError" and "attempts" in dead.failure.error
    assert q.stats().unacked == 1


def test_msgpack_extensions_are_refused_on_push_naming_where(client: dynoq.Client) -> None:
    q = client.queue("extensions", shards=1)
    for payload, where in [
        (msgpack.Timestamp(5, 1), "payload is a msgpack.Timestamp"),
        ({"a": [1, msgpack.ExtType(3, b"x")]}, "payload['a'][1]"),
        ([{msgpack.ExtType(3, b""): 1}], "a key of payload[0]"),
    ]:
        with pytest.raises(dynoq.PayloadTypeError, match=where.replace("[", r"\[")):
            q.push(payload)
    with pytest.raises(dynoq.PayloadTypeError, match=r"headers\['at'\]"):
        q.push_many([Message(1, headers={"at": msgpack.Timestamp(1, 0)})])
    q.push("ordinary text that holds \u0590\u05d0 bytes an extension starts with")
    assert q.size() == 1
