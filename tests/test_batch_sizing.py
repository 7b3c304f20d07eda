"""batch_size="auto", the consumer's default: batches as big as the handler's speed allows,
one at a time for slow handlers, and a stalled call gives the messages behind it back."""

from __future__ import annotations

import threading
import time

import pytest
from helpers import FAST, wait_for

import dynoq
from dynoq._core.board import DeliveryState, InFlightBatch, begin
from dynoq._core.sizing import AUTO, AUTO_MAX, BUDGET, STALLED, BatchSizer
from dynoq.consumer import Consumer
from dynoq.errors import InvalidArgument, InvalidType

FLAVORS = ("sync", "async")


# -- the sizer (pure) ----------------------------------------------------------------------


def test_auto_starts_at_one_and_grows_to_its_cap_with_a_fast_handler() -> None:
    sizer = BatchSizer(AUTO, in_flight=400)
    sizes = []
    for _ in range(12):
        n = sizer.size()
        sizes.append(n)
        sizer.handled(n, n * 0.00001)  # 10 µs a message
    assert sizes[0] == 1
    assert sizes == sorted(sizes) and sizes[-1] == AUTO_MAX
    assert sizes.index(AUTO_MAX) <= 8  # a few batches, not hundreds


def test_auto_shrinks_at_once_when_the_handler_slows_down() -> None:
    sizer = BatchSizer(AUTO, in_flight=400)
    for _ in range(20):
        sizer.handled(sizer.size(), 0.0)
    assert sizer.size() == AUTO_MAX
    sizer.handled(1, BUDGET * 2)  # one call longer than a whole batch's budget
    assert sizer.size() == 1
    sizer.handled(4, BUDGET)  # a quarter of the budget a message: about 4 at a time
    assert 1 <= sizer.size() <= 4


def test_auto_is_capped_by_max_in_flight() -> None:
    small = BatchSizer(AUTO, in_flight=7)
    for _ in range(20):
        small.handled(small.size(), 0.0)
    assert small.size() == 7


