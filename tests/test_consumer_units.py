"""Pure parts of the consumer, without a server: retry schedule, shard order, shard board."""

from __future__ import annotations

import threading
from typing import Any

import msgpack
import pytest

from dynoq._core.board import outcomes
from dynoq._core.calls import Batch, Call, Wake, together
from dynoq._core.consuming import (
    CHANNEL_TICK,
    LastLook,
    UpkeepClock,
    nap,
    pop_order,
)
from dynoq._core.group import LeaseBook
from dynoq._core.popping import Planner
from dynoq._core.queue import QueueOps
from dynoq._core.settings import QueueSettings
from dynoq.consumer.board import InFlight, ShardBoard
from dynoq.errors import InvalidArgument, InvalidType
from dynoq.message import Message
from dynoq.retry import (
    CONCURRENT_RETRY_DELAYS,
    ORDERED_RETRY_DELAYS,
    DeadLetter,
    Retry,
    RetryPolicy,
)


def test_default_retry_schedules_follow_rocketmq() -> None:
    p = RetryPolicy.make(None, ordered=False)
    assert p.delays == CONCURRENT_RETRY_DELAYS
    assert [p.delay(n) for n in (1, 2, 3, 16, 17, 99)] == [10, 30, 60, 7200, 7200, 7200]
    assert len(CONCURRENT_RETRY_DELAYS) == 16  # one per retry of the default max_retries
    assert RetryPolicy.make(None, ordered=True).delays == ORDERED_RETRY_DELAYS == (1.0,)
    assert RetryPolicy.make([0.5, 2], ordered=True).delay(5) == 2.0


def test_retry_requests() -> None:
    assert Retry().delay is None and Retry(3).delay == 3.0
    assert "poison" in str(DeadLetter("poison"))
    with pytest.raises(InvalidArgument):
        Retry(float("nan"))
    with pytest.raises(InvalidType):
        RetryPolicy.make([1, "2"], ordered=False)  # type: ignore[list-item]


def test_pop_order_prefers_own_shards_and_rotates() -> None:
    assert pop_order([2, 3], 6, 0) == [2, 3, 0, 1, 4, 5]
    assert pop_order([2, 3], 6, 1) == [3, 2, 1, 4, 5, 0]
    assert pop_order([], 3, 2) == [2, 0, 1]
    firsts = {pop_order([1, 4], 6, t)[0] for t in range(4)}
    assert firsts == {1, 4}


def test_board_claims_one_shard_per_worker_and_waits_on_empty_ones() -> None:
    b = ShardBoard()
    for s in (0, 1, 2):
        b.add(s)
    got = [b.claim(0.01) for _ in range(3)]
    assert sorted(s for shards, waiting in got for s in shards) == [0, 1, 2]
    assert all(not waiting for _, waiting in got)
    assert b.claim(0.01) == ([], False)  # all busy
    for s in (0, 1, 2):
        assert not b.done(s, found=False)
    shards, waiting = b.claim(0.01)  # every free shard is empty: claim them all, wait
    assert sorted(shards) == [0, 1, 2] and waiting
    for s in shards:
        b.done(s, found=None)
    assert b.claim(0.01)[1] is False


def test_board_lets_one_worker_wait_at_a_time() -> None:
    b = ShardBoard()
    for s in (0, 1, 2, 3):
        b.add(s)
    for _ in range(4):  # four workers look at one shard each; three are found empty
        b.claim(0.01)
    assert b.done_all([0, 1, 2], found=False) == []
    shards, waiting = b.claim(0.01)  # no free shard is ready: one worker waits for them
    assert sorted(shards) == [0, 1, 2] and waiting
    b.done(3, found=False)
    assert b.claim(0.01) == ([], False)  # shard 3 is not split off for a second waiter
    b.done_all(shards, found=False)  # the waiter hands back (woken, or its time is up)
    shards, waiting = b.claim(0.01)
    assert sorted(shards) == [0, 1, 2, 3] and waiting  # now one worker waits for all


