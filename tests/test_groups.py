"""Message groups (ordered="key", DESIGN §3.5): order per key, no head-of-line blocking,
any consumer takes any key, fair turns; on every backend and both flavors."""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import FAST, shard_keys, wait_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_consumer_procs import Procs

import dynoq
from dynoq import KeyState, Message
from dynoq._core import inspect, lua, reasons
from dynoq._core.calls import Cmd
from dynoq._core.keyed import parse_state
from dynoq.cli import EXIT_USAGE, cli

FLAVORS = ("sync", "async")
TESTS = Path(__file__).parent


def _log(client: dynoq.Client) -> list[tuple[str, int, int]]:
    out = []
    for raw in client.redis.lrange(f"{client.prefix}:log", 0, -1):
        who, k, i, _ = raw.decode().split("|")
        out.append((who, int(k), int(i)))
    return out


@pytest.fixture
def procs(real_client: dynoq.Client, real_url: str, flavor: str) -> Iterator[Procs]:
    ps = Procs(real_url, real_client.prefix, flavor)
    yield ps
    for p in ps.running:
        if p.poll() is None:
            p.kill()
        p.wait(10)
        if p.stdout:
            p.stdout.close()


# -- the queue's operations -------------------------------------------------------------


def test_a_key_is_delivered_in_push_order_one_at_a_time(client: dynoq.Client) -> None:
    q = client.queue("ev", shards=2, ordered="key")
    q.push_many([Message({"k": k, "i": i}, key=k) for i in range(3) for k in "abc"])
    assert q.stats().keys == 3 and q.size() == 9
    first = q.pop(count=10)
    # one head per key: the next of a key waits for the previous one's ack
    assert sorted((m.key, m.payload["i"], m.fence, m.attempts) for m in first) == [
        ("a", 0, 1, 1),
        ("b", 0, 1, 1),
        ("c", 0, 1, 1),
    ]
    assert q.pop(count=10) == []
    assert q.key_state("a") == KeyState(waiting=2, in_flight=1, attempts=1, fence=1)
    assert q.ack_many(first) == 3
    assert sorted((m.key, m.payload["i"]) for m in q.pop(count=10)) == [
        ("a", 1),
        ("b", 1),
        ("c", 1),
    ]
    assert q.key_state("nope") == KeyState(0, 0, 0, 0)


def test_a_retry_blocks_only_its_key_and_keeps_its_place(client: dynoq.Client) -> None:
    q = client.queue("ev", shards=1, ordered="key")
    q.push_many([Message(i, key=k) for i in range(3) for k in "ab"])
    a0, b0 = sorted(q.pop(count=10), key=lambda m: str(m.key))
    assert q.nack(a0, delay=0.3)
    assert q.key_state("a").in_flight == 1  # the waiting retry holds its key
    assert q.ack(b0)
    [b1] = q.pop(count=10)  # a is blocked, b flows
    assert (b1.key, b1.payload) == ("b", 1)
    got: list[Message] = []
    wait_for(lambda: got.extend(q.pop(count=10)) or got, what="a's head again")
    [again] = got
    assert (again.key, again.payload, again.attempts, again.fence) == ("a", 0, 2, 1)
    assert again.id == a0.id


def test_a_first_delivery_of_a_key_keeps_no_state_and_counts_when_it_fails(
    client: dynoq.Client,
) -> None:
    """A keyed first delivery writes no delivery state, as a concurrent queue's (its token
    is its unack score: lua/lib/ktake.lua); a retry, a give-back and an expiry then count
    it, and no token of an earlier delivery of the id acks a later one."""
    q = client.queue("kstateless", shards=1, ordered="key", max_retries=5)
    dlv = shard_keys(q, 0).dlv

    def state(msg_id: str) -> Any:
        return q.backend.run(Cmd(("HGET", dlv, msg_id)))

    q.push_many([Message(i, id=f"m{i}", key=f"k{i}") for i in range(4)])
    got = sorted(q.pop(count=10, visibility=30), key=lambda m: str(m.id))
    assert [(m.id, m.attempts) for m in got] == [(f"m{i}", 1) for i in range(4)]
    assert all(state(f"m{i}") is None for i in range(4))
    assert q.key_state("k0") == KeyState(waiting=0, in_flight=1, attempts=1, fence=1)
    m0, m1, m2, m3 = got
    for forged in (m0.token[-2:], f"1|{m0.token}", f"{m0.token}|", "1.5"):  # type: ignore[index]
        assert q.ack(dataclasses.replace(m0, token=forged)) is False
    assert q.nack(m0)  # a retry: the next delivery is its second
    given = q.backend.run(q.ops.nack_call(m1, delay=0.0, mode="back"))  # unhandled
    assert tuple(given) == (1, 0)
    assert q.extend(m2, 0.05)  # its token, a score that moves, goes into a state
    assert q.ack(m3) and state("m3") is None
    time.sleep(0.1)
    again: list[Message] = []
    wait_for(lambda: again.extend(q.pop(count=10)) or len(again) >= 3, what="redeliveries")
    assert sorted((m.id, m.attempts) for m in again) == [("m0", 2), ("m1", 1), ("m2", 2)]
    assert state("m1") is None  # given back unhandled: a first delivery again
    for old in (m0, m1, m2):
        assert q.ack(old) is False  # stale
    assert q.ack_many(again) == 3 and q.stats().unacked == 0


