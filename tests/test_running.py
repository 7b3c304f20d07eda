"""Job control (DESIGN §3.9) on every backend and both clients: a queue's max_running,
the deliveries its consumers have in flight at once, all together (lua/slots-2.lua,
dynoq/_core/running.py)."""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import workers
from helpers import FAST, wait_for

import dynoq
from dynoq._core.running import SlotOps

FLAVORS = ("sync", "async")
ASYNC_BACKENDS = ("embedded",)  # the async twin shares the core: one server
KINDS = {
    "concurrent": {"shards": 4},
    "ordered": {"shards": 4, "ordered": True},
    "keyed": {"shards": 4, "ordered": "key"},
}


def _slots_held(client: dynoq.Client, queue: str) -> int:
    return int(client.redis.hget(f"{client.prefix}:slots:{{{queue}}}", "total") or 0)


@pytest.mark.parametrize("kind", list(KINDS))
def test_consumers_of_two_clients_run_at_most_max_running_calls(
    make_client: Callable[..., dynoq.Client], consumers: list[Any], kind: str
) -> None:
    a, b = make_client(), make_client()
    q = a.queue("capped", max_running=3, **KINDS[kind])
    q.push_many([dynoq.Message(i, key=f"k{i % 12}") for i in range(48)])
    lock = threading.Lock()
    running, peak, done = [0], [0], [0]

    def handle(m: dynoq.Message) -> None:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.02)
        with lock:
            running[0] -= 1
            done[0] += 1

    for c in (a, b):  # 8 workers in all
        consumers.append(c.consumer(c.queue("capped"), handle, concurrency=4, **FAST).start())
    wait_for(lambda: done[0] == 48, what="48 calls", timeout=30)
    # idle consumers hold no slot (an empty look gives back the spare ones; the watcher
    # waits on the wake channel, not in a pop holding slots)
    wait_for(lambda: _slots_held(a, "capped") == 0, what="the slots back", timeout=10)
    for c in consumers:
        c.stop()
    assert 2 <= peak[0] <= 3, peak


def test_a_holders_slots_go_back_when_its_lease_runs_out(
    client: dynoq.Client, consumers: list[Any]
) -> None:
    # A killed consumer renews nothing: its slots go back when their lease ends. Here
    # a holder that takes every slot and is never heard from again.
    q = client.queue("orphaned", shards=2, max_running=2)
    dead = SlotOps(q.ops.keys, 2, "killed:1", lease=0.5)
    assert q.backend.run(dead.change(5)) == 2  # all of them
    q.push_many(range(4))
    seen: list[Any] = []
    consumers.append(client.consumer(q, seen.append, concurrency=2, **FAST).start())
    time.sleep(0.3)
    assert seen == []  # no slot free yet
    wait_for(lambda: len(seen) == 4, what="the slots back, then the calls", timeout=10)


def test_a_stopped_consumer_gives_its_slots_back_and_a_pop_takes_none(
    client: dynoq.Client, consumers: list[Any]
) -> None:
    q = client.queue("given", shards=2, max_running=5)
    q.push_many(range(3))
    seen: list[Any] = []
    c = client.consumer(q, seen.append, concurrency=2, **FAST).start()
    consumers.append(c)
    wait_for(lambda: len(seen) == 3, what="3 calls")
    c.stop()
    assert _slots_held(client, "given") == 0
    q.push_many(range(9))
    assert len(q.pop(9)) == 9  # the cap is the consumers': a plain pop takes no slot


def test_max_running_is_a_stored_setting(client: dynoq.Client) -> None:
    q = client.queue("stored", max_running=50)
    assert q.settings.max_running == 50 and client.queue("stored").settings.max_running == 50
    with pytest.raises(dynoq.QueueConfigError, match="max_running"):
        client.queue("stored", max_running=10)
    for bad in (0, -1, 10**7):
        with pytest.raises(dynoq.QueueConfigError, match="max_running"):
            client.queue("bad", max_running=bad)
    for wrong in ("3", True, 2.5):
        with pytest.raises(dynoq.InvalidType, match="max_running"):
            client.queue("bad", max_running=wrong)
    assert client.open_existing("bad") is None


@pytest.mark.slow
@pytest.mark.sync_only
def test_max_running_holds_across_processes(real_client: dynoq.Client, real_url: str) -> None:
    q = real_client.queue("procs", shards=4, max_running=3)
    n = 60
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [
        ctx.Process(
            target=workers.capped_member, args=(real_url, real_client.prefix, "procs", n, out)
        )
        for _ in range(2)
    ]
    for p in procs:
        p.start()
    # both consuming before the first push: neither drains it alone while the other starts
    ready = f"{real_client.prefix}:ready"
    wait_for(lambda: int(real_client.redis.get(ready) or 0) == 2, what="both", timeout=60)
    q.push_many(range(n))
    made = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    peaks = [int(x) for x in real_client.redis.lrange(f"{real_client.prefix}:peaks", 0, -1)]
    assert sum(made) == n == len(peaks)
    assert max(peaks) <= 3, max(peaks)
    assert all(made)  # both processes ran calls (each holds two slots at most)