def test_board_releases_a_moved_shard_after_its_worker() -> None:
    b = ShardBoard()
    b.add(0)
    b.add(1)
    assert b.rebalance({0}) == [1]  # 1 moved away while idle: release at once
    [s], _ = b.claim(0.01)
    assert s == 0
    assert b.rebalance(set()) == []  # 0 moved away while busy: later
    assert b.leased() == {0}  # still leased until its worker is done
    assert b.done(0, found=True) is True
    assert b.leased() == set()


def test_inflight_permits_block_and_resume() -> None:
    f = InFlight(3)
    assert f.take(2, 0.01) == 2 and f.take(5, 0.01) == 1 and f.take(1, 0.01) == 0
    t = threading.Timer(0.05, f.give, args=(2,))
    t.start()
    assert f.take(4, 5.0) == 2
    t.join()


def test_upkeep_clock_beats_rebalances_and_recovers() -> None:
    clock = UpkeepClock(beat_every=1.0, rebalance_every=10.0, now=100.0)
    assert clock.due(100.5, notified=False) == (False, False)
    assert clock.due(100.5, notified=True) == (False, True)  # the group changed: now
    assert clock.due(101.0, notified=False) == (True, False)
    clock.ran(101.0, rebalanced=False)
    assert clock.due(101.5, False) == (False, False) and clock.next_rebalance == 110.0
    clock.ran(102.0, rebalanced=True)  # a rebalance (asked or found) restarts its period
    assert (clock.next_beat, clock.next_rebalance) == (103.0, 112.0)
    clock.failed(102.5)  # after a failure, beat as soon as the backoff ends
    assert clock.due(102.5, False) == (True, False)
    assert clock.wait(102.0, other=200.0) == CHANNEL_TICK  # never longer than a tick
    assert clock.wait(102.4, other=102.45) == pytest.approx(0.05)
    assert clock.wait(105.0, other=200.0) == 0.0


# -- a concurrent consumer's look: every shard in two round trips -------------------------


def _ops(shards: int, *, cross_slot: bool = True) -> QueueOps:
    return QueueOps("t", "q", QueueSettings(shards=shards), cross_slot=cross_slot)


def fetch(ops: QueueOps, count: int, shards: list[int], **options: Any) -> Any:
    """A concurrent consumer's look (its queue's pop planner in fetch mode)."""
    return Planner(ops).fetch(count, shards, **options)


def _popped(shard: int, n: int) -> list[Any]:
    """A pop script's reply with ``n`` messages of ``shard`` (first deliveries of a
    concurrent queue: their token is the batch's unack score, lua/pop-13.lua)."""
    reply: list[Any] = [1, -1, b"1764100000123.5"]
    for i in range(n):
        reply += [f"m{shard}-{i}".encode(), b"0,0,0," + msgpack.packb(["x"]), 1]
    return reply


def test_together_sends_the_calls_of_each_round_in_one_batch() -> None:
    ops = _ops(3)

    def two_pops(shard: int) -> Any:
        a = yield ops.probe([shard])
        b = yield ops.probe([shard])
        return (shard, a, b)

    flow = together([two_pops(0), two_pops(1), two_pops(2)])
    first = next(flow)
    assert isinstance(first, Batch) and len(first.calls) == 3
    second = flow.send(["a0", "a1", "a2"])
    assert isinstance(second, Batch) and len(second.calls) == 3
    with pytest.raises(StopIteration) as stop:
        flow.send(["b0", "b1", "b2"])
    assert stop.value.value == [(0, "a0", "b0"), (1, "a1", "b1"), (2, "a2", "b2")]


def test_fetch_looks_at_sixteen_shards_in_two_round_trips() -> None:
    # The regression it guards: a consumer popping 16 shards one round trip after another
    # held what it found on the first ones for the whole pass (due -> handler p99 of
    # 36 ms at 10,000 messages/s, benchmarks/bench_delay.py).
    ops = _ops(16)
    order = list(range(16))
    flow = fetch(ops, 100, order, visibility=30.0, consumer="c")
    probe = next(flow)
    assert isinstance(probe, Call) and probe.script.name == "probe"
    flags = [1 if s % 2 == 0 else 0 for s in order]  # 8 shards have something
    pops = flow.send([*flags, -1])
    assert isinstance(pops, Batch)  # one round trip for all eight
    assert [c.script.name for c in pops.calls] == ["pop"] * 8
    counts = [int(c.args[1]) for c in pops.calls]
    assert sum(counts) == 100 and max(counts) - min(counts) <= 1
    with pytest.raises(StopIteration) as stop:
        flow.send([_popped(s, 2) for s in order if s % 2 == 0])
    msgs, hint = stop.value.value
    assert len(msgs) == 16 and hint is None
    assert {m.shard for m in msgs} == {0, 2, 4, 6, 8, 10, 12, 14}