def test_an_expired_delivery_comes_back_first_with_its_fence_raised(client: dynoq.Client) -> None:
    q = client.queue("ev", shards=1, ordered="key", unack_timeout=0.2)
    q.push_many([Message(i, key="a") for i in range(3)])
    [m] = q.pop()
    got: list[Message] = []
    wait_for(lambda: got.extend(q.pop(count=5)) or got, what="redelivery")
    [again] = got
    assert (again.id, again.payload, again.attempts, again.fence) == (m.id, 0, 2, 2)
    assert q.ack(m) is False  # the stale delivery
    assert q.ack(again) is True
    [nxt] = q.pop()
    assert (nxt.payload, nxt.fence) == (1, 2)  # the key's fence stays
    assert q.key_state("a").fence == 2


def test_key_concurrency_three(client: dynoq.Client) -> None:
    q = client.queue("ev", shards=1, ordered="key", key_concurrency=3)
    q.push_many([Message(i, key="a") for i in range(10)] + [Message(i, key="b") for i in range(2)])
    got = q.pop(count=50)
    assert sorted((m.key, m.payload) for m in got) == [
        ("a", 0),
        ("a", 1),
        ("a", 2),
        ("b", 0),
        ("b", 1),
    ]
    assert q.pop(count=50) == []
    assert q.key_state("a") == KeyState(waiting=7, in_flight=3, attempts=1, fence=1)
    assert q.ack(next(m for m in got if m.key == "a" and m.payload == 1))
    # the ack changed the in-flight count alone (kack's kfreed): the chain is whole
    assert q.key_state("a") == KeyState(waiting=7, in_flight=2, attempts=1, fence=1)
    assert [(m.key, m.payload) for m in q.pop(count=50)] == [("a", 3)]
    assert client.queue("ev").ops.settings.key_concurrency == 3


def test_ids_ensure_dedupe_remove_dead_letters_and_replay(client: dynoq.Client) -> None:
    q = client.queue("ev", shards=2, ordered="key", max_retries=0, dedupe_window=60.0)
    assert q.ensure("x", id="m1", key="a") is True
    assert q.ensure("x2", id="m1", key="a") is False
    q.push("y", id="m2", key="a")
    q.push("z", id="m3", key="a")
    assert q.get("m1").key == "a" and q.contains("m2")
    q.push("y2", id="m2", key="a")  # a replaced message goes last in its key
    assert q.remove("m3") is True and q.remove("m3") is False
    [m1] = q.pop()
    assert (m1.id, m1.payload) == ("m1", "x")
    q.nack(m1)  # max_retries=0: dead-lettered, and the key moves on
    [m2] = q.pop()
    assert (m2.id, m2.payload) == ("m2", "y2")
    assert [m.id for m in q.dead()] == ["m1"]
    assert q.ack(m2)
    assert q.ensure("again", id="m2", key="a") is False  # acked within the window
    assert q.replay_dead() == 1
    [back] = q.pop()
    assert (back.id, back.attempts) == ("m1", 1)
    q.ack(back)
    assert q.size() == 0 and q.stats().keys == 0
    q.push("p", key="b")
    q.clear()
    assert q.size() == 0 and q.stats().keys == 0 and q.pop() == []


def test_the_sweeper_gives_back_expired_deliveries(client: dynoq.Client) -> None:
    q = client.queue("ev", shards=2, ordered="key", unack_timeout=0.1)
    q.push_many([Message(i, key="a") for i in range(2)])
    [m] = q.pop()
    wait_for(lambda: q.requeue_expired() == 1, what="expired")
    assert q.key_state("a") == KeyState(waiting=2, in_flight=0, attempts=1, fence=2)
    report = client.sweeper().run_once()
    assert report is not None
    [again] = q.pop()
    assert again.id == m.id and again.fence == 2


# -- each key's chain of waiting messages (lua/lib/keyed.lua kwait) ------------------------


def _order(q: dynoq.Queue, key: str = "a") -> list[Any]:
    """Pop and ack everything of the queue, one message at a time: the payloads of
    ``key``'s messages in delivery order."""
    out: list[Any] = []
    for _ in range(100):
        got = q.pop(count=1)
        if not got:
            return out
        out += [m.payload for m in got if m.key == key]
        q.ack_many(got)
    raise AssertionError("the queue never drained")


