"""Pure parts of the consumer, without a server: retry schedule, shard order, shard board."""

from __future__ import annotations

import threading

import pytest

from dynoq._core.consuming import CHANNEL_TICK, UpkeepClock, pop_order
from dynoq.consumer.board import InFlight, ShardBoard
from dynoq.errors import InvalidArgument, InvalidType
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
