"""Several processes and clients at once on a real server."""

from __future__ import annotations

import multiprocessing as mp
import threading
from collections import Counter
from collections.abc import Callable

import pytest
import workers

import dynoq


@pytest.mark.backends("embedded", "cluster")  # processes: the server matters little
def test_processes_push_pop_ack_exactly_once(real_client: dynoq.Client, real_url: str) -> None:
    real_client.queue("mp", shards=4, unack_timeout=120)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [
        ctx.Process(
            target=workers.produce_consume, args=(real_url, real_client.prefix, w, 5000, out)
        )
        for w in range(4)
    ]
    for p in procs:
        p.start()
    acked = [i for _ in procs for i in out.get(timeout=180)]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    counts = Counter(acked)
    assert len(counts) == 20_000 and max(counts.values()) == 1
    s = real_client.queue("mp").stats()
    assert (s.ready, s.delayed, s.unacked, s.dead) == (0, 0, 0, 0)


@pytest.mark.backends("embedded", "cluster")  # processes: the server matters little
def test_ensure_raced_from_8_processes(real_client: dynoq.Client, real_url: str) -> None:
    real_client.queue("race", shards=4)
    ids = [f"id-{i}" for i in range(300)]
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(8), ctx.Queue()
    procs = [
        ctx.Process(
            target=workers.race_ensure, args=(real_url, real_client.prefix, ids, barrier, out)
        )
        for _ in range(8)
    ]
    for p in procs:
        p.start()
    pushed = Counter(i for _ in procs for i in out.get(timeout=120))
    for p in procs:
        p.join(30)
    assert pushed == Counter(ids)  # every id pushed by exactly one of the 8 clients
    assert real_client.queue("race").size() == 300


def test_ensure_raced_from_8_clients_in_threads(make_client: Callable[..., dynoq.Client]) -> None:
    clients = [make_client() for _ in range(8)]
    clients[0].queue("race-t", shards=2)
    barrier = threading.Barrier(8)
    wins: list[str] = []
    lock = threading.Lock()

    def run(c: dynoq.Client) -> None:
        q = c.queue("race-t")
        barrier.wait()
        mine = [f"i{n}" for n in range(200) if q.ensure(n, id=f"i{n}")]
        with lock:
            wins.extend(mine)

    threads = [threading.Thread(target=run, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(wins) == sorted(f"i{n}" for n in range(200))


def test_threads_share_one_client(client: dynoq.Client) -> None:
    q = client.queue("threads", shards=4)
    q.push_many(range(2000))
    acked: list[int] = []
    lock = threading.Lock()

    def drain() -> None:
        while True:
            got = q.pop(20)
            if not got:
                return
            q.ack_many(got)
            with lock:
                acked.extend(m.payload for m in got)

    threads = [threading.Thread(target=drain) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(acked) == list(range(2000))