def test_fetch_with_nothing_due_reports_when_something_will_be() -> None:
    flow = fetch(_ops(16), 10, list(range(16)), visibility=30.0, consumer="c")
    next(flow)
    with pytest.raises(StopIteration) as stop:
        flow.send([0] * 16 + [250])  # nothing deliverable; something due in 250 ms
    assert stop.value.value == ([], 250.0)


def test_fetch_shares_a_small_count_between_the_first_shards() -> None:
    flow = fetch(_ops(16), 3, list(range(16)), visibility=30.0, consumer="c")
    next(flow)
    pops = flow.send([1] * 16 + [-1])
    assert isinstance(pops, Batch) and [int(c.args[1]) for c in pops.calls] == [1, 1, 1]


def test_fetch_after_a_full_batch_asks_the_first_shard_for_all() -> None:
    # A deep queue: the first shard's pop fills the batch in one round trip.
    flow = fetch(_ops(16), 100, list(range(16)), visibility=30.0, consumer="c", backlog=True)
    first = next(flow)
    assert isinstance(first, Call) and first.script.name == "pop"
    assert int(first.args[1]) == 100
    with pytest.raises(StopIteration) as stop:
        flow.send(_popped(0, 100))
    msgs, hint = stop.value.value
    assert len(msgs) == 100 and hint is None


def test_fetch_after_a_full_batch_of_a_shallow_queue_takes_three_round_trips() -> None:
    # The regression it guards: after a pause of the process every shard was a few
    # messages behind, and a backlog look walked 16 shards one round trip each (40-75 ms
    # at 10,000 messages/s, benchmarks/bench_delay.py).
    flow = fetch(_ops(16), 100, list(range(16)), visibility=30.0, consumer="c", backlog=True)
    next(flow)
    probe = flow.send(_popped(0, 10))
    assert isinstance(probe, Call) and probe.script.name == "probe"
    assert len(probe.keys) == 15 * 6  # the other shards
    flags = [1 if s % 3 == 0 else 0 for s in range(1, 16)]  # shards 3, 6, 9, 12, 15
    pops = flow.send([*flags, -1])
    assert isinstance(pops, Batch) and [c.script.name for c in pops.calls] == ["pop"] * 5
    assert sum(int(c.args[1]) for c in pops.calls) == 90
    with pytest.raises(StopIteration) as stop:
        flow.send([_popped(s, 6) for s in (3, 6, 9, 12, 15)])
    msgs, hint = stop.value.value
    assert len(msgs) == 40 and hint is None
    assert [m.shard for m in msgs][:10] == [0] * 10  # the first shard's first


def test_fetch_after_a_full_batch_with_nothing_else_due() -> None:
    flow = fetch(_ops(4), 100, [2, 3, 0, 1], visibility=30.0, consumer="c", backlog=True)
    next(flow)
    flow.send(_popped(2, 7))
    with pytest.raises(StopIteration) as stop:
        flow.send([0, 0, 0, 40])
    msgs, hint = stop.value.value
    assert len(msgs) == 7 and hint is None
    flow = fetch(_ops(4), 100, [2, 3, 0, 1], visibility=30.0, consumer="c", backlog=True)
    next(flow)
    flow.send([0, 40, 0])  # pop: nothing
    with pytest.raises(StopIteration) as stop:
        flow.send([0, 0, 0, 40])  # probe: due in 40 ms
    assert stop.value.value == ([], 40.0)


def test_fetch_of_a_default_backlog_asks_the_first_shard_for_priority_0_alone() -> None:
    # Nothing beats priority 0: the first shard's pop needs no look at the others.
    flow = fetch(_ops(4), 100, [0, 1, 2, 3], visibility=30.0, consumer="c", backlog=True)
    first = next(flow)
    assert isinstance(first, Call) and first.script.name == "pop"
    assert len(first.keys) == 13 and first.args[-1] == 0  # its thirteen keys, ceiling 0


