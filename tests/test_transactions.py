"""Transactional messages (DESIGN.md §3.6): prepare, commit, rollback and the checker, on
every backend and both flavors. The crash tests with real processes and SQLite files are
in tests/test_transactions_procs.py."""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from typing import Any

import pytest
from helpers import wait_for

import dynoq
from dynoq import Message

FLAVORS = ("sync", "async")


def test_a_prepared_message_is_stored_and_never_waiting(client: dynoq.Client) -> None:
    q = client.queue("tx", shards=2)
    half = q.prepare({"order": 1}, id="o-1", headers={"h": 1})
    assert half.id == "o-1"
    assert q.pop(10) == [] and q.peek(10) == [] and q.size() == 0
    stats = q.stats()
    assert (stats.prepared, stats.ready, stats.delayed, stats.unacked) == (1, 0, 0, 0)
    assert q.contains("o-1")
    got = q.get("o-1")
    assert got is not None and got.payload == {"order": 1} and got.headers == {"h": 1}
    assert q.ensure("other", id="o-1") is False  # present for push-if-absent
    [listed] = q.prepared()
    assert (listed.id, listed.checks) == ("o-1", 0)
    assert q.pop(10) == []


def test_commit_delivers_once_and_is_final(client: dynoq.Client) -> None:
    q = client.queue("tx", shards=2)
    half = q.prepare("paid", id="o-2")
    assert half.commit() is True
    assert half.commit() is True  # idempotent
    assert half.rollback() is False  # final: nothing removed
    assert q.stats().prepared == 0 and q.size() == 1
    [m] = q.pop(10)
    assert (m.id, m.payload, m.attempts) == ("o-2", "paid", 1)
    assert q.ack(m)
    assert half.rollback() is False and half.commit() is True  # decided, even once acked
    assert q.pop(10) == []
    stats = q.stats()
    assert (stats.total("committed"), stats.total("rolled_back"), stats.total("pushed")) == (
        1,
        0,
        1,
    )


def test_rollback_removes_and_is_final(client: dynoq.Client) -> None:
    q = client.queue("tx", shards=2)
    half = q.prepare("cancelled", id="o-3")
    assert half.rollback() is True
    assert half.rollback() is True
    assert half.commit() is False  # delivers nothing
    assert not q.contains("o-3") and q.get("o-3") is None
    assert q.pop(10) == [] and q.stats().prepared == 0
    assert q.stats().total("rolled_back") == 1


def test_a_handle_rebuilt_from_the_id_decides(client: dynoq.Client) -> None:
    q = client.queue("tx", shards=3)
    q.prepare("later", id="o-4")
    assert q.half("o-4").commit() is True
    assert [m.id for m in q.pop(10)] == ["o-4"]


def test_transaction_commits_on_a_clean_exit_and_rolls_back_on_error(client: dynoq.Client) -> None:
    q = client.queue("tx", shards=2)
    with q.transaction("kept", id="t-1") as half:
        assert q.size() == 0 and q.contains("t-1")
    assert half.id == "t-1"
    with pytest.raises(RuntimeError, match="db failed"), q.transaction("lost", id="t-2"):
        raise RuntimeError("db failed")
    assert not q.contains("t-2")
    assert [m.payload for m in q.pop(10)] == ["kept"]


def test_delay_counts_from_the_commit(client: dynoq.Client) -> None:
    q = client.queue("tx", shards=1)
    half = q.prepare("later", id="d-1", delay=30)
    time.sleep(0.2)
    before = client.server_time()
    assert half.commit()
    m = q.get("d-1")
    assert m is not None and m.enqueued_at is not None and m.deliver_at is not None
    assert m.enqueued_at >= before - 0.002  # enqueued at the commit, not at prepare
    assert m.deliver_at - m.enqueued_at == pytest.approx(30, abs=0.002)
    assert q.pop(10) == [] and q.stats().delayed == 1