def test_given_back_with_key_concurrency_three_keeps_push_order(client: dynoq.Client) -> None:
    q = client.queue("ev", shards=1, ordered="key", key_concurrency=3, max_retries=9)
    q.push_many([Message(i, key="a") for i in range(6)])
    m0, m1, m2 = q.pop(count=10)
    assert [m.payload for m in (m0, m1, m2)] == [0, 1, 2]
    for m in (m2, m0, m1):  # given back out of order: they go back in push order
        assert q.nack(m)
    again = q.pop(count=10)
    assert [(m.payload, m.attempts) for m in again] == [(0, 2), (1, 2), (2, 2)]
    assert q.key_state("a") == KeyState(waiting=3, in_flight=3, attempts=2, fence=1)
    assert q.ack_many(again) == 3
    assert _order(q) == [3, 4, 5]
    # one acked, the others back in either order, a later push behind them all
    q.push_many([Message(i, key="a") for i in range(6, 10)])
    m6, m7, m8 = q.pop(count=10)
    assert q.ack(m7)
    assert q.nack(m8) and q.nack(m6)
    q.push(10, key="a")
    assert [m.payload for m in q.pop(count=10)] == [6, 8, 9]
    assert q.pop(count=10) == []
    assert q.stats().shards[0].ready == 1 and q.stats().unacked == 3


def test_expired_deliveries_come_back_in_push_order_before_the_rest(client: dynoq.Client) -> None:
    q = client.queue(
        "ev", shards=1, ordered="key", key_concurrency=3, unack_timeout=0.2, max_retries=9
    )
    q.push_many([Message(i, key="a") for i in range(5)])
    first = q.pop(count=1)
    time.sleep(0.05)
    first += q.pop(count=2)  # expire later: given back after the first
    assert [m.payload for m in first] == [0, 1, 2]
    wait_for(
        lambda: q.requeue_expired() >= 0 and q.stats().unacked == 0, what="all three given back"
    )
    state = q.key_state("a")
    assert (state.waiting, state.in_flight, state.attempts) == (5, 0, 1)
    assert [m.payload for m in q.peek()] == [0]
    assert _order(q) == [0, 1, 2, 3, 4]


def test_removing_the_head_a_middle_or_the_tail_keeps_the_order(client: dynoq.Client) -> None:
    q = client.queue("ev", shards=1, ordered="key")
    q.push_many(
        [Message(i, id=f"a{i}", key="a") for i in range(6)]
        + [Message(i, id=f"b{i}", key="b") for i in range(2)]
    )
    assert q.remove("a2") and q.remove("a0") and q.remove("a5")
    assert q.size() == 5 and q.key_state("a").waiting == 3
    q.push(6, id="a6", key="a")
    q.push(33, id="a3", key="a")  # a replaced message goes last in its key
    assert q.remove("b1") and q.remove("b0")
    assert q.stats().keys == 1 and q.size() == 4
    assert [m.payload for m in q.peek()] == [1]
    assert _order(q) == [1, 4, 6, 33]
    assert q.size() == 0 and q.stats().keys == 0
    q.push(0, id="x", key="a")  # the only one: head and tail
    assert q.remove("x") and q.stats().keys == 0 and q.pop() == []
    q.push(1, id="y", key="a")
    assert _order(q) == [1]


def test_clear_and_replay_into_a_key(client: dynoq.Client) -> None:
    q = client.queue("ev", shards=1, ordered="key", max_retries=0)
    q.push_many([Message(i, key="a") for i in range(3)])
    q.clear()
    assert q.size() == 0 and q.stats().keys == 0 and q.pop() == []
    q.push_many([Message(i, key="a") for i in range(3)])
    [m0] = q.pop()
    q.nack(m0)  # dead-lettered: the key moves on
    q.push(3, key="a")
    [m1] = q.pop()
    assert m1.payload == 1
    assert q.replay_dead() == 1  # last in its key, behind 3
    q.push(4, key="a")
    q.ack(m1)
    assert _order(q) == [2, 3, 0, 4]


def test_a_chain_broken_by_hand_ends_and_the_key_moves_on(client: dynoq.Client) -> None:
    q = client.queue("ev", shards=1, ordered="key")
    q.push_many(
        [Message(i, id=f"a{i}", key="a") for i in range(5)]
        + [Message(i, id=f"b{i}", key="b") for i in range(3)]
    )
    k = q.ops.shard_keys[0]
    assert client.redis.hlen(k.kwait) == 8 and q.size() == 8
    client.redis.hdel(k.kwait, "a2")  # a link lost: the key's chain ends before it
    got = _order(q)
    assert got[:2] == [0, 1] and len(got) <= 5
    assert q.stats().keys == 0 or q.key_state("a").waiting == 0
    # a loop made by hand (b's tail links back to its head) ends too
    q.push_many([Message(i, id=f"c{i}", key="c") for i in range(3)])
    client.redis.hset(k.kwait, "c2", b"2|c1c0")
    assert _order(q, "c")[:3] == [0, 1, 2]
    assert q.pop(count=10) == []
    q.push(9, key="a")  # the keys work again
    q.push(9, key="c")
    assert sorted(m.key for m in q.pop(count=10)) == ["a", "c"]