def test_fetch_after_priorities_bounds_the_first_pop_by_the_other_shards() -> None:
    # After a look that saw priorities above 0, a backlog's first pop names the other
    # shards (one server): it claims nothing they beat, and says what they hold.
    ops = _ops(4)
    planner = Planner(ops)
    planner.note({0: 6}, [])  # the last look saw priority 5
    assert planner.ranked
    flow = planner.fetch(100, [2, 3, 0, 1], visibility=30.0, consumer="c", backlog=True)
    first = next(flow)
    assert isinstance(first, Call) and first.script.name == "pop"
    assert len(first.keys) == 13 + 3 * 3 and first.args[-1] == 99
    assert first.keys[13:16] == [
        ops.shard_keys[3].ready,
        ops.shard_keys[3].delayed,
        ops.shard_keys[3].unack,
    ]
    # Shard 2 holds priority 5 (claimed nothing above what shard 0 may deliver: 1);
    # shards 3, 0, 1 may deliver 5, 1 and nothing.
    pop = flow.send([0, -1, 6, 6, 2, 0])
    assert isinstance(pop, Call) and pop.script.name == "pop"  # no probe
    assert pop.keys == ops.kind.pop_keys[0] and pop.args[-1] == 1  # the best shard alone
    with pytest.raises(StopIteration) as stop:
        flow.send(_popped(0, 3))
    assert len(stop.value.value[0]) == 3


def test_fetch_on_redis_cluster_is_pop() -> None:
    # No probe across hash slots there: one pop after another, as pop does.
    flow = fetch(_ops(4, cross_slot=False), 10, [0, 1, 2, 3], visibility=30.0, consumer="c")
    first = next(flow)
    assert isinstance(first, Call) and first.script.name == "pop"


def test_a_watcher_waits_until_the_due_time_not_the_whole_idle_wait() -> None:
    assert nap(None, 100.0, 5.0) == 5.0  # nothing waiting: until a wake-up or idle_wait
    assert nap(100.25, 100.0, 5.0) == pytest.approx(0.25)
    assert nap(130.0, 100.0, 5.0) == 5.0
    assert nap(99.0, 100.0, 5.0) == 0.0  # already due: look at once


def test_a_waiting_pop_sleeps_until_the_hint_then_looks_again() -> None:
    # One shard, nothing deliverable, something due in 250 ms: pop waits for a wake-up
    # that long (no margin: see consuming.nap), at most what is left of `wait`.
    flow = Planner(_ops(1)).pop(1, wait=5.0, shards=[0])
    assert isinstance(next(flow), Call)
    wake = flow.send([0, 250, 0])
    assert isinstance(wake, Wake) and wake.timeout == pytest.approx(0.25)
    again = flow.send(True)  # quiet: nothing published, but the hint said something falls due
    assert isinstance(again, Call) and again.script.name == "pop"
    wake = flow.send([0, -1, 0])  # nothing waiting at all: the rest of `wait`
    assert isinstance(wake, Wake) and 4.5 < wake.timeout <= 5.0


def test_last_look_remembers_a_backlog_and_the_due_time() -> None:
    last = LastLook()
    assert last.in_turn  # a look waits for the other workers' looks to end
    last.saw(100, 100, None, now=10.0)  # a full batch: a backlog, due time unknown
    assert last.full and last.due_at is None and last.nap(10.0, 5.0) == 5.0
    assert not last.in_turn  # a backlog's looks overlap
    last.saw(0, 100, 250.0, now=10.0)  # nothing yet: something falls due in 250 ms
    assert not last.full and last.in_turn and last.due_at == pytest.approx(10.25)
    assert last.nap(10.0, 5.0) == pytest.approx(0.25)
    last.saw(0, 100, -1.0, now=11.0)  # nothing is waiting at all
    assert last.due_at is None and last.nap(11.0, 5.0) == 5.0