def test_priority_is_kept_through_the_commit(client: dynoq.Client) -> None:
    q = client.queue("tx", shards=1)
    low = q.prepare("low", priority=9)
    q.push("mid", priority=5)
    assert low.commit()
    q.push("high", priority=0)
    assert [m.payload for m in q.pop(10)] == ["high", "mid", "low"]


def test_ordered_queue_takes_its_place_at_the_commit(client: dynoq.Client) -> None:
    q = client.queue("otx", shards=2, ordered=True)
    first = q.prepare("a", key="cust-1")
    q.push("b", key="cust-1")
    assert first.commit()
    q.push("c", key="cust-1")
    got = []
    for _ in range(3):
        [m] = q.pop(1)
        got.append(m.payload)
        assert q.ack(m)
    assert got == ["b", "a", "c"]


def test_ordered_queue_refuses_delay_and_priority(client: dynoq.Client) -> None:
    q = client.queue("otx", shards=2, ordered=True)
    with pytest.raises(dynoq.OrderedQueueError):
        q.prepare("x", key="k", delay=5)
    with pytest.raises(dynoq.OrderedQueueError):
        q.prepare("x", key="k", priority=3)
    assert q.stats().prepared == 0


def test_ordered_queue_half_rebuilt_by_id(client: dynoq.Client) -> None:
    q = client.queue("otx", shards=4, ordered=True)
    q.prepare("x", id="ok-1", key="cust-9")
    assert q.half("ok-1").commit() is True
    [m] = q.pop(1)
    assert m.id == "ok-1" and m.shard == q.shard_for("cust-9")


def test_key_queue_takes_its_place_in_its_key_at_the_commit(client: dynoq.Client) -> None:
    q = client.queue("ktx", shards=2, ordered="key")  # type: ignore[arg-type]
    first = q.prepare("a", key="k1")
    q.push("b", key="k1")
    assert first.commit()
    got = []
    for _ in range(2):
        [m] = q.pop(1)
        got.append(m.payload)
        assert q.ack(m)
    assert got == ["b", "a"]


def test_key_queue_rollback_delivers_nothing(client: dynoq.Client) -> None:
    q = client.queue("ktx", shards=2, ordered="key")  # type: ignore[arg-type]
    half = q.prepare("a", key="k1")
    assert half.rollback() and q.pop(10) == [] and q.stats().prepared == 0


def test_key_queue_prepared_message_is_read_replaced_and_committed_once(
    client: dynoq.Client,
) -> None:
    q = client.queue("ktx2", shards=2, ordered="key")  # type: ignore[arg-type]
    half = q.prepare({"n": 1}, id="p1", key="k1")
    got = q.get("p1")
    assert got is not None and (got.payload, got.key) == ({"n": 1}, "k1")
    assert q.key_state("k1").waiting == 0 and q.stats().keys == 0  # not waiting yet
    assert half.commit() and half.commit()
    assert q.key_state("k1").waiting == 1
    # a plain push of a prepared id replaces it: the commit places nothing more
    other = q.prepare("old", id="p2", key="k2")
    q.push("new", id="p2", key="k2")
    assert other.commit()
    got = []
    while batch := q.pop(10):
        for m in batch:
            got.append((m.key, m.payload))
            assert q.ack(m)
    assert sorted(got, key=str) == sorted([("k1", {"n": 1}), ("k2", "new")], key=str)
    assert q.stats().keys == 0 and q.size() == 0


def test_a_made_id_and_a_given_id_already_stored(client: dynoq.Client) -> None:
    q = client.queue("tx", shards=2)
    q.push("there", id="taken")
    with pytest.raises(dynoq.InvalidArgument, match="taken"):
        q.prepare("new", id="taken")
    assert q.get("taken") is not None and q.get("taken").payload == "there"  # type: ignore[union-attr]
    assert q.stats().prepared == 0


@pytest.mark.parametrize("bad", [-1, -0.001, math.nan, math.inf, -math.inf])
def test_bad_check_after_is_refused(client: dynoq.Client, bad: float) -> None:
    q = client.queue("tx", shards=1)
    with pytest.raises(dynoq.InvalidArgument) as info:
        q.prepare("x", check_after=bad)
    assert isinstance(info.value, ValueError)
    assert q.stats().prepared == 0