def test_a_number_is_used_as_it_is() -> None:
    sizer = BatchSizer(25, in_flight=100)
    sizer.handled(25, 100.0)
    assert sizer.size() == 25 and not sizer.adapts


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("big", InvalidArgument),
        ("AUTO", InvalidArgument),
        (0, InvalidArgument),
        (1001, InvalidArgument),
        (2.5, InvalidType),
        (True, InvalidType),
        (None, InvalidType),
    ],
)
def test_bad_batch_sizes_are_refused(value: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        dynoq.ConsumerSettings(batch_size=value)  # type: ignore[arg-type]


def test_auto_is_the_default_and_takes_any_max_in_flight() -> None:
    assert dynoq.ConsumerSettings().batch_size == AUTO
    assert dynoq.ConsumerSettings(concurrency=3).in_flight_limit == 3 * AUTO_MAX
    assert dynoq.ConsumerSettings(max_in_flight=2).in_flight_limit == 2


def test_a_stalled_call_cuts_what_was_not_begun() -> None:
    state = DeliveryState()
    msgs = [dynoq.Message(i, id=f"m{i}") for i in range(5)]
    batch = InFlightBatch(msgs, None, 0.0, 5)
    state.start(1, batch)
    assert begin(batch, 10.0)
    batch.results.append((msgs[0], None))
    assert begin(batch, 10.5)  # the second call runs from 10.5
    assert state.stalled(10.5 + STALLED / 2, STALLED) == []
    # What it had not begun goes back; the first call's outcome is settled now.
    assert state.stalled(10.5 + STALLED, STALLED) == [(msgs[2:], [(msgs[0], None)])]
    assert batch.mine == msgs[:2] and not begin(batch, 12.0)
    batch.results.append((msgs[1], None))  # the stalled call returns
    assert batch.unsettled == [(msgs[1], None)]  # all its worker settles
    assert state.stalled(20.0, STALLED) == []  # once
    ordered = InFlightBatch(msgs, 3, 0.0, 0)  # an ordered shard's batch is never cut
    state.start(2, ordered)
    begin(ordered, 0.0)
    assert state.stalled(20.0, STALLED) == []


# -- consumers, on every backend and flavor --------------------------------------------------


def _pops(tokens: list[str]) -> int:
    # The first deliveries of one pop share their delivery token (their unack score,
    # lua/lib/delivery.lua): distinct tokens count the pops.
    return len(set(tokens))


def test_a_default_consumer_pops_batches_for_a_fast_handler(
    client: dynoq.Client, consumers: list[Consumer]
) -> None:
    q = client.queue("auto-fast", shards=1)
    tokens: list[str] = []
    q.push_many(list(range(1000)))
    c = client.consumer(q, lambda m: tokens.append(m.token or ""), concurrency=1, **FAST)
    consumers.append(c.start())
    wait_for(lambda: c.stats().handled >= 1000, what="1000 handled")
    assert len(tokens) == 1000 and _pops(tokens) <= 50


def test_a_default_consumer_takes_a_slow_handler_one_at_a_time(
    client: dynoq.Client, consumers: list[Consumer]
) -> None:
    q = client.queue("auto-slow", shards=1)
    tokens: list[str] = []

    def handle(m: dynoq.Message) -> None:
        time.sleep(BUDGET * 1.5)
        tokens.append(m.token or "")

    q.push_many(list(range(12)))
    c = client.consumer(q, handle, concurrency=1, **FAST)
    consumers.append(c.start())
    wait_for(lambda: c.stats().handled >= 12, what="12 handled")
    assert _pops(tokens) == 12


def test_messages_behind_a_stalled_call_go_to_other_workers(
    client: dynoq.Client, consumers: list[Consumer]
) -> None:
    q = client.queue("auto-stall", shards=1)
    release = threading.Event()
    lock = threading.Lock()
    seen: list[object] = []

    def handle(m: dynoq.Message) -> None:
        if m.payload == "stuck":
            release.wait(30)
        with lock:
            seen.append(m.payload)

    c = client.consumer(q, handle, concurrency=2, **FAST)
    consumers.append(c.start())
    q.push_many(list(range(1000)))  # the batches grow to their cap
    wait_for(lambda: len(seen) >= 1000, what="the warm-up handled")
    # One push: the next pop takes 1000..1009, then "stuck", then what follows it.
    q.push_many([*range(1000, 1010), "stuck", *range(1010, 1150)])
    try:
        # Without the hand-back, the 89 behind "stuck" in its batch would wait for it;
        # the 10 handled before it are settled at the cut, not when it returns.
        wait_for(
            lambda: len(seen) >= 1150,
            timeout=10 + STALLED,
            what="everything but the stalled call handled",
        )
        wait_for(
            lambda: q.stats().unacked == 1,
            timeout=10 + STALLED,
            what="only the stalled call's message in flight",
        )
    finally:
        release.set()
    wait_for(lambda: len(seen) >= 1151, what="the stalled call returned")
    assert c.stop(10)
    assert sorted(x for x in seen if x != "stuck") == list(range(1150))  # each once
    assert q.size() == 0 and q.stats().unacked == 0


def _in_key_order(seen: list[tuple[str, int]]) -> bool:
    last: dict[str, int] = {}
    for key, n in seen:
        if n != last.get(key, -1) + 1:
            return False
        last[key] = n
    return True


def test_a_default_consumer_pops_batches_on_a_keyed_queue(
    client: dynoq.Client, consumers: list[Consumer]
) -> None:
    # One message at a time a default consumer of a keyed queue made a round trip per
    # message (0.03x the unordered queue's rate); its pop takes the heads of many keys.
    q = client.queue("auto-keyed", shards=1, ordered="key")
    seen: list[tuple[str, int]] = []
    tokens: list[str] = []

    def handle(m: dynoq.Message) -> None:
        seen.append((str(m.key), m.payload))
        tokens.append(m.token or "")

    q.push_many([dynoq.Message(i, key=f"k{k}") for i in range(2) for k in range(500)])
    c = client.consumer(q, handle, concurrency=1, **FAST)
    consumers.append(c.start())
    wait_for(lambda: c.stats().handled >= 1000, what="1000 handled")
    assert len(seen) == 1000 and _in_key_order(seen)
    assert _pops(tokens) <= 100


def test_keys_behind_a_stalled_call_go_to_other_workers_in_their_order(
    client: dynoq.Client, consumers: list[Consumer]
) -> None:
    q = client.queue("auto-keyed-stall", shards=1, ordered="key")
    release = threading.Event()
    lock = threading.Lock()
    seen: list[tuple[str, int]] = []

    def handle(m: dynoq.Message) -> None:
        if m.key == "stuck" and m.payload == 0:
            release.wait(30)
        with lock:
            seen.append((str(m.key), m.payload))

    c = client.consumer(q, handle, concurrency=2, **FAST)
    consumers.append(c.start())
    q.push_many([dynoq.Message(0, key=f"warm{k}") for k in range(1000)])  # batches grow
    wait_for(lambda: len(seen) >= 1000, what="the warm-up handled")
    # One push: the next pop takes the heads of k0..k9, then "stuck", then other keys;
    # each key has two messages, so a head given back must still come before its second.
    keys = [*(f"k{k}" for k in range(10)), "stuck", *(f"k{k}" for k in range(10, 150))]
    q.push_many([dynoq.Message(i, key=key) for i in range(2) for key in keys])
    try:
        # Without the hand-back, the keys behind "stuck" in its batch would wait for it.
        wait_for(
            lambda: len(seen) >= 1000 + 2 * 150,
            timeout=10 + STALLED,
            what="every other key handled",
        )
        assert ("stuck", 1) not in seen  # its key waits for its head
    finally:
        release.set()
    wait_for(lambda: len(seen) >= 1000 + 2 * 151, what="the stalled key handled")
    assert c.stop(10)
    assert len(set(seen)) == len(seen) == 1302 and _in_key_order(seen)
    assert q.size() == 0 and q.stats().unacked == 0


def test_a_visibility_shorter_than_a_heartbeat_is_extended_in_time(
    client: dynoq.Client, consumers: list[Consumer]
) -> None:
    # Heartbeats every 10 s (lease_ttl 30), deliveries visible for 1 s, a 2.5 s call:
    # extended at half its visibility, it is never handed to the idle worker meanwhile.
    q = client.queue("short-vis", shards=1)
    calls: list[int] = []

    def handle(m: dynoq.Message) -> None:
        calls.append(m.attempts)
        time.sleep(2.5)

    q.push("slow")
    c = client.consumer(q, handle, concurrency=2, visibility=1.0, **{**FAST, "lease_ttl": 30.0})
    consumers.append(c.start())
    wait_for(lambda: c.stats().handled == 1, what="handled")
    time.sleep(0.5)
    assert calls == [1]
    assert q.stats().total("expired") == 0 and q.stats().unacked == 0