# A push numbers its messages with kseqs (lib/knum.lua), which counts base 36 digits up in
# place: every seq must be kseq's of the same number (they are compared as strings when a
# given-back message goes back before the later ones of its key), across every carry.
_SEQS = lua.parse(
    "t-0.lua",
    """--[[ t: kseqs(first) against kseq, `count` numbers on
  uses: lib/knum.lua
  flags: no-writes
]]
local first, count = tonumber(ARGV[1]), tonumber(ARGV[2])
local nxt, out = kseqs(first), {}
for i = 0, count - 1 do
  local s = nxt()
  if s ~= kseq(first + i) then return {first + i, s, kseq(first + i)} end
  out[#out + 1] = s
end
return out
""",
)


@pytest.mark.sync_only
@pytest.mark.parametrize("first", [1, 30, 36 * 36 - 40, 36**3 - 3, 36**7 - 2])
def test_a_pushs_seqs_are_each_numbers_kseq_across_carries(
    client: dynoq.Client, first: int
) -> None:
    got = client.redis.eval(_SEQS.plain, 0, first, 50)
    assert len(got) == 50 and all(type(s) is bytes for s in got), got  # else: which differed
    assert got == sorted(got)  # as strings, in the numbers' order
    # kseq's form, read as codec reads base 36: a letter for the length, then the digits
    assert [(s[0] - 96, int(s[1:], 36)) for s in got] == [
        (len(s) - 1, n) for s, n in zip(got, range(first, first + 50), strict=True)
    ]


# A push of many messages places them in one step (lib/kplace.lua): the model is a
# list per key; a plain push of a stored id moves it last into its (new) key, ensure skips
# it.
_batches = st.lists(
    st.tuples(
        st.sampled_from(["push", "ensure"]),
        st.lists(
            st.tuples(st.sampled_from("uvwxyz"), st.sampled_from("abc")),
            min_size=1,
            max_size=6,
            unique_by=lambda item: item[0],
        ),
    ),
    min_size=1,
    max_size=5,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batches=_batches)
def test_pushes_of_many_keep_each_keys_order_as_a_model_does(
    client: dynoq.Client, batches: list[tuple[str, list[tuple[str, str]]]]
) -> None:
    q = client.queue(f"model-{os.urandom(4).hex()}", shards=1, ordered="key")
    model: dict[str, list[tuple[str, int]]] = {"a": [], "b": [], "c": []}
    where: dict[str, str] = {}
    for b, (mode, items) in enumerate(batches):
        msgs = [Message(b * 10 + i, id=msg_id, key=key) for i, (msg_id, key) in enumerate(items)]
        if mode == "ensure":
            q.ensure_many(msgs)
        else:
            q.push_many(msgs)
        for i, (msg_id, key) in enumerate(items):
            if mode == "ensure" and msg_id in where:
                continue
            if msg_id in where:
                old = model[where[msg_id]]
                old[:] = [m for m in old if m[0] != msg_id]
            model[key].append((msg_id, b * 10 + i))
            where[msg_id] = key
        k = q.ops.shard_keys[0]
        assert q.size() == len(where) == client.redis.hlen(k.kwait)
    got: dict[str, list[tuple[str, int]]] = {"a": [], "b": [], "c": []}
    while popped := q.pop(count=1):
        got[popped[0].key or ""].append((popped[0].id or "", popped[0].payload))
        q.ack_many(popped)
    assert got == model
    assert q.stats().keys == 0


def _turns_whole(client: dynoq.Client, q: dynoq.Queue, conc: int) -> None:
    """lib/keyed.lua's rule every script keeps, which a push relies on (it gives turns
    only to keys that had nothing waiting): a key that waits with a free slot has a turn,
    and a key that has a turn may deliver."""
    k = q.ops.shard_keys[0]
    states = {key.decode(): parse_state(raw) for key, raw in client.redis.hgetall(k.kstate).items()}
    turns = {key.decode() for key in client.redis.zrange(k.kturn, 0, -1)}
    may = {key for key, (f, w, _, _) in states.items() if w > 0 and f < conc}
    assert turns == may, (sorted(turns ^ may), states)


def test_every_step_keeps_the_turns_whole(client: dynoq.Client) -> None:
    """A random walk of pushes (to waiting, busy and new keys), pops, acks, nacks with
    and without a delay, removals and given-back expired deliveries, key_concurrency 2:
    after each step the keys with a turn are exactly those that may deliver."""
    rnd = random.Random(42)
    q = client.queue("turns", shards=1, ordered="key", key_concurrency=2, max_retries=50)
    held: list[Message] = []
    ids = 0
    for _ in range(150):
        step = rnd.choice(["push", "push", "pop", "ack", "nack", "later", "remove", "expire"])
        if step == "push":
            n = rnd.randint(1, 6)
            q.push_many(
                [Message(ids + i, id=f"m{ids + i}", key=f"k{rnd.randint(0, 4)}") for i in range(n)]
            )
            ids += n
        elif step == "pop":
            held += q.pop(count=rnd.randint(1, 4))
        elif held and step in ("ack", "nack", "later", "remove", "expire"):
            m = held.pop(rnd.randrange(len(held)))
            if step == "ack":
                q.ack(m)
            elif step == "nack":
                q.nack(m)
            elif step == "later":
                q.nack(m, delay=0.05)
            elif step == "remove":
                q.remove(m.id or "")
            else:  # its visibility ends now: the next pop gives it back
                q.extend(m, 0.001)
                time.sleep(0.01)
                held += q.pop(count=1)
        _turns_whole(client, q, 2)