def test_check_after_of_a_wrong_type_is_refused(client: dynoq.Client) -> None:
    q = client.queue("tx", shards=1)
    with pytest.raises(dynoq.InvalidType):
        q.prepare("x", check_after="soon")  # type: ignore[arg-type]


def test_a_handle_for_an_id_never_prepared_is_refused(client: dynoq.Client) -> None:
    q = client.queue("tx", shards=2)
    with pytest.raises(dynoq.InvalidArgument, match="never prepared"):
        q.half("ghost").commit()
    with pytest.raises(dynoq.InvalidArgument, match="never prepared"):
        q.half("ghost").rollback()
    q.push("plain", id="plain-1")  # a plain message is no prepared one either
    with pytest.raises(dynoq.InvalidArgument):
        q.half("plain-1").commit()
    with pytest.raises(dynoq.InvalidArgument):
        q.half("")


@pytest.mark.parametrize("bad", [0, -3])
def test_max_checks_below_one_is_refused(client: dynoq.Client, bad: int) -> None:
    q = client.queue("tx", shards=1)
    with pytest.raises(dynoq.InvalidArgument, match="max_checks"):
        client.checker(q, lambda m: "commit", max_checks=bad)
    with pytest.raises(dynoq.InvalidType):
        client.checker(q, lambda m: "commit", max_checks=1.5)  # type: ignore[arg-type]
    with pytest.raises(dynoq.InvalidArgument):
        client.checker(q, lambda m: "commit", check_interval=-1)
    with pytest.raises(dynoq.InvalidType):
        client.checker(q, "commit")  # type: ignore[arg-type]


def test_a_plain_push_over_a_prepared_id_stands(client: dynoq.Client) -> None:
    """A push is an upsert: it replaces the prepared copy, and that push is delivered
    once whatever the transaction decides."""
    q = client.queue("tx", shards=1)
    half = q.prepare("prepared", id="u-1")
    q.push("pushed", id="u-1")
    assert half.rollback() is True
    [m] = q.pop(10)
    assert m.payload == "pushed"
    assert q.ack(m) and q.pop(10) == []


def test_remove_of_a_prepared_message_is_a_rollback(client: dynoq.Client) -> None:
    q = client.queue("tx", shards=1)
    half = q.prepare("x", id="r-1")
    assert q.remove("r-1")
    assert half.commit() is False and q.pop(10) == []


def test_clear_drops_prepared_messages(client: dynoq.Client) -> None:
    q = client.queue("tx", shards=2)
    q.prepare("x")
    q.clear()
    assert q.stats().prepared == 0


