"""Rate limits: a group's limit holds across processes (enforced in Redis), and a handler
saying "rate limited" gets its message back without using an attempt."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest
from helpers import wait_for

import dynoq

FLAVORS = ("sync", "async")  # every test on the asyncio client too

MEMBER = str(Path(__file__).with_name("rate_member.py"))


@pytest.mark.slow
def test_a_group_limit_holds_across_processes(real_client: dynoq.Client,
                                              real_url: str) -> None:
    client = real_client
    q = client.queue("limited", shards=4)
    q.push_many(range(60))
    count, period = 10, 0.5  # 20 per second for the whole group
    procs = [subprocess.Popen([sys.executable, MEMBER, real_url, client.prefix, "limited",
                               str(count), str(period)], stdout=subprocess.PIPE, text=True)
             for _ in range(3)]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "started"
        log = f"{client.prefix}:log"
        wait_for(lambda: client.redis.llen(log) >= 60, timeout=30, what="60 handled")
    finally:
        for p in procs:
            p.terminate()
            p.wait(15)
            if p.stdout:
                p.stdout.close()
    times = sorted(int(t) for t in client.redis.lrange(log, 0, -1))
    took = (times[-1] - times[0]) / 1000
    # Handlings are logged a little after their grants (more on a loaded machine), so
    # judge windows of two periods: at most two periods' worth, plus one of jitter.
    worst = max(sum(1 for u in times if t <= u < t + 2 * period * 1000) for t in times)
    assert worst <= 3 * count, worst
    assert took >= (len(times) / count - 1) * period * 0.95, took  # 60 need 5 more periods
    assert took <= (len(times) / count) * period * 3  # it is a limit, not a stall


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
