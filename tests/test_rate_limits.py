"""Rate limits: a group's limit holds across processes (enforced in Redis), and a handler
saying "rate limited" gets its message back without using an attempt."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from helpers import wait_for

import dynoq
from benchmarks.bench_rate_limit import KINDS, busiest, by_key, limited_queue, span
from dynoq._core.rates import FRESH_FLOOR, Permits, RateLimit

FLAVORS = ("sync", "async")  # every test on the asyncio client too

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks" / "bench_rate_limit.py"


@pytest.mark.backends("embedded", "cluster")  # processes: the server matters little
@pytest.mark.slow
@pytest.mark.sync_only  # the members run both clients (kind)
@pytest.mark.parametrize("kind", KINDS)
def test_no_sliding_period_holds_more_than_count_plus_one_calls(
    real_client: dynoq.Client, real_url: str, kind: str
) -> None:
    # Two processes of four workers each, batch sizes "auto" (benchmarks/bench_rate_limit
    # measures the same). Before, permits were taken for the pop: calls fell long after
    # their grants (a blocking pop held its permits while it waited; a batch's last calls
    # ran after its first), and 23 to 30 calls of a limit of 20 fell in a sliding second.
    # Kind "keys": a queue's key_rate_limit, each key's calls (lua/lib/krate.lua): 5 a
    # second, each of the 7 keys holding 12 or 13 messages.
    client = real_client
    n, count, period = 90, 5 if kind == "keys" else 20, 1.0
    q = limited_queue(client, kind, count, period)
    payloads = (
        [{"task": "hit", "args": [i], "kwargs": {}} for i in range(n)]
        if kind == "tasks"
        else list(range(n))
    )
    q.push_many(
        [
            dynoq.Message(p, key=f"k{i % 7}" if kind in ("groups", "keys") else None)
            for i, p in enumerate(payloads)
        ]
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(BENCH),
                "--member",
                real_url,
                client.prefix,
                "limited",
                str(count),
                str(period),
                kind,
            ],
            env=env,
        )
        for _ in range(2)
    ]
    log = f"{client.prefix}:log"
    try:
        wait_for(lambda: client.redis.llen(log) >= n, timeout=60, what=f"{n} handled")
    finally:
        for p in procs:
            p.terminate()
            p.wait(15)
    logged = [t.decode() for t in client.redis.lrange(log, 0, -1)]
    assert len(logged) == n
    if kind == "keys":
        keys = by_key(logged)
        assert len(keys) == 7
        for times in keys.values():
            assert busiest(times, period) <= count + 1, busiest(times, period)
            assert span(times, count, period, spaced=True) <= 3  # a limit, not a stall
        return
    times = [float(t) for t in logged]
    assert busiest(times, period) <= count + 1, busiest(times, period)
    assert max(times) - min(times) <= (n / count) * period * 3  # a limit, not a stall


def test_rate_limited_handlers_use_no_attempt(client: dynoq.Client) -> None:
    q = client.queue("come-back", shards=1, max_retries=0)
    q.push("x")
    calls: list[int] = []
    done = threading.Event()

    def handle(msg: dynoq.Message) -> None:
        calls.append(msg.attempts)
        if len(calls) < 3:
            raise dynoq.RateLimited(0.05)  # the downstream said "slow down"
        done.set()

    c = client.consumer(q, handle, idle_wait=0.1, lease_ttl=2)
    with c:
        assert done.wait(10)
    assert calls == [1, 1, 1]  # never counted: max_retries=0 would have dead-lettered it
    s = c.stats()
    assert (s.handled, s.failed, s.dead_lettered) == (1, 0, 0)
    assert q.stats().dead == 0


def test_bad_rate_limits_are_refused(client: dynoq.Client) -> None:
    q = client.queue("bad-rate", shards=1)
    for bad in ((0, 1), (5, 0), (5,), "5/s", (5, float("inf"))):
        with pytest.raises((dynoq.InvalidArgument, dynoq.InvalidType)):
            client.consumer(q, lambda m: None, rate_limit=bad)  # type: ignore[arg-type]
    with pytest.raises(dynoq.InvalidArgument):
        dynoq.RateLimited(-1)


@pytest.mark.sync_only
def test_a_permit_is_used_only_while_fresh_and_asked_for_by_the_calls_it_serves(
    flavor: str,
) -> None:
    limit = RateLimit((20, 1.0))
    assert limit.fresh == pytest.approx(0.02) and limit.window == pytest.approx(1.02)
    assert limit.ask(50) == 1  # no call seen yet: one at a time
    limit.called(10, 0.01)  # 1 ms a call: the next 20 start while a permit is fresh
    assert limit.ask(50) == 20 and limit.ask(3) == 3
    limit.called(10, 0.02)  # 2 ms a call: 11
    assert limit.ask(50) == 11
    assert limit.ask(50, together=True) == 20  # one call of a batch: at most count
    limit.called(1, 0.5)  # a slow call: the estimate follows at once
    assert limit.ask(50) == 1
    held = Permits()
    held.got(3, since=100.0)
    assert held.use(2, 100.005, limit.fresh) == 2
    assert held.use(2, 100.03, limit.fresh) == 0 and held.held == 0  # stale: dropped
    held.got(3, since=200.0)  # its reply came back late: its first permit is used
    assert held.use(1, 200.05, limit.fresh) == 1 and held.use(1, 200.05, limit.fresh) == 0
    assert RateLimit((5, 0.01)).fresh == FRESH_FLOOR