def test_waiting_counts_per_shard(client: dynoq.Client) -> None:
    q = client.queue("ev", shards=2, ordered="key", key_concurrency=2)
    q.push_many([Message(i, key=f"k{i % 7}") for i in range(40)])
    st = q.stats()
    assert st.size == 40 and st.keys == 7
    assert sum(s.ready for s in st.shards) == 40
    got = q.pop(count=100)
    assert len(got) == 14
    st = q.stats()
    assert (st.size, st.unacked) == (26, 14)
    for s, keys in zip(st.shards, q.ops.shard_keys, strict=True):
        assert s.ready == client.redis.hlen(keys.kwait)
    q.ack_many(got)
    assert q.stats().size == 26


def test_bad_input_is_refused_typed(client: dynoq.Client) -> None:
    with pytest.raises(dynoq.QueueConfigError):
        client.queue("plain", key_concurrency=2)
    with pytest.raises(ValueError):
        client.queue("zero", ordered="key", key_concurrency=0)
    with pytest.raises(TypeError):
        client.queue("bogus", ordered="keys")
    with pytest.raises(TypeError):
        client.queue("bogus2", ordered="key", key_concurrency="2")
    q = client.queue("ev", ordered="key", key_concurrency=2)
    assert client.queue("ev").ops.settings.key_concurrency == 2  # a later open may omit it
    assert client.queue("ev", key_concurrency=2).ops.settings.keyed
    with pytest.raises(dynoq.QueueConfigError):
        client.queue("ev", key_concurrency=3)
    with pytest.raises(dynoq.QueueConfigError):
        client.queue("ev", ordered=True)
    for bad in (
        {"payload": 1},
        {"payload": 1, "key": "a", "delay": 5},
        {"payload": 1, "key": "a", "priority": 3},
    ):
        with pytest.raises(dynoq.OrderedQueueError):
            q.push(**bad)
    with pytest.raises(TypeError):
        q.push(1, key=["a"])
    with pytest.raises(ValueError):
        q.push(1, key="k" * 600)
    with pytest.raises(dynoq.OrderedQueueError):  # one bad item stores nothing
        q.push_many([Message(1, key="a"), Message(2)])
    assert q.size() == 0
    with pytest.raises(dynoq.OrderedQueueError):
        q.reschedule("x", delay=1)
    with pytest.raises(ValueError):
        client.queue("plain2").key_state("a")


# -- consumers ----------------------------------------------------------------------------


def test_a_poison_message_holds_back_only_its_key(
    client: dynoq.Client, consumers: list[Any]
) -> None:
    q = client.queue("ev", shards=2, ordered="key", max_retries=200)
    keys = [f"k{i}" for i in range(20)]
    q.push_many([Message({"k": k, "i": i}, key=k) for i in range(5) for k in keys])
    # k0's message 0 fails until released (retried in place, 0.1 s apart); k1's fails
    # twice, then gives up (dead-lettered): k1 moves on.
    poison = keys[0]
    release = threading.Event()
    seen: dict[str, list[int]] = collections.defaultdict(list)
    lock = threading.Lock()

    def handler(m: Message) -> None:
        k, i = m.payload["k"], m.payload["i"]
        if k == poison and i == 0 and not release.is_set():
            raise RuntimeError("poison")
        if k == "k1" and i == 0:
            if m.attempts < 3:
                raise RuntimeError("fails")
            raise dynoq.DeadLetter("gave up")
        with lock:
            seen[k].append(i)

    consumers.append(
        client.consumer(q, handler, concurrency=4, retry_delays=(0.1,), **FAST).start()
    )
    others = [k for k in keys if k not in (poison, "k1")]
    wait_for(lambda: all(len(seen[k]) == 5 for k in others), what="every other key")
    wait_for(lambda: seen["k1"] == [1, 2, 3, 4], what="k1 moved on past its dead letter")
    assert seen[poison] == []
    state = q.key_state(poison)
    assert (state.waiting, state.in_flight) == (4, 1) and state.attempts >= 1
    release.set()
    wait_for(lambda: len(seen[poison]) == 5, what="the poison key after its release")
    assert all(seen[k] == list(range(5)) for k in [*others, poison])
    [dead] = q.dead()
    assert dead.key == "k1" and dead.failure is not None
    assert dead.failure.error_type == "DeadLetter" and dead.attempts == 3