def test_a_lease_of_another_tenure_has_no_time_left_for_a_batch() -> None:
    """LeaseBook.left with a batch's fence: a lease lost and taken again since (a later
    fence, the same holder) has nothing left for the earlier tenure's batch."""
    book = LeaseBook(ttl=10)
    book.taken(0, fence=2, sent_at=100.0)
    assert book.left(0, 101.0) == book.left(0, 101.0, fence=2) == 9.0
    book.forget(0)
    book.taken(0, fence=3, sent_at=102.0)
    assert book.left(0, 103.0, fence=2) == 0.0 and book.left(0, 103.0, fence=3) == 9.0


def test_a_renewal_speaks_only_for_the_tenure_it_was_sent_in() -> None:
    """LeaseBook.renewed: a reply extends or ends the tenures the renewal was sent for; a
    shard taken again (or forgotten) meanwhile keeps what it has."""
    book = LeaseBook(ttl=10)
    book.taken(0, fence=2, sent_at=100.0)
    book.taken(1, fence=5, sent_at=100.0)
    sent = book.tenures([0, 1, 7])
    assert sent == {0: 2, 1: 5, 7: None}  # 7: not held, so it can only be reported gone
    book.forget(1)
    book.taken(1, fence=6, sent_at=104.0)  # taken again while the renewal was out
    assert book.renewed(sent, lost={1, 7}, sent_at=105.0) == {7}
    assert book.left(0, 106.0, fence=2) == 9.0  # extended from when it was sent
    assert book.left(1, 106.0, fence=6) == 8.0  # the later tenure is untouched
    assert book.renewed(book.tenures([0]), lost={0}, sent_at=107.0) == {0}
    assert book.tenures([0]) == {0: None} and book.left(0, 107.0) == 0.0


def test_outcomes_split_into_acks_and_failures_in_order() -> None:
    a, b, c = (Message(i) for i in range(3))
    boom = ValueError("boom")
    assert outcomes([(a, None), (b, boom), (c, None)]) == ([a, c], [(b, boom)])
    assert outcomes([]) == ([], [])


def test_a_loss_in_an_earlier_tenure_leaves_the_newer_one() -> None:
    """LeaseBook.ended: a worker whose batch was of tenure 2 drops the shard only while 2
    (or nothing) is held; once the shard was taken again (3), that lease goes on."""
    book = LeaseBook(ttl=10)
    assert book.ended(0, None) and book.ended(0, 2)  # nothing held
    book.taken(0, fence=2, sent_at=100.0)
    assert book.ended(0, 2) and not book.ended(0, None)
    book.forget(0)
    book.taken(0, fence=3, sent_at=101.0)
    assert not book.ended(0, 2) and book.ended(0, 3)


@pytest.mark.parametrize("kind", ["threads", "tasks"])
def test_the_upkeep_stop_waits_up_to_its_timeout_in_seconds_in_both_flavors(kind: str) -> None:
    """Upkeep.stop(timeout) means seconds in both flavors (the thread one once took a
    monotonic deadline under the same name): a loop that ends within the timeout, but
    after the channel ticks the stop waits at least, has ended when stop returns."""
    import asyncio
    import time
    from types import SimpleNamespace

    import dynoq.asyncio.consumer.upkeep as aupkeep
    import dynoq.consumer.upkeep as supkeep

    slow = CHANNEL_TICK * 4 + 0.5  # longer than the least a stop waits
    ended = threading.Event()
    module = supkeep if kind == "threads" else aupkeep
    upkeep = module.Upkeep.__new__(module.Upkeep)
    upkeep.shared = SimpleNamespace(queue=SimpleNamespace(name="q"))

    def loop() -> None:
        time.sleep(slow)  # a tick under way (a slow heartbeat): the stop is seen after it
        ended.set()

    async def aloop() -> None:
        await asyncio.sleep(slow)
        ended.set()

    if kind == "threads":
        upkeep._stop = threading.Event()
        upkeep._loop = loop
        upkeep.start()
        upkeep.stop(slow + 5.0)
    else:

        async def main() -> None:
            upkeep._stop = asyncio.Event()
            upkeep._loop = aloop
            upkeep.start()
            await upkeep.stop(slow + 5.0)

        asyncio.run(main())
    assert ended.is_set()
