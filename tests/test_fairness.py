"""Job control (DESIGN §3.9) on every backend and both clients: fairness between the keys
of a queue with ordered="key": weights (lua/lib/kweight.lua) and the key_rate_limit
(lua/lib/krate.lua; across processes: tests/test_rate_limits.py)."""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from helpers import FAST, wait_for

import dynoq
from dynoq._core.keyed import MAX_WEIGHTED

FLAVORS = ("sync", "async")
ASYNC_BACKENDS = ("embedded",)  # the async twin shares the core: one server
WEIGHTS = {"one": 1, "two": 2, "five": 5}


def _backlogs(q: Any, per_key: int = 400) -> None:
    for key in WEIGHTS:
        q.push_many([dynoq.Message(i, key=key) for i in range(per_key)])
    for key, w in WEIGHTS.items():
        if w != 1:
            assert q.set_weight(key, w) == 1


def _within_10_percent(got: Counter[str]) -> None:
    unit = got["one"]
    assert unit > 0, got
    for key, w in WEIGHTS.items():
        assert abs(got[key] / unit - w) <= 0.1 * w, got


def test_weighted_keys_take_turns_in_proportion(client: dynoq.Client) -> None:
    q = client.queue("fair", shards=1, ordered="key")
    _backlogs(q)
    order: list[str] = []
    for _ in range(640):  # 80 rounds of 1 + 2 + 5: every key keeps a backlog
        [m] = q.pop()
        order.append(str(m.key))
        assert q.ack(m)
    assert order[:16] == ["one", "two", "two", *["five"] * 5] * 2
    got = Counter(order)
    assert got == {"one": 80, "two": 160, "five": 400}
    _within_10_percent(got)


def test_a_weighted_key_with_several_in_flight_keeps_its_share(client: dynoq.Client) -> None:
    # key_concurrency > 1: a key that may deliver more takes its next turn in the same
    # pop (lib/ktake.lua's rounds), weighted too.
    q = client.queue("wide", shards=1, ordered="key", key_concurrency=8)
    _backlogs(q)
    got: Counter[str] = Counter()
    for _ in range(80):
        batch = q.pop(8)
        got.update(str(m.key) for m in batch)
        assert q.ack_many(batch) == len(batch)
    assert sum(got.values()) == 640
    _within_10_percent(got)


def test_weights_hold_across_consumers_of_two_clients(
    make_client: Callable[..., dynoq.Client], consumers: list[Any]
) -> None:
    # The rounds are kept in Redis: consumers of different clients (each its own
    # connections, as other processes) share them. (A key's deliveries in flight stay
    # capped by key_concurrency: room here, as the consumers take many at a time.)
    a, b = make_client(), make_client()
    q = a.queue("shared", shards=1, ordered="key", key_concurrency=1000)
    _backlogs(q, per_key=1000)
    got: Counter[str] = Counter()
    lock = threading.Lock()

    def handle(m: dynoq.Message) -> None:
        with lock:
            if sum(got.values()) < 800:
                got[str(m.key)] += 1

    for c in (a, b):
        consumers.append(c.consumer(c.queue("shared"), handle, concurrency=2, **FAST).start())
    wait_for(lambda: sum(got.values()) >= 800, what="800 deliveries", timeout=30)
    for c in consumers:
        c.stop()
    _within_10_percent(got)


def test_a_weight_is_kept_until_set_back_and_across_a_clear(client: dynoq.Client) -> None:
    q = client.queue("kept", shards=3, ordered="key")
    assert q.weight("big") == 1
    assert q.set_weight("big", 7) == 1 and q.set_weight("big", 9) == 7
    q.clear()
    assert q.weight("big") == 9 and client.queue("kept").weight("big") == 9
    assert q.set_weight("big", 1) == 9 and q.weight("big") == 1
    assert q.set_weight(42, 2) == 1 and q.weight("42") == 2  # an int key is its text