def test_a_slow_key_does_not_hold_the_others(client: dynoq.Client, consumers: list[Any]) -> None:
    q = client.queue("ev", shards=1, ordered="key")
    q.push_many(
        [
            Message({"k": k, "i": i}, key=k)
            for i in range(3)
            for k in ["slow", *(f"k{j}" for j in range(30))]
        ]
    )
    free = threading.Event()
    done: list[tuple[str, int]] = []

    def handler(m: Message) -> None:
        if m.key == "slow":
            free.wait(60)  # a long handler (30 s in the issue): released by the test
        done.append((m.key or "", m.payload["i"]))

    consumers.append(client.consumer(q, handler, concurrency=3, **FAST).start())
    wait_for(lambda: len(done) == 90, what="every other key (same shard) while slow runs")
    assert q.key_state("slow") == KeyState(waiting=2, in_flight=1, attempts=1, fence=1)
    free.set()
    wait_for(lambda: len(done) == 93, what="the slow key")
    assert [i for k, i in done if k == "slow"] == [0, 1, 2]


def test_fair_turns_small_keys_finish_before_the_big_one_has_300(
    client: dynoq.Client, consumers: list[Any]
) -> None:
    q = client.queue("ev", shards=4, ordered="key")
    q.push_many([Message(("big", i), key="big") for i in range(10_000)])
    small = [f"s{j}" for j in range(99)]
    q.push_many([Message((k, i), key=k) for i in range(100) for k in small])
    order: list[str] = []
    counts: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()

    def handler(m: Message) -> None:
        with lock:
            order.append(m.key or "")
            counts["small" if m.key != "big" else "big"] += 1

    consumers.append(client.consumer(q, handler, concurrency=4, batch_size=10, **FAST).start())
    wait_for(lambda: counts["small"] >= 9_900, timeout=120, what="the small keys")
    with lock:
        last_small = max(i for i, k in enumerate(order) if k != "big")
        assert counts["small"] == 9_900
        big_before = sum(1 for k in order[:last_small] if k == "big")
    assert big_before < 300


# -- across processes ---------------------------------------------------------------------


@pytest.mark.slow
def test_order_per_key_with_three_consumer_processes(
    real_client: dynoq.Client, procs: Procs
) -> None:
    client = real_client
    q = client.queue("xkeys", shards=4, ordered="key")
    keys, per_key = 10_000, 2
    for name in ("a", "b", "c"):  # all three running before the first push: with batches
        procs.start("xkeys", "--instance", name, "--concurrency", "4")  # one alone drains
    for i in range(per_key):
        q.push_many([Message({"k": k, "i": i}, key=f"key-{k}") for k in range(keys)])
    wait_for(
        lambda: client.redis.llen(f"{client.prefix}:log") >= keys * per_key,
        timeout=300,
        what="every message handled",
    )
    log = _log(client)
    assert len(log) == keys * per_key  # nothing handled twice
    by_key: dict[int, list[int]] = collections.defaultdict(list)
    for _, k, i in log:
        by_key[k].append(i)
    assert all(seq == list(range(per_key)) for seq in by_key.values())
    assert {who for who, _, _ in log} == {"a", "b", "c"}  # any consumer takes any key


def test_sigkill_mid_key_resumes_in_order_on_another_with_a_higher_fence(
    real_client: dynoq.Client, procs: Procs
) -> None:
    client = real_client
    q = client.queue("xkill", shards=2, ordered="key", unack_timeout=1.5)
    keys, per_key = 6, 20
    q.push_many(
        [Message({"k": k, "i": i}, key=f"key-{k}") for i in range(per_key) for k in range(keys)]
    )
    victim = procs.start("xkill", "--instance", "victim", "--sleep", "0.3", "--concurrency", "6")
    wait_for(lambda: client.redis.llen(f"{client.prefix}:log") >= 6, what="victim busy")
    victim.send_signal(signal.SIGKILL)  # mid-handler: each sleeps 0.3 s after logging
    victim.wait(10)
    fences: dict[int, int] = {}
    lock = threading.Lock()

    def handler(m: Message) -> None:
        p = m.payload
        with lock:
            client.redis.rpush(f"{client.prefix}:log", f"survivor|{p['k']}|{p['i']}|0")
            fences[p["k"]] = max(fences.get(p["k"], 0), m.fence or 0)

    c = client.consumer(q, handler, concurrency=2, **FAST).start()
    try:
        wait_for(
            lambda: len({(k, i) for _, k, i in _log(client)}) >= keys * per_key,
            timeout=60,
            what="everything handled",
        )
    finally:
        assert c.stop(10)
    log = _log(client)
    for k in range(keys):
        seq = [i for _, kk, i in log if kk == k]
        assert seq == sorted(seq) and sorted(set(seq)) == list(range(per_key)), seq
    # The victim's last message of a key, in flight when it died, came back to the
    # survivor after its visibility ran out: that key was taken over, its fence raised.
    twice = {k for k in range(keys) if len([i for _, kk, i in log if kk == k]) > per_key}
    assert twice and all(fences[k] >= 2 for k in twice)
    assert q.stats().keys == 0 and q.size() == 0


# -- the command line -----------------------------------------------------------------------


