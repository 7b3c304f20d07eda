"""The core queue operations (DESIGN §2, §3) on every backend."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable

import pytest
from helpers import dead_letter, pop_leased, requeue_shard, shard_keys

import dynoq
from dynoq import Message
from dynoq._core import byid, delivered

FLAVORS = ("sync", "async")
ASYNC_BACKENDS = "all"  # the I/O itself: the async client on every backend


def test_push_pop_ack_roundtrip(client: dynoq.Client) -> None:
    q = client.queue("orders", shards=4)
    payload = {"order": 7, "items": [1, 2.5, "x", None, True], "raw": b"\x00\xff"}
    msg_id = q.push(payload, headers={"trace": "abc"}, key="cust-1")
    assert q.size() == 1 and q.contains(msg_id)
    [m] = q.pop()
    assert (m.id, m.payload, m.headers, m.key, m.attempts) == (
        msg_id,
        payload,
        {"trace": "abc"},
        "cust-1",
        1,
    )
    assert m.shard == q.shard_for(msg_id)
    assert m.enqueued_at is not None and abs(m.enqueued_at - time.time()) < 60
    assert q.size() == 0 and q.stats().unacked == 1
    assert q.ack(m) is True
    assert q.ack(m) is False
    assert q.get(msg_id) is None and q.stats().unacked == 0


def test_never_delivered_before_due(client: dynoq.Client) -> None:
    q = client.queue("delays", shards=2)
    start = time.monotonic()  # before the push: the calls after it may be slow
    q.push("later", delay=0.4)
    now_id = q.push("now")
    first = q.pop(10)
    stats = q.stats()
    if time.monotonic() - start < 0.3:  # a loaded machine may take the 0.4 s by itself
        assert [m.id for m in first] == [now_id]
        assert (stats.delayed, stats.ready) == (1, 0)
    assert now_id in [m.id for m in first]
    got: list[Message] = [m for m in first if m.id != now_id]  # due by now, if there
    while not got:
        got = q.pop(10)
        if not got:
            assert time.monotonic() - start < 5
    [late] = got
    assert late.payload == "later"
    assert late.deliver_at is not None and late.enqueued_at is not None
    assert late.deliver_at - late.enqueued_at == pytest.approx(0.4, abs=0.002)
    assert time.monotonic() - start >= 0.35  # server clock decides; allow clock granularity


def test_priority_lower_first_then_ready_time(client: dynoq.Client) -> None:
    q = client.queue("prio", shards=1)
    q.push("p5-a", priority=5)
    q.push("p1", priority=1)
    q.push("p5-b", priority=5)
    q.push("p0", priority=0)
    q.push("p1-delayed", priority=1, delay=0.05)
    time.sleep(0.1)
    q.push("p1-late", priority=1)  # pushed after the delayed one became due
    assert [m.payload for m in q.peek(10)] == ["p0", "p1", "p1-delayed", "p1-late", "p5-a", "p5-b"]
    assert [m.payload for m in q.pop(10)] == ["p0", "p1", "p1-delayed", "p1-late", "p5-a", "p5-b"]


def test_fifo_within_priority_for_a_large_batch(client: dynoq.Client) -> None:
    q = client.queue("fifo", shards=1)
    q.push_many(range(1200))
    got = [m.payload for m in q.pop(1000) + q.pop(1000)]  # 1000: pop's most per call
    assert got == list(range(1200))


def _fifty_then_zero(q: dynoq.Queue) -> None:
    """The issue's scenario: 20 pushes at priority 50, then 20 at priority 0, the ids
    spread over every shard of the queue."""
    q.push_many([Message(i, id=f"late-{i}", priority=50) for i in range(20)])
    q.push_many([Message(i, id=f"soon-{i}", priority=0) for i in range(20)])
    shards = q.settings.shards
    assert {q.shard_for(f"soon-{i}") for i in range(20)} == set(range(shards))
    assert {q.shard_for(f"late-{i}") for i in range(20)} == set(range(shards))


def test_priority_holds_across_shards_one_pop_at_a_time(client: dynoq.Client) -> None:
    q = client.queue("prio-shards", shards=4)
    _fifty_then_zero(q)
    first = [m for _ in range(20) for m in q.pop(count=1)]
    assert [m.priority for m in first] == [0] * 20
    rest = [m for _ in range(20) for m in q.pop(count=1)]
    assert [m.priority for m in rest] == [50] * 20 and q.pop() == []


def test_priority_holds_across_shards_in_batches(client: dynoq.Client) -> None:
    q = client.queue("prio-batches", shards=4)
    _fifty_then_zero(q)
    assert [m.priority for m in q.pop(count=10)] == [0] * 10
    assert [m.priority for m in q.pop(count=15)] == [0] * 10 + [50] * 5
    assert [m.priority for m in q.pop(count=100)] == [50] * 15
    _fifty_then_zero(q)
    assert sorted(m.priority for m in q.pop(count=30)) == [0] * 20 + [50] * 10


def test_priority_across_shards_counts_due_delayed_messages(client: dynoq.Client) -> None:
    # Due delayed messages are only ranked once a pop brings them into `ready`: a shard
    # holding some must be asked before a worse priority is taken from another one.
    q = client.queue("prio-due", shards=4)
    q.push_many([Message(i, id=f"late-{i}", priority=50) for i in range(20)])
    q.push_many([Message(i, id=f"due-{i}", priority=3, delay=0.05) for i in range(12)])
    q.push_many([Message(i, id=f"soon-{i}", priority=7) for i in range(12)])
    time.sleep(0.1)
    got = [m for _ in range(24) for m in q.pop(count=1)]
    assert [m.priority for m in got] == [3] * 12 + [7] * 12


def test_priority_across_shards_after_a_look_that_saw_priorities(client: dynoq.Client) -> None:
    # After a pop that saw priorities above 0 the next one looks at every shard first
    # (a hint for the cost only): a priority 0 pushed since then still goes first, and
    # an all-zero queue again pops from one shard.
    q = client.queue("prio-hint", shards=4)
    q.push_many([Message(i, id=f"five-{i}", priority=5) for i in range(8)])
    assert [m.priority for m in q.pop(count=2)] == [5, 5]
    q.push("now", id="zero", priority=0)
    assert [m.payload for m in q.pop(count=1)] == ["now"]
    assert [m.priority for m in q.pop(count=10)] == [5] * 6
    q.push_many(range(8))
    assert [m.priority for m in q.pop(count=3)] == [0, 0, 0]


def test_pop_spreads_over_shards_and_wait(client: dynoq.Client) -> None:
    q = client.queue("spread", shards=4)
    ids = set(q.push_many([Message(i, id=f"m{i}") for i in range(40)]))
    shards = {q.shard_for(i) for i in ids}
    assert len(shards) == 4  # crc32 of 40 ids covers 4 shards
    got = q.pop(40)
    assert {m.id for m in got} == ids
    assert q.pop(1, wait=0.05) == []


def test_pop_wait_wakes_on_push(make_client: Callable[..., dynoq.Client]) -> None:
    import threading

    consumer, producer = make_client(), make_client()
    q = consumer.queue("wake", shards=2)
    result: list[list[Message]] = []
    t = threading.Thread(target=lambda: result.append(q.pop(wait=10)))
    t.start()
    time.sleep(0.3)
    pushed_at = time.monotonic()
    producer.queue("wake").push("hello")
    t.join(10)
    assert result and result[0][0].payload == "hello"
    assert time.monotonic() - pushed_at < 2  # woken by the push, not the 10 s timeout


@pytest.mark.sync_only
def test_push_publishes_a_wake_up_only_when_a_waiter_may_need_it(client: dynoq.Client) -> None:
    q = client.queue("wake-news", shards=1)
    sub = q.backend.subscribe(q.ops.wake)
    try:

        def woken(timeout: float) -> bool:
            return bool(sub.get(timeout))

        q.push("a")
        assert woken(5)  # ready was empty
        q.push("b")
        assert not woken(0.2)  # ready was not: whoever waits was woken by "a"
        q.push("c", delay=60)
        assert woken(5)  # the first delayed message
        q.push("d", delay=120)
        assert not woken(0.2)  # due after "c": a waiter naps until c's due time anyway
        q.push("e", delay=30)
        assert woken(5)  # due before every delayed one
        q.push_many([dynoq.Message(i, delay=90) for i in range(3)] + ["f"])
        assert not woken(0.2)  # neither the first ready nor the earliest due
        assert len(q.pop(10)) == 3
        q.push_many(["g", "h"])
        assert woken(5)  # ready was empty again
        assert not woken(0.2)  # one wake-up for the whole call
    finally:
        sub.close()


def test_pop_wait_wakes_for_an_earlier_due_message(
    make_client: Callable[..., dynoq.Client],
) -> None:
    import threading

    consumer, producer = make_client(), make_client()
    q = consumer.queue("wake-earlier", shards=1)
    producer.queue("wake-earlier").push("late", delay=60)
    result: list[list[Message]] = []
    t = threading.Thread(target=lambda: result.append(q.pop(wait=10)))
    t.start()
    time.sleep(0.3)  # the pop waits, due time 60 s away
    pushed_at = time.monotonic()
    producer.queue("wake-earlier").push("soon", delay=0.2)
    t.join(10)
    assert result and [m.payload for m in result[0]] == ["soon"]
    assert time.monotonic() - pushed_at < 3  # woken by the push, not the 10 s timeout


@pytest.mark.sync_only
def test_a_batch_in_flight_is_kept_out_of_listpacks(real_client: dynoq.Client) -> None:
    """lua/lib/pin.lua: a shard's in-flight zset and delivery-state hash stay a skiplist
    and a hashtable (found by key, not searched entry by entry), even once empty; and
    nothing that reads the shard sees the pin."""
    from dynoq._core import inspect
    from dynoq._core.calls import Cmd

    q = real_client.queue("pinned", shards=1)
    k = shard_keys(q, 0)

    def encoding(key: str) -> bytes:
        return bytes(q.backend.run(Cmd(("OBJECT", "ENCODING", key))))

    def in_flight_page() -> tuple[list[str], bool]:
        entries, more = q.backend.drive(inspect.page(q.ops, "in_flight", shards=[0], count=100))
        return sorted(e.message.id or "" for e in entries), more

    def exists(key: str) -> int:
        return int(q.backend.run(Cmd(("EXISTS", key))))

    q.push_many([Message(i, id=f"m{i}") for i in range(100)])
    got = q.pop(100)
    # First deliveries of a concurrent queue write no state (lua/lib/delivery.lua) ...
    assert (encoding(k.unack), exists(k.dlv)) == (b"skiplist", 0)
    # ... redeliveries do, into a pinned hash.
    assert all(q.nack(m) for m in got)
    got = q.pop(100)
    assert {m.attempts for m in got} == {2}
    assert (encoding(k.unack), encoding(k.dlv)) == (b"skiplist", b"hashtable")
    assert q.stats().unacked == 100
    assert in_flight_page() == (sorted(m.id or "" for m in got), False)
    assert q.ack_many(got[:99]) == 99
    assert (q.stats().unacked, in_flight_page()) == (1, ([got[99].id], False))
    assert q.ack(got[99]) and q.stats().unacked == 0 and in_flight_page() == ([], False)
    assert requeue_shard(q, 0, force=True) == 0  # the pin is no delivery to give back
    assert (encoding(k.unack), encoding(k.dlv)) == (b"skiplist", b"hashtable")
    q.push("next")
    [m] = q.pop()
    assert (m.payload, m.attempts) == ("next", 1)
    assert q.ack(m) and exists(k.dlv) == 1  # the pin alone


def test_pop_wait_sleeps_until_due(client: dynoq.Client) -> None:
    q = client.queue("wait-due", shards=1)
    q.push("x", delay=0.3)
    start = time.monotonic()
    [m] = q.pop(wait=5)
    assert m.payload == "x" and 0.25 <= time.monotonic() - start < 3


def test_visibility_timeout_redelivers_with_attempts(client: dynoq.Client) -> None:
    q = client.queue("vis", shards=1, unack_timeout=0.2)
    msg_id = q.push("job")
    [first] = q.pop()
    assert q.pop() == []
    time.sleep(0.3)
    [second] = q.pop()  # pop itself gives back expired deliveries
    assert (second.id, second.attempts) == (msg_id, 2)
    assert q.ack(first) is False  # stale: does not remove the newer delivery
    assert q.stats().unacked == 1
    assert q.ack(second) is True and q.get(msg_id) is None


def test_ack_counts_each_delivery_once_and_checks_the_whole_token(client: dynoq.Client) -> None:
    q = client.queue("ack-once", shards=1)
    q.push_many(["a", "b"])
    a, b = q.pop(2)
    assert q.stats().total("acked") == 0
    # A token is compared whole: its tail, or the state's other fields, are not enough.
    for forged in (a.token[-2:], f"1|{a.token}", f"{a.token}|"):
        assert q.ack_many([dataclasses.replace(a, token=forged)]) == 0
    assert q.ack_many([a, a, b]) == 2  # the same delivery twice is acked once
    assert q.stats().total("acked") == 2 and q.stats().unacked == 0


def test_a_first_delivery_has_no_state_and_a_stale_token_never_acks_a_later_one(
    client: dynoq.Client,
) -> None:
    """A concurrent queue's first delivery writes no delivery state: its token is its unack
    score (lua/lib/delivery.lua). A token of an earlier delivery of the same id (acked,
    removed, or replaced by a push, then pushed and popped again) does not match."""
    q = client.queue("incarnations", shards=1)
    for end in ("ack", "remove", "replace"):
        q.push("old", id="x")
        # Popped for a shorter time than the later delivery: their deadlines differ even
        # within one millisecond (then only the 11 random bits of the token would).
        [old] = q.pop(visibility=30)
        assert old.attempts == 1 and q.get("x").attempts == 1  # type: ignore[union-attr]
        if end == "ack":
            assert q.ack(old)
            q.push("new", id="x")
        elif end == "remove":
            assert q.remove("x")
            q.push("new", id="x")
        else:
            q.push("new", id="x")  # a plain push replaces it, in flight or not
        [new] = q.pop()
        assert (new.payload, new.attempts) == ("new", 1) and new.token != old.token
        assert not q.ack(old) and not q.nack(old) and not q.extend(old, 5)
        assert q.stats().unacked == 1
        assert q.ack(new) and q.stats().unacked == 0


def test_extend_by_id_keeps_the_holders_token(client: dynoq.Client) -> None:
    """Extending a stateless delivery moves its unack score, its token: the state written
    then holds the token its holder has, whoever extended it."""
    q = client.queue("extend-by-id", shards=1)
    msg_id = q.push("x")
    [m] = q.pop(visibility=30)
    assert q.extend(msg_id, 60) is True
    assert q.extend(m, 60) is True and q.ack(m) is True


def test_a_concurrent_queue_gives_an_expired_delivery_back_at_the_back(
    client: dynoq.Client,
) -> None:
    """As Dyno's processUnacks (back at its deadline), an expired delivery of a concurrent
    queue takes a fresh place at the back of its priority; an ordered queue keeps its
    place (tests/test_ordered.py)."""
    q = client.queue("back-of-line", shards=1)
    q.push_many(["a", "b", "c"])
    [a] = q.pop(visibility=0.1)
    time.sleep(0.2)
    got = q.pop(3)
    assert [(m.payload, m.attempts) for m in got] == [("b", 1), ("c", 1), ("a", 2)]
    assert not q.ack(a) and q.ack_many(got) == 3


def test_requeue_expired_over_all_shards(client: dynoq.Client) -> None:
    q = client.queue("requeue", shards=4)
    q.push_many(range(20))
    got = q.pop(20, visibility=0.1)
    assert len(got) == 20
    time.sleep(0.2)
    assert q.requeue_expired() == 20
    assert q.stats().ready == 20
    assert sorted(m.attempts for m in q.peek(20)) == [1] * 20


def test_nack_now_and_later(client: dynoq.Client) -> None:
    q = client.queue("nack", shards=1)
    q.push("a")
    q.push("b")
    [a] = q.pop()
    assert q.nack(a) is True
    assert [m.payload for m in q.pop(2)] == ["b", "a"]  # a nacked message goes to the back
    q.push("c")
    [c] = q.pop()
    assert q.nack(c, delay=0.3) is True and q.nack(c) is False
    assert q.pop() == []
    time.sleep(0.35)
    [again] = q.pop()
    assert (again.payload, again.attempts) == ("c", 2)


def test_max_retries_then_dead_letter_and_replay(client: dynoq.Client) -> None:
    q = client.queue("retries", shards=1, max_retries=2, unack_timeout=0.1)
    msg_id = q.push("poison")
    for attempt in (1, 2):
        [m] = q.pop()
        assert m.attempts == attempt
        q.nack(m)
    [m] = q.pop()
    assert m.attempts == 3
    time.sleep(0.15)  # the third delivery expires: retries are spent
    assert q.requeue_expired() == 1
    assert q.pop() == [] and q.size() == 0
    [dead] = q.dead()
    assert (dead.id, dead.payload, dead.attempts) == (msg_id, "poison", 3)
    assert q.stats().dead == 1
    assert q.replay_dead() == 1 and q.stats().dead == 0
    [m] = q.pop()
    assert (m.id, m.attempts) == (msg_id, 1)
    assert dead_letter(q, m) is True
    assert q.replay_dead(ids=[msg_id, "unknown"]) == 1
    [m] = q.pop()
    dead_letter(q, m)
    assert q.purge_dead() == 1 and q.get(msg_id) is None and q.dead() == []


def test_extend_moves_the_deadline(client: dynoq.Client) -> None:
    q = client.queue("extend", shards=1, unack_timeout=0.2)
    q.push("x")
    [m] = q.pop()
    assert q.extend(m, 5.0) is True
    time.sleep(0.3)
    assert q.requeue_expired() == 0 and q.pop() == []
    assert q.ack(m) is True
    assert q.extend(m, 5.0) is False


def test_extend_to_zero_makes_a_delivery_visible_again_at_once(client: dynoq.Client) -> None:
    # Dyno-queues' own test (RedisDynoQueueTest.testSetUnackTimeout): setUnackTimeout(id,
    # 10 s) keeps it away, setUnackTimeout(id, 0) gives it back to the next pop.
    q = client.queue("extend-zero", shards=2)
    msg_id = q.push("x")
    [m] = q.pop(visibility=30)
    assert q.extend(m, 10) is True and q.pop() == []
    assert q.extend(m, 0) is True
    [again] = q.pop()
    assert (again.id, again.attempts) == (msg_id, 2)
    assert q.ack(m) is False  # the delivery it replaced
    assert q.extend(again, 0.0) is True and q.extend(msg_id, 0) is True  # by id, too
    [third] = q.pop()
    assert q.ack(third) is True and q.extend(third, 0) is False  # no longer in flight
    assert q.size() == 0 and q.stats().unacked == 0


def test_extend_to_zero_wakes_a_waiting_pop(client: dynoq.Client) -> None:
    # A pop waiting for news would otherwise sleep until the old deadline (60 s), and
    # then its wait (10 s) would be over: it returns the message at once instead.
    q = client.queue("extend-wake", shards=1)
    q.push("x")
    [m] = q.pop(visibility=60)
    got: list[Message] = []
    waiter = threading.Thread(target=lambda: got.extend(q.pop(wait=10.0)))
    waiter.start()
    time.sleep(0.3)  # usually waiting by then (if not, its first look finds the message)
    assert q.extend(m, 0) is True
    waiter.join(15)
    assert [g.payload for g in got] == ["x"]


def test_reschedule_remove_get_contains(client: dynoq.Client) -> None:
    q = client.queue("by-id", shards=3)
    msg_id = q.push("x", id="fixed-id", priority=3)
    assert q.reschedule(msg_id, delay=60) is True
    m = q.get(msg_id)
    assert m is not None and m.priority == 3 and m.delay == pytest.approx(60, abs=1)
    assert q.pop() == [] and q.stats().delayed == 1
    assert q.reschedule(msg_id, delay=0) is True
    [popped] = q.pop()
    assert q.reschedule(msg_id, delay=1) is False  # in flight
    assert q.remove(msg_id) is True and q.remove(msg_id) is False
    assert q.ack(popped) is False and not q.contains(msg_id)
    assert q.reschedule("nope", delay=1) is False and q.get("nope") is None


def test_ops_by_id_alone(client: dynoq.Client) -> None:
    q = client.queue("by-id-ops", shards=4)
    q.push("x", id="id-1")
    q.pop()
    assert q.extend("id-1", 10) is True
    assert q.nack("id-1") is True
    q.pop()
    assert q.ack("id-1") is True and q.size() == 0


def test_push_with_same_id_replaces(client: dynoq.Client) -> None:
    q = client.queue("upsert", shards=2)
    q.push("v1", id="same")
    [old] = q.pop()
    q.push("v2", id="same", delay=0)
    assert q.ack(old) is False  # the old delivery is stale after a replace
    [new] = q.pop()
    assert (new.payload, new.attempts) == ("v2", 1)


def test_ensure_pushes_only_if_absent(client: dynoq.Client) -> None:
    q = client.queue("ensure", shards=2)
    assert q.ensure("a", id="e1") is True
    assert q.ensure("b", id="e1") is False
    [m] = q.pop()
    assert m.payload == "a"
    assert q.ensure("c", id="e1") is False  # in flight counts as present
    q.ack(m)
    assert q.ensure("d", id="e1") is True  # no dedupe window: acked ids may come back
    assert q.ensure_many([Message(1, id="e1"), Message(2, id="e2")]) == 1


def test_dedupe_window(client: dynoq.Client) -> None:
    q = client.queue("dedupe", shards=1, dedupe_window=0.4)
    assert q.ensure("a", id="d1") is True
    q.ack(q.pop()[0])
    assert q.ensure("a", id="d1") is False  # acked within the window
    time.sleep(0.45)
    assert q.ensure("a", id="d1") is True


def test_peek_does_not_claim(client: dynoq.Client) -> None:
    q = client.queue("peek", shards=4)
    q.push_many([Message(i, priority=i % 3) for i in range(12)])
    peeked = q.peek(5)
    assert [m.priority for m in peeked] == [0, 0, 0, 0, 1]
    assert q.stats().ready == 12
    assert len(q.pop(12)) == 12 and q.peek() == []


def test_stats_and_clear(client: dynoq.Client) -> None:
    q = client.queue("stats", shards=2)
    q.push_many(range(5))
    q.push("later", delay=60)
    q.pop(2)
    s = q.stats()
    assert (s.ready, s.delayed, s.unacked, s.dead, s.size) == (3, 1, 2, 0, 4)
    assert len(s.shards) == 2 and sum(x.ready for x in s.shards) == 3
    assert s.shards[0].oldest_ready_at is not None or s.shards[1].oldest_ready_at is not None
    q.clear()
    s = q.stats()
    assert (s.ready, s.delayed, s.unacked, s.dead) == (0, 0, 0, 0)
    assert client.queue("stats").settings.shards == 2  # settings survive clear


def test_clear_of_a_large_queue_deletes_every_message_and_keeps_the_queue(
    client: dynoq.Client,
) -> None:
    q = client.queue("big-clear", shards=2, dedupe_window=60)
    q.push_many(
        [dynoq.Message(i, id=f"m{i}", delay=60 if i % 5 == 0 else 0) for i in range(30_000)]
    )
    popped = q.pop(1000)
    q.ack_many(popped[:500])  # remembered for the dedupe window
    q.nack(popped[500], delay=30)
    q.backend.drive(byid.nack(q.ops, popped[501], mode="dead"))
    q.clear()
    s = q.stats()
    assert (s.ready, s.delayed, s.unacked, s.dead) == (0, 0, 0, 0)
    for shard in q.ops.shard_keys:
        assert client.redis.exists(*shard.data()) == 0
        assert client.redis.get(shard.epoch) is not None  # the queue itself stays
    assert q.get("m1") is None and q.ensure("again", id="m1")  # the window went too
    assert client.queue("big-clear").settings.dedupe_window == 60


def test_settings_stored_and_conflicts(make_client: Callable[..., dynoq.Client]) -> None:
    a, b = make_client(), make_client()
    q = a.queue("cfg", shards=3, unack_timeout=5, max_retries=2)
    assert b.queue("cfg").settings == q.settings
    assert b.queue("cfg", shards=3).settings.max_retries == 2
    with pytest.raises(dynoq.QueueConfigError, match="shards=5"):
        b.queue("cfg", shards=5)
    with pytest.raises(ValueError):
        a.queue("cfg", ordered=True)
    assert "cfg" in a.queue_names()


def test_ordered_fifo_per_key_and_one_batch_in_flight(client: dynoq.Client) -> None:
    q = client.queue("ordered", shards=4, ordered=True, unack_timeout=30)
    for i in range(40):
        q.push({"k": i % 5, "i": i}, key=f"key-{i % 5}")
    seen: dict[int, list[int]] = {}
    while True:
        got = q.pop(3)
        if not got:
            break
        for m in got:
            assert m.shard == q.shard_for(m.key or "")
            seen.setdefault(m.payload["k"], []).append(m.payload["i"])
        q.ack_many(got)
    assert seen == {k: [i for i in range(40) if i % 5 == k] for k in range(5)}


def test_ordered_shard_blocks_while_in_flight_and_retries_in_place(client: dynoq.Client) -> None:
    q = client.queue("ordered-retry", shards=1, ordered=True, max_retries=1)
    for i in range(3):
        q.push(i, key="k")
    [m0] = q.pop()
    assert q.pop() == []  # blocked: an earlier message is in flight
    q.nack(m0, delay=0.2)
    assert q.pop() == []  # blocked: it waits to be retried
    time.sleep(0.25)
    [again] = q.pop()
    assert (again.payload, again.attempts) == (0, 2)  # retried in place, at the head
    q.nack(again)  # retries spent: dead-lettered, the shard moves on
    assert [m.payload for m in q.pop(5)] == [1, 2]
    assert [m.payload for m in q.dead()] == [0]


def test_ordered_requeue_on_expiry_keeps_order(client: dynoq.Client) -> None:
    q = client.queue("ordered-exp", shards=1, ordered=True)
    for i in range(5):
        q.push(i, key="k")
    got = q.pop(2, visibility=0.1)
    assert [m.payload for m in got] == [0, 1]
    time.sleep(0.15)
    assert [m.payload for m in q.pop(5)] == [0, 1, 2, 3, 4]


def test_an_ordered_batch_given_back_every_way_returns_in_its_order(client: dynoq.Client) -> None:
    # An ordered shard's first deliveries keep no state: the places of the batch in flight
    # are kept by the pop (lua/lib/batch.lua). Ids sort against push order here, as the
    # members of one deadline in `unack` would come back without their places; of three
    # lengths, with the places' separators in them.
    q = client.queue("ordered-back", shards=1, ordered=True, max_retries=5)
    q.push_many([Message(i, id=f"id-{99 - i:02d}{':;' * (i % 3)}", key="k") for i in range(30)])

    def pop(n: int, visibility: float = 30.0) -> list[dynoq.Message]:
        return q.pop(n, visibility=visibility)

    assert [m.payload for m in pop(10, 0.1)] == list(range(10))
    time.sleep(0.15)  # their visibility runs out: the next pop gives them back
    batch = pop(12)
    assert [(m.payload, m.attempts) for m in batch] == [(i, 2 if i < 10 else 1) for i in range(12)]
    assert q.ack_many(batch[:1]) == 1
    assert requeue_shard(q, 0, force=True) == 11  # a takeover gives every delivery back
    batch = pop(5)
    assert [m.payload for m in batch] == [1, 2, 3, 4, 5]
    assert q.extend(batch[3], 0.05) and q.extend(batch[0], 30)  # states made by extend
    for m in reversed(batch):  # given back unhandled (a stopping consumer's way)
        assert q.backend.drive(byid.nack(q.ops, m, mode="back"))
    batch = pop(8)
    assert [m.payload for m in batch] == list(range(1, 9))
    for m in reversed(batch):  # retries in place, the last first
        assert q.nack(m, delay=0.0)
    assert [m.payload for m in pop(30)] == list(range(1, 30))


def test_ordered_refuses_delay_priority_reschedule(client: dynoq.Client) -> None:
    q = client.queue("ordered-refuse", shards=2, ordered=True)
    with pytest.raises(dynoq.OrderedQueueError, match="ordered"):
        q.push("x", delay=1)
    with pytest.raises(ValueError):
        q.push("x", priority=1)
    msg_id = q.push("x", key="k")
    with pytest.raises(dynoq.OrderedQueueError):
        q.reschedule(msg_id, delay=1)
    assert q.size() == 1


def test_ordered_lease_fencing_at_storage_level(client: dynoq.Client) -> None:
    q = client.queue("fenced", shards=1, ordered=True)
    keys = shard_keys(q, 0)
    q.push_many([Message(i, key="k") for i in range(3)])
    assert client.redis.set(keys.lease, "owner-a", nx=True, px=60_000)
    assert q.pop() == []  # leased by someone else: a plain pop skips the shard
    [m] = pop_leased(q, lease="owner-a")
    assert m.payload == 0 and m.lease == "owner-a"
    client.redis.set(keys.lease, "owner-b", px=60_000)  # taken over
    with pytest.raises(dynoq.LeaseLost):
        q.ack(m)
    with pytest.raises(dynoq.LeaseLost):
        q.nack(m)
    with pytest.raises(dynoq.LeaseLost):
        q.extend(m, 10)
    with pytest.raises(dynoq.LeaseLost):
        pop_leased(q, lease="owner-a")
    # The new holder gets the old holder's in-flight message back at the head, at once.
    assert requeue_shard(q, 0, force=True, lease="owner-b") == 1
    assert [x.payload for x in pop_leased(q, 5, lease="owner-b")] == [0, 1, 2]


def test_memory_backend_shares_data_by_name() -> None:
    a = dynoq.connect("memory://shared-test", prefix="x")
    b = dynoq.connect("memory://shared-test", prefix="x")
    try:
        a.queue("q", shards=1).push("hi")
        assert b.queue("q").pop()[0].payload == "hi"
    finally:
        a.close()
        b.close()


def test_ack_many_counts_each_delivery_once(client: dynoq.Client) -> None:
    q = client.queue("ack-dupes", shards=2)
    q.push_many(range(10))
    got = q.pop(10)
    assert q.ack_many([*got, got[0], got[1].id or ""]) == 10
    assert q.ack_many(got) == 0 and q.stats().unacked == 0


@pytest.mark.parametrize("ordered", [False, "key"])
def test_one_ack_of_many_tokens_acks_the_current_deliveries_alone(
    client: dynoq.Client, ordered: bool | str
) -> None:
    """An ack names a batch's shared token once (lua/lib/acks.lua) and every other
    delivery's own: first deliveries, redeliveries, a stale one and one by id, in one
    call, ack exactly the current ones."""
    q = client.queue(f"ack-tokens-{ordered or 'plain'}", shards=1, ordered=ordered)
    q.push_many([Message(i, id=f"m{i}", key=f"k{i}" if ordered else None) for i in range(5)])
    first = q.pop(5, visibility=60)
    assert len({m.token for m in first}) == 1  # one batch, one token
    for m in first[:2]:
        assert q.extend(m, 0)  # given back at once: popped again below
    again = sorted(q.pop(5, visibility=60), key=lambda m: m.id or "")
    assert [(m.id, m.attempts) for m in again] == [("m0", 2), ("m1", 2)]
    assert again[0].token != first[0].token  # a redelivery: a token of its own batch
    mixed = [first[0], again[1], first[2], first[3], "m4"]  # m0 stale, the rest current
    assert q.ack_many(mixed) == 4
    assert q.stats().unacked == 1 and q.ack(again[0])
    assert delivered.ack_args(["a", "T", "b", "U", "c", "T", "d", ""]) == [
        "T",
        2,
        "a",
        "c",
        "b",
        "U",
        "d",
        "",
    ]


def test_ensure_many_keeps_the_first_of_a_repeated_id(client: dynoq.Client) -> None:
    q = client.queue("ensure-dupes", shards=2)
    assert (
        q.ensure_many(
            [Message("first", id="x"), Message("second", id="x"), Message("other", id="y")]
        )
        == 2
    )
    got = q.get("x")
    assert got is not None and got.payload == "first"
    assert q.size() == 2