def test_bad_weights_are_refused_and_change_nothing(client: dynoq.Client) -> None:
    q = client.queue("strict", shards=2, ordered="key")
    q.set_weight("k", 3)
    for bad in (0, 101, -1):
        with pytest.raises(dynoq.InvalidArgument, match="weight must be"):
            q.set_weight("k", bad)
    for wrong in ("2", 2.0, True, None):
        with pytest.raises(dynoq.InvalidType, match="weight must be an int"):
            q.set_weight("k", wrong)
    with pytest.raises(dynoq.InvalidArgument, match="needs a key"):
        q.set_weight(None, 2)  # type: ignore[arg-type]
    with pytest.raises(dynoq.InvalidType):
        q.weight(["k"])  # type: ignore[arg-type]
    assert q.weight("k") == 3
    plain = client.queue("plain", shards=1)
    for call in (lambda: plain.set_weight("k", 2), lambda: plain.weight("k")):
        with pytest.raises(dynoq.InvalidArgument, match='ordered="key"'):
            call()


@pytest.mark.sync_only
def test_a_shard_holds_a_bounded_number_of_weighted_keys(client: dynoq.Client) -> None:
    # Every count has a bound: the shard's table of weights stops growing at MAX_WEIGHTED
    # (its count stands in for 10,000 keys here), while the keys in it may still change.
    q = client.queue("bounded", shards=1, ordered="key")
    q.set_weight("in", 2)
    control = q.ops.shard_keys[0].control
    q.backend.run(dynoq._core.calls.Cmd(("HSET", control, "weighted", MAX_WEIGHTED)))
    with pytest.raises(dynoq.InvalidArgument, match="10000 weighted keys"):
        q.set_weight("new", 2)
    assert q.weight("new") == 1
    assert q.set_weight("in", 4) == 2 and q.set_weight("in", 1) == 4
    assert q.set_weight("new", 2) == 1  # a place was freed


def test_unweighted_keys_keep_plain_round_robin(client: dynoq.Client) -> None:
    q = client.queue("even", shards=1, ordered="key")
    for key in "abc":
        q.push_many([dynoq.Message(i, key=key) for i in range(10)])
    q.set_weight("b", 3)
    q.set_weight("b", 1)  # back to the default: no entry left
    order = []
    for _ in range(9):
        [m] = q.pop()
        order.append(m.key)
        q.ack(m)
    assert "".join(order) == "abc" * 3


# -- key_rate_limit --------------------------------------------------------------------


def _times(q: Any, seconds: float, count: int = 10) -> dict[str, list[float]]:
    """Each key's delivery times (client clock: when its pop returned) over ``seconds``
    of pops and acks."""
    out: dict[str, list[float]] = {}
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        got = q.pop(count, wait=0.2)
        now = time.monotonic()
        for m in got:
            out.setdefault(str(m.key), []).append(now)
        q.ack_many(got)
    return out


def test_a_key_is_delivered_at_most_once_a_gap_and_others_go_on(client: dynoq.Client) -> None:
    # (4, 1.0): one delivery of a key every 250 ms at most, whatever the pops ask for.
    q = client.queue(
        "limited", shards=2, ordered="key", key_concurrency=10, key_rate_limit=(4, 1.0)
    )
    q.push_many([dynoq.Message(i, key="hot") for i in range(20)])
    q.push_many([dynoq.Message(i, key=f"cold-{i}") for i in range(12)])
    first = q.pop(50)
    assert sorted(str(m.key) for m in first) == sorted(["hot", *(f"cold-{i}" for i in range(12))])
    q.ack_many(first)
    assert q.pop(50) == []  # the hot key rests; nothing else waits
    got = _times(q, 1.6)
    assert list(got) == ["hot"]
    hot = got["hot"]
    assert 5 <= len(hot) <= 8  # about one every 250 ms: not a stall either
    assert all(b - a >= 0.2 for a, b in itertools.pairwise(hot)), hot


def test_a_waiting_pop_wakes_when_a_keys_rest_ends(client: dynoq.Client) -> None:
    # Nothing publishes the end of a rest: the pop's hint (and an idle consumer's probe)
    # says when it comes, and the pop naps until then, not its whole wait.
    q = client.queue("napping", shards=1, ordered="key", key_rate_limit=(1, 0.5))
    q.push_many([dynoq.Message(i, key="k") for i in range(2)])
    [m] = q.pop()
    q.ack(m)
    start = time.monotonic()
    [again] = q.pop(wait=5)
    assert 0.3 <= time.monotonic() - start < 2.5
    assert again.payload == 1