def test_oldest_waiting_is_the_oldest_head_of_the_keys_to_serve(
    url: str, prefix: str, client: dynoq.Client
) -> None:
    # Before, a keyed shard's oldest waiting was never computed: stats(), `dynoq stats`
    # and the dashboard showed none with 65 messages waiting 13 s.
    q = client.queue("aged", shards=1, ordered="key")
    assert q.stats().shards[0].oldest_ready_at is None
    hot = q.push_many([Message(i, id=f"hot{i}", key="hot") for i in range(3)])
    time.sleep(0.02)  # the server's clock counts ms
    q.push("late", id="cold", key="cold")
    q.ack(q.pop()[0])  # hot's first: hot takes its next turn behind cold
    assert [m.id for m in q.peek()] == ["cold", "hot1"]  # served next: the younger one
    enqueued = q.get(hot[1]).enqueued_at
    assert enqueued is not None and enqueued < q.get("cold").enqueued_at
    assert q.stats().shards[0].oldest_ready_at == enqueued
    result = CliRunner().invoke(cli, ["--url", url, "--prefix", prefix, "stats", "aged", "--json"])
    assert result.exit_code == 0, (result.output, result.exception)
    assert json.loads(result.output)["queues"][0]["oldest_waiting_age"] >= 0.02
    q.ack_many(q.pop(count=10))
    q.ack_many(q.pop(count=10))
    assert q.stats().shards[0].oldest_ready_at is None


def test_cli_keys_lists_the_busiest_and_the_blocked_keys(
    url: str, prefix: str, client: dynoq.Client
) -> None:
    q = client.queue("ev", shards=2, ordered="key")
    q.push_many(
        [Message(i, key="busy") for i in range(5)] + [Message(0, key="bad"), Message(1, key="bad")]
    )
    got = q.pop(count=10)
    bad = next(m for m in got if m.key == "bad")
    # A consumer's failed handler, as settle records it (the public nack gives no reason)
    q.backend.run(
        q.ops.nack_call(bad, delay=60, mode="retry", why=reasons.why(ValueError("boom"), "me"))
    )

    def run(*args: str) -> Any:
        result = CliRunner().invoke(cli, ["--url", url, "--prefix", prefix, "keys", *args])
        assert result.exit_code == 0, (result.output, result.exception)
        return result.output

    report = json.loads(run("ev", "--json", "--limit", "5"))
    assert report["busiest"][0] == {"key": "busy", "waiting": 4, "in_flight": 1}
    assert report["busiest"][1] == {"key": "bad", "waiting": 1, "in_flight": 1}
    [blocked] = report["blocked"]
    assert (blocked["key"], blocked["id"], blocked["attempts"]) == ("bad", bad.id, 1)
    assert blocked["reason"] == "ValueError: boom"
    table = run("ev")
    assert "busy" in table and "ValueError: boom" in table
    client.queue("plain")
    result = CliRunner().invoke(cli, ["--url", url, "--prefix", prefix, "keys", "plain"])
    assert result.exit_code == EXIT_USAGE and "ordered=" in result.output


def test_spark_writers_need_a_key_column_on_a_keyed_queue(client: dynoq.Client) -> None:
    from dynoq.spark.rows import RowSpec, to_messages
    from dynoq.spark.writer import check_spec

    q = client.queue("ev", ordered="key")
    with pytest.raises(ValueError, match="keyCol"):
        check_spec(q, RowSpec.of("id"), "queue 'ev'")
    with pytest.raises(dynoq.OrderedQueueError):
        check_spec(q, RowSpec.of("id", key_col="k", delay_col="d"), "queue 'ev'")
    spec = RowSpec.of("id", key_col="k")
    check_spec(q, spec, "queue 'ev'")
    made = to_messages(
        spec,
        [{"id": "a", "k": "x", "v": 1}, {"id": "b", "k": "x", "v": 2}],
        lambda: 0.0,
        ordered=True,
    )
    q.push_many([m for _, m in made.messages])
    assert [(m.id, m.key) for m in q.pop(count=5)] == [("a", "x")]


def test_a_call_past_consume_timeout_keeps_its_key_blocked_until_it_returns(
    client: dynoq.Client, consumers: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="dynoq")
    q = client.queue("ev", shards=1, ordered="key")
    q.push_many([Message(i, key="a") for i in range(2)] + [Message(0, key="b")])
    events: list[tuple[str, str, int, int]] = []
    lock = threading.Lock()

    def handler(m: Message) -> None:
        with lock:
            events.append(("start", m.key or "", m.payload, m.attempts))
        if m.key == "a" and m.payload == 0 and m.attempts == 1:
            threading.Event().wait(1.5)  # past consume_timeout: left running
        with lock:
            events.append(("end", m.key or "", m.payload, m.attempts))

    consumers.append(
        client.consumer(
            q, handler, concurrency=2, consume_timeout=0.3, retry_delays=(0.1,), **FAST
        ).start()
    )
    wait_for(
        lambda: any(e[:3] == ("end", "a", 1) for e in events), timeout=30, what="a's next message"
    )
    with lock:
        first_call_ended = events.index(("end", "a", 0, 1))
        # b flowed meanwhile; nothing more of a started until the call returned
        assert events.index(("end", "b", 0, 1)) < first_call_ended
        assert [e for e in events[:first_call_ended] if e[:2] == ("start", "a")] == [
            ("start", "a", 0, 1)
        ]
    # the log line says what happens: the key waits for the call, the message fails later
    [line] = [
        m for m in (r.getMessage() for r in caplog.records) if "ran past consume_timeout (" in m
    ]
    assert "its key stays blocked until it returns, then the message fails" in line
    assert "fails now" not in line and "shard" not in line and "'a'" not in line