def test_concurrent_commit_and_rollback_one_wins(client: dynoq.Client) -> None:
    q = client.queue("tx", shards=2)
    for n in range(8):
        half = q.prepare(n, id=f"race-{n}")
        results: dict[str, bool] = {}
        barrier = threading.Barrier(2)

        def decide(
            what: str, h: Any = half, b: threading.Barrier = barrier, out: dict[str, bool] = results
        ) -> None:
            b.wait()
            out[what] = getattr(h, what)()

        threads = [threading.Thread(target=decide, args=(w,)) for w in ("commit", "rollback")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert results["commit"] != results["rollback"], results
        # the loser's answer holds afterwards too
        assert half.commit() is results["commit"] and half.rollback() is results["rollback"]
        assert q.contains(f"race-{n}") is results["commit"]
    delivered = sorted(m.payload for m in q.pop(100))
    assert delivered == sorted(n for n in range(8) if q.contains(f"race-{n}"))


def test_a_new_prepare_of_an_id_decided_before(client: dynoq.Client) -> None:
    q = client.queue("tx", shards=1)
    assert q.prepare("one", id="again").rollback()
    half = q.prepare("two", id="again")
    assert half.commit() is True  # this transaction's decision, not the old one's
    [m] = q.pop(1)
    assert m.payload == "two"


# -- the checker --------------------------------------------------------------------------


def _checker(client: dynoq.Client, q: Any, check: Any, **options: Any) -> Any:
    options.setdefault("check_interval", 0.05)
    options.setdefault("poll_interval", 0.05)
    return client.checker(q, check, **options)


def _until_decided(client: dynoq.Client, target: Any, check: Any) -> None:
    """Run a checker of ``target`` (a queue or topic) until nothing of it is prepared."""
    checker = _checker(client, target, check)
    checker.start()
    try:
        wait_for(lambda: target.prepared() == [], what="the checker deciding")
    finally:
        checker.stop()


def test_the_checker_commits_and_rolls_back_as_answered(client: dynoq.Client) -> None:
    q = client.queue("tx", shards=3)
    decisions = {"c": "commit", "r": "rollback"}
    for n in range(6):
        q.prepare(n, id=f"{'cr'[n % 2]}-{n}", check_after=0)
    late = q.prepare("not yet", id="c-late", check_after=3600)
    seen: list[str] = []

    def check(msg: Message) -> str:
        seen.append(msg.id or "")
        return decisions[(msg.id or "")[0]]

    checker = _checker(client, q, check)
    checker.start()
    try:
        wait_for(lambda: q.stats().prepared == 1, what="the due ones decided")
    finally:
        assert checker.stop()
    assert sorted(seen) == sorted(f"{'cr'[n % 2]}-{n}" for n in range(6))  # each asked once
    assert sorted(m.id for m in q.pop(100)) == ["c-0", "c-2", "c-4"]
    assert late.commit() is True


def test_unknown_answers_ask_again_then_bury(
    client: dynoq.Client, caplog: pytest.LogCaptureFixture
) -> None:
    q = client.queue("tx", shards=1)
    q.prepare("stuck", id="s-1", check_after=0)
    answers = iter(["unknown", "maybe", None])
    calls: list[int] = []

    def check(msg: Message) -> Any:
        calls.append(msg.attempts)
        try:
            return next(answers)
        except StopIteration:
            raise RuntimeError("the database is away") from None

    checker = _checker(client, q, check, max_checks=4)
    with caplog.at_level(logging.WARNING, logger="dynoq"):
        checker.start()
        try:
            wait_for(lambda: q.stats().dead == 1, what="buried")
        finally:
            checker.stop()
    assert calls == [1, 2, 3, 4]  # max_checks calls in all
    assert any("'maybe'" in r.getMessage() for r in caplog.records)  # a bad answer is logged
    assert q.stats().prepared == 0 and q.pop(10) == []
    [dead] = q.dead()
    assert dead.id == "s-1" and dead.failure is not None
    assert dead.failure.error_type == "TransactionUnresolved"
    assert "transaction unresolved" in dead.failure.error
    assert q.half("s-1").commit() is False  # it was rolled back
    assert q.replay_dead(["s-1"]) == 1  # an operator's decision to deliver it
    assert [m.id for m in q.pop(10)] == ["s-1"]


@pytest.mark.sync_only
def test_the_sync_checker_refuses_an_async_def_check(client: dynoq.Client) -> None:
    # Before, it was called, never awaited, and its coroutine taken for an answer: a
    # committed transaction ended in the dead letters as "transaction unresolved".
    q = client.queue("tx", shards=1)

    async def check(msg: Message) -> str:
        return "commit"

    with pytest.raises(dynoq.InvalidType, match=r"check .*check is async def.*dynoq\.asyncio"):
        client.checker(q, check)


def test_a_check_that_returns_an_awaitable_on_threads_asks_again(
    client: dynoq.Client, flavor: str
) -> None:
    # A plain def returning a coroutine: the sync checker counts an error and asks again
    # (it never takes the coroutine for an answer); the asyncio checker awaits it.
    q = client.queue("tx", shards=1)
    q.prepare("x", id="a-1", check_after=0)
    ran: list[str] = []

    async def answer(msg: Message) -> str:
        ran.append(msg.id or "")
        return "commit"

    checker = _checker(client, q, lambda m: answer(m), max_checks=100)
    checker.start()
    try:
        if flavor == "async":
            wait_for(lambda: q.stats().prepared == 0, what="the check's answer")
        else:
            wait_for(lambda: checker.counts["error"] >= 2, what="two errors")
    finally:
        checker.stop()
    if flavor == "async":
        assert ran == ["a-1"] and [m.id for m in q.pop(10)] == ["a-1"]
    else:
        assert ran == [] and q.stats().prepared == 1 and q.stats().dead == 0
        assert checker.counts["invalid"] == 0


def test_a_checker_that_lost_its_claim_decides_nothing(client: dynoq.Client) -> None:
    q = client.queue("tx", shards=1)
    q.prepare("x", id="f-1", check_after=0)
    tx = q.transactions if hasattr(q, "transactions") else None
    assert tx is not None
    backend = client.backend if hasattr(client, "backend") else None
    assert backend is not None
    # claim it for 50 ms, let the claim run out, and have another checker claim it
    [first] = backend.run(
        q.transactions.claim(0, count=10, claim_s=0.05, max_checks=5, token="one")
    )
    time.sleep(0.1)
    assert backend.run(q.transactions.settle(0, "f-1", "commit", token=first.token)) == 0
    [second] = backend.run(q.transactions.claim(0, count=10, claim_s=30, max_checks=5, token="two"))
    assert second.checks == 2
    assert backend.run(q.transactions.settle(0, "f-1", "rollback", token=first.token)) == 0
    assert q.stats().prepared == 1
    assert backend.run(q.transactions.settle(0, "f-1", "commit", token=second.token)) == 1
    assert [m.id for m in q.pop(10)] == ["f-1"]


def test_the_producer_deciding_first_makes_the_checker_stale(
    client: dynoq.Client, flavor: str
) -> None:
    q = client.queue("tx", shards=1)
    half = q.prepare("x", id="p-1", check_after=0)
    got = threading.Event()
    go = threading.Event()

    def check(msg: Message) -> str:
        got.set()
        go.wait(10)
        return "rollback"

    async def acheck(msg: Message) -> str:  # the asyncio checker awaits an async check
        got.set()
        for _ in range(1000):
            if go.is_set():
                break
            await asyncio.sleep(0.01)
        return "rollback"

    checker = _checker(client, q, acheck if flavor == "async" else check)
    checker.start()
    try:
        assert got.wait(15)
        assert half.commit() is True  # the producer came back first
        go.set()
        wait_for(lambda: checker.counts["stale"] == 1, what="the checker's stale answer")
    finally:
        go.set()
        checker.stop()
    assert [m.id for m in q.pop(10)] == ["p-1"]


def test_checker_groups_are_apart_from_consumer_groups(client: dynoq.Client) -> None:
    q = client.queue("tx", shards=1)
    q.prepare("x", id="g-1", check_after=0)
    handled: list[str] = []
    consumer = client.consumer(q, lambda m: handled.append(m.id), group="billing", idle_wait=0.05)
    checker = _checker(client, q, lambda m: "commit", group="billing")
    with consumer:
        checker.start()
        try:
            wait_for(lambda: handled == ["g-1"], what="committed and handled")
        finally:
            checker.stop()


def test_checker_run_stops_on_stop(client: dynoq.Client) -> None:
    q = client.queue("tx", shards=1)
    checker = _checker(client, q, lambda m: "commit")
    t = threading.Thread(target=checker.run, daemon=True)
    t.start()
    wait_for(lambda: checker.running, what="running")
    checker.stop()
    t.join(15)
    assert not t.is_alive()


# -- topics -------------------------------------------------------------------------------


def test_a_topic_publishes_a_prepared_message_at_its_commit(client: dynoq.Client) -> None:
    t = client.topic("txt", shards=2)
    t.subscribe("all")
    t.subscribe("paid-only", tags="paid")
    half = t.prepare({"order": 1}, id="tp-1", tag="paid")
    other = t.prepare({"order": 2}, id="tp-2", tag="refunded")
    every, paid = t.group_queue("all"), t.group_queue("paid-only")
    assert every.pop(10) == [] and paid.pop(10) == [] and every.size() == 0
    assert sorted(p.id for p in t.prepared()) == ["tp-1", "tp-2"]
    t.subscribe("late")  # subscribed before the commit: it gets the message
    assert half.commit() is True and half.commit() is True and half.rollback() is False
    assert other.rollback() is True and other.commit() is False
    assert [m.id for m in every.pop(10)] == ["tp-1"]
    assert [m.id for m in paid.pop(10)] == ["tp-1"]
    [m] = t.group_queue("late").pop(10)
    assert (m.id, m.tag, m.payload) == ("tp-1", "paid", {"order": 1})
    assert t.prepared() == []
    with pytest.raises(dynoq.InvalidArgument):
        t.half("never").commit()


def test_a_key_topic_commit_takes_its_place_in_its_key_in_every_group(client: dynoq.Client) -> None:
    t = client.topic("ktxt", shards=2, ordered="key")  # type: ignore[arg-type]
    t.subscribe("all")
    t.subscribe("paid-only", tags="paid")
    first = t.prepare("a", id="kp-1", key="k1", tag="paid")
    gone = t.prepare("never", id="kp-2", key="k1", tag="paid")
    t.publish("b", key="k1", tag="paid")
    every, paid = t.group_queue("all"), t.group_queue("paid-only")
    assert every.key_state("k1").waiting == 1  # the prepared ones wait for their commit
    assert first.commit() and first.commit() and gone.rollback()
    t.publish("c", key="k1")  # no tag: not for paid-only
    for q, want in ((every, ["b", "a", "c"]), (paid, ["b", "a"])):
        got = []
        while batch := q.pop(10):
            assert len(batch) == 1  # one of the key at a time
            got.append(batch[0].payload)
            assert q.ack(batch[0])
        assert got == want
    assert t.prepared() == []


def test_a_key_topic_checker_commits_in_key_order(client: dynoq.Client) -> None:
    t = client.topic("ktxc", shards=2, ordered="key")  # type: ignore[arg-type]
    t.subscribe("g")
    with pytest.raises(dynoq.OrderedQueueError):
        t.prepare("no key")
    t.prepare("asked", id="kc-1", key="k", check_after=0)
    t.prepare("refused", id="kc-2", key="k", check_after=0)
    assert sorted(p.id for p in t.prepared()) == ["kc-1", "kc-2"]
    t.publish("plain", key="k")
    asked: list[tuple[str | None, str | None]] = []

    def check(m: dynoq.Message) -> str:
        asked.append((m.id, m.key))
        return "commit" if m.id == "kc-1" else "rollback"

    _until_decided(client, t, check)
    q = t.group_queue("g")
    got = []
    while batch := q.pop(10):
        got += [(m.id, m.key) for m in batch]
        assert q.ack_many(batch) == len(batch)
    assert got[1:] == [("kc-1", "k")] and len(got) == 2 and q.stats().keys == 0
    assert set(asked) == {("kc-1", "k"), ("kc-2", "k")}


def test_a_topic_transaction_and_its_checker(client: dynoq.Client) -> None:
    t = client.topic("txt", shards=2)
    t.subscribe("g")
    with pytest.raises(RuntimeError), t.transaction("lost", id="tt-0"):
        raise RuntimeError("db failed")
    with t.transaction("kept", id="tt-1"):
        pass
    t.prepare("asked", id="tt-2", check_after=0, delay=30)
    t.prepare("refused", id="tt-3", check_after=0)
    _until_decided(client, t, lambda m: "commit" if m.id == "tt-2" else "rollback")
    q = t.group_queue("g")
    assert [m.id for m in q.pop(10)] == ["tt-1"]
    assert q.stats().delayed == 1 and q.contains("tt-2")  # its delay counts from the commit
    assert not q.contains("tt-3") and not q.contains("tt-0")
