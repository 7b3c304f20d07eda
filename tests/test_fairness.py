"""Job control (DESIGN §3.9) on every backend and both clients: fairness weights between
the keys of a queue with ordered="key" (lua/lib/kweight.lua)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from helpers import FAST, wait_for

import dynoq
from dynoq._core.keyed import MAX_WEIGHTED

FLAVORS = ("sync", "async")
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