# -- consumer groups, rate limits and the worker command on a keyed queue -----------------


def _free_leases(q: dynoq.Queue) -> bool:
    """No shard of ``q`` is leased (a keyed queue's consumers take none)."""
    leases = q.backend.run(inspect.leases(q.ops, list(range(q.settings.shards))))
    return all(lease.holder is None and lease.fence == 0 for lease in leases)


def test_a_consumer_group_with_a_rate_limit_keeps_order_per_key_and_takes_no_lease(
    client: dynoq.Client, consumers: list[Any]
) -> None:
    q = client.queue("ev", shards=2, ordered="key")
    keys, per_key = 6, 5
    q.push_many(
        [Message({"k": k, "i": i}, key=f"k{k}") for i in range(per_key) for k in range(keys)]
    )
    seen: list[tuple[int, int, float]] = []
    lock = threading.Lock()

    def handler(m: Message) -> None:
        with lock:
            seen.append((m.payload["k"], m.payload["i"], time.monotonic()))

    count, period = 10, 0.5  # 20 a second for the whole group
    t0 = time.monotonic()
    for name in ("a", "b"):
        consumers.append(
            client.consumer(
                q,
                handler,
                group="billing",
                instance_id=name,
                concurrency=2,
                rate_limit=(count, period),
                **FAST,
            ).start()
        )
    wait_for(lambda: len(seen) >= keys * per_key, timeout=60, what="every message handled")
    assert _free_leases(q)  # while both members run
    with lock:
        assert len(seen) == keys * per_key  # nothing handled twice
        by_key: dict[int, list[int]] = collections.defaultdict(list)
        for k, i, _ in seen:
            by_key[k].append(i)
        last = max(t for _, _, t in seen)
    assert all(by_key[k] == list(range(per_key)) for k in range(keys))
    # the group's limit holds: 30 messages at 10 a period need at least 2 more periods
    assert last - t0 >= (keys * per_key / count - 1) * period * 0.95, last - t0
    view = q.backend.drive(inspect.group(q.ops.keys, "billing"))
    assert view.consuming and {m.name for m in view.members} >= {"a", "b"}


def test_rate_limited_on_a_keyed_queue_uses_no_attempt_and_keeps_order(
    client: dynoq.Client, consumers: list[Any]
) -> None:
    q = client.queue("ev", shards=1, ordered="key", max_retries=0)
    q.push_many([Message(i, key="a") for i in range(3)])
    calls: list[tuple[int, int]] = []

    def handler(m: Message) -> None:
        calls.append((m.payload, m.attempts))
        if len(calls) < 3:
            raise dynoq.RateLimited(0.05)  # the downstream said "slow down"

    consumers.append(client.consumer(q, handler, **FAST).start())
    wait_for(lambda: len(calls) >= 5, what="every message handled")
    assert calls == [(0, 1), (0, 1), (0, 1), (1, 1), (2, 1)]  # never counted, in order
    assert q.stats().dead == 0 and _free_leases(q)


@pytest.mark.sync_only  # the command runs the sync consumer
def test_the_worker_command_on_a_keyed_queue(real_client: dynoq.Client, real_url: str) -> None:
    client = real_client
    q = client.queue("kw", shards=2, ordered="key")
    keys, per_key = 8, 6
    q.push_many([Message(f"{k}|{i}", key=f"k{k}") for i in range(per_key) for k in range(keys)])
    env = {
        **os.environ,
        "DYNOQ_URL": real_url,
        "TEST_LOG_URL": real_url,
        "TEST_LOG_KEY": f"{client.prefix}:log",
        "TEST_SLEEP": "0.02",
        "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)]),
    }
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dynoq",
            "--prefix",
            client.prefix,
            "worker",
            "worker_handlers:slow",
            "--queue",
            "kw",
            "--group",
            "kworkers",
            "--processes",
            "2",
            "--concurrency",
            "3",
            "--rate-limit",
            "100/1",
            "--stop-timeout",
            "5",
        ],
        cwd=TESTS,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        log = f"{client.prefix}:log"
        wait_for(
            lambda: client.redis.llen(log) >= keys * per_key,
            timeout=60,
            what="every message handled by the worker",
        )
        assert _free_leases(q)
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(30) == 0
        assert p.stderr is not None
        p.stderr.close()
    lines = [x.decode().split("|") for x in client.redis.lrange(log, 0, -1)]
    assert len(lines) == keys * per_key  # nothing handled twice
    by_key: dict[str, list[int]] = collections.defaultdict(list)
    for _, k, i in lines:
        by_key[k].append(int(i))
    assert all(by_key[str(k)] == list(range(per_key)) for k in range(keys))
    assert q.size() == 0 and q.stats().dead == 0