@pytest.mark.sync_only
def test_an_idle_consumers_probe_sees_a_resting_key(client: dynoq.Client) -> None:
    q = client.queue("probed", shards=1, ordered="key", key_rate_limit=(1, 2.0))
    q.push_many([dynoq.Message(i, key="k") for i in range(2)])
    q.ack(q.pop()[0])
    assert q.pop() == []
    [[rank, hint]] = [q.backend.run(q.ops.probe([0]))]
    assert rank == 0 and 1000 <= hint <= 2000  # deliverable in that many ms
    q.backend.run(dynoq._core.calls.Cmd(("ZADD", q.ops.shard_keys[0].krest, 0, "k")))
    assert q.backend.run(q.ops.probe([0]))[0] == 1  # its rest over: a pop delivers it


def test_peek_shows_resting_keys_and_a_clear_keeps_the_limit(client: dynoq.Client) -> None:
    q = client.queue("kept", shards=1, ordered="key", key_rate_limit=(1, 30.0))
    q.push_many([dynoq.Message(i, key="k") for i in range(3)])
    q.ack(q.pop()[0])
    assert q.pop() == []
    assert [m.payload for m in q.peek()] == [1]  # rests, still shown
    q.clear()
    q.push("after", key="k")
    q.push("other", key="j")
    assert [m.payload for m in q.pop(10)] == ["other"]  # k's time is kept


def test_key_rate_limit_is_a_stored_setting_of_keyed_queues(client: dynoq.Client) -> None:
    q = client.queue("stored", ordered="key", key_rate_limit=[10, 2])
    assert q.settings.key_rate_limit == (10, 2.0)
    again = client.queue("stored")
    assert again.settings.key_rate_limit == (10, 2.0)
    assert client.queue("stored", key_rate_limit=(10, 2.0)).settings == q.settings
    with pytest.raises(dynoq.QueueConfigError, match="key_rate_limit"):
        client.queue("stored", key_rate_limit=(5, 2.0))
    with pytest.raises(dynoq.QueueConfigError, match='ordered="key"'):
        client.queue("plain", key_rate_limit=(5, 1.0))
    for bad in ((0, 1.0), (5, 0), (5, -1.0), (10**10, 1.0)):
        with pytest.raises(dynoq.QueueConfigError):
            client.queue("bad", ordered="key", key_rate_limit=bad)
    for wrong in (5, (5,), (5, 1.0, 2), "5/s", (5.0, 1.0), (5, "1")):
        with pytest.raises(dynoq.InvalidType):
            client.queue("bad", ordered="key", key_rate_limit=wrong)
    assert client.open_existing("bad") is None and client.open_existing("plain") is None


@pytest.mark.sync_only
def test_one_take_sends_a_bounded_number_of_keys_to_rest(client: dynoq.Client) -> None:
    # Every call stays short: 1,500 keys all served too recently, and a pop of 1,000
    # moves 1,000 of them to krest, says to look again at once, and the next the rest.
    q = client.queue("many", shards=1, ordered="key", key_rate_limit=(1, 60.0))
    keys = [f"k{i}" for i in range(1500)]
    q.push_many([dynoq.Message(0, key=k) for k in keys] + [dynoq.Message(1, key=k) for k in keys])
    got = q.pop(1000) + q.pop(1000)
    assert len(got) == 1500 and q.ack_many(got) == 1500
    shard = q.ops.shard_keys[0]
    reply = q.backend.run(q.ops.kind.pop_call(0, 1000, 0, 60_000, "n", "", 0, []))
    assert reply[:3] == [0, 0, 0]  # nothing, and no nap
    assert q.backend.run(dynoq._core.calls.Cmd(("ZCARD", shard.krest))) == 1000
    assert q.pop(1000) == []
    assert q.backend.run(dynoq._core.calls.Cmd(("ZCARD", shard.krest))) == 1500
