"""Consumers in separate processes on a real server: ordered consumption across processes,
failover after SIGKILL, clean shutdown on SIGTERM."""

from __future__ import annotations

import collections
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import shard_keys, wait_for

import dynoq
from dynoq._core.sizing import BUDGET
from dynoq.consumer.group import members

HELPER = str(Path(__file__).with_name("consumer_helpers.py"))
FLAVORS = ("sync", "async")  # the test's own client, and its child processes
ASYNC_BACKENDS = ("embedded",)  # the slowest tests: async members on one server only


class Procs:
    def __init__(self, url: str, prefix: str, flavor: str) -> None:
        self.url, self.prefix = url, prefix
        self.flags = ["--async"] if flavor == "async" else []
        self.running: list[subprocess.Popen[str]] = []

    def start(self, queue: str, *args: str) -> subprocess.Popen[str]:
        p = subprocess.Popen(
            [sys.executable, HELPER, self.url, self.prefix, queue, *args, *self.flags],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.running.append(p)
        assert p.stdout is not None
        assert p.stdout.readline().strip() == "started"
        return p


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


def _log(client: dynoq.Client) -> list[tuple[str, int, int, int]]:
    out = []
    for raw in client.redis.lrange(f"{client.prefix}:log", 0, -1):
        who, k, i, shard = raw.decode().split("|")
        out.append((who, int(k), int(i), int(shard)))
    return out


def _push(q: dynoq.Queue, keys: int, per_key: int, first: int = 0) -> None:
    q.push_many(
        [
            dynoq.Message({"k": k, "i": i}, key=f"key-{k}")
            for i in range(first, first + per_key)
            for k in range(keys)
        ]
    )


def _by_key(log: list[tuple[str, int, int, int]]) -> dict[int, list[int]]:
    by_key: dict[int, list[int]] = collections.defaultdict(list)
    for _, k, i, _ in log:
        by_key[k].append(i)
    return by_key


def test_ordered_across_processes_while_members_join(
    real_client: dynoq.Client, procs: Procs
) -> None:
    client = real_client
    q = client.queue("xord", shards=8, ordered=True)
    keys, per_key = 40, 40
    half = per_key // 2
    _push(q, keys, half)
    lock = threading.Lock()

    def handler(msg: dynoq.Message) -> None:
        p = msg.payload
        with lock:
            client.redis.rpush(f"{client.prefix}:log", f"thread|{p['k']}|{p['i']}|{msg.shard}")
        time.sleep(0.01)

    c = client.consumer(
        q,
        handler,
        concurrency=2,
        lease_ttl=2.0,
        rebalance_interval=5.0,
        idle_wait=0.5,
        instance_id="thread",
    ).start()
    try:
        # Two processes join while the thread consumer is busy: shards move under load.
        wait_for(lambda: client.redis.llen(f"{client.prefix}:log") > 50)
        procs.start("xord", "--instance", "proc-a", "--sleep", "0.003")
        procs.start("xord", "--instance", "proc-b", "--sleep", "0.003")
        # Both have joined (they said "started"); the second half comes now, so each has
        # work however long a busy machine took to start them.
        _push(q, keys, per_key - half, first=half)
        wait_for(
            lambda: client.redis.llen(f"{client.prefix}:log") >= keys * per_key,
            timeout=60,
            what="every message handled",
        )
        wait_for(lambda: len(c.assignment) < 8, what="thread consumer gave shards away")
    finally:
        assert c.stop(10)
    log = _log(client)
    assert len(log) == keys * per_key  # no message handled twice
    for k, seq in _by_key(log).items():
        assert seq == list(range(per_key)), f"key {k} out of order"
    assert {who for who, *_ in log} >= {"proc-a", "proc-b"}
    # Each shard was handled by one member at a time: its log is runs of one member,
    # and a member never comes back to a shard after handing it over (no flapping).
    for s in range(8):
        runs = [
            who
            for j, (who, _, _, sh) in enumerate(log)
            if sh == s
            and (j == 0 or who != next((w for w, _, _, h in reversed(log[:j]) if h == s), None))
        ]
        assert len(runs) == len(set(runs)), f"shard {s} went back and forth: {runs}"


def test_failover_after_sigkill(real_client: dynoq.Client, procs: Procs) -> None:
    client = real_client
    q = client.queue("xfail", shards=4, ordered=True)
    keys, per_key = 12, 25
    _push(q, keys, per_key)
    victim = procs.start("xfail", "--instance", "a-victim", "--sleep", "0.02", "--lease-ttl", "1.5")
    lock = threading.Lock()

    def handler(msg: dynoq.Message) -> None:
        p = msg.payload
        with lock:
            client.redis.rpush(f"{client.prefix}:log", f"b|{p['k']}|{p['i']}|{msg.shard}")

    wait_for(lambda: client.redis.llen(f"{client.prefix}:log") > 10)
    c = client.consumer(
        q,
        handler,
        concurrency=2,
        lease_ttl=1.5,
        rebalance_interval=20.0,
        idle_wait=0.5,
        instance_id="b-survivor",
    ).start()
    try:
        wait_for(lambda: c.assignment == {2, 3}, what="b took its half")
        wait_for(lambda: any(who == "a-victim" for who, *_ in _log(client)[-3:]))
        victim.send_signal(signal.SIGKILL)  # mid-message: its handler sleeps 20 ms each
        killed = time.monotonic()
        wait_for(lambda: c.assignment == {0, 1, 2, 3}, timeout=15, what="failover")
        failover = time.monotonic() - killed
        wait_for(
            lambda: len({(k, i) for _, k, i, _ in _log(client)}) >= keys * per_key,
            timeout=30,
            what="everything handled",
        )
    finally:
        assert c.stop(10)
    assert failover < 1.5 + 0.5 + 2.0  # lease_ttl + a heartbeat tick + slack
    log = _log(client)
    for k, seq in _by_key(log).items():
        assert seq == sorted(seq), f"key {k} out of order: {seq}"
        assert sorted(set(seq)) == list(range(per_key))
    # At most the victim's in-flight messages twice: its 2 workers' batches, each of at
    # most 2 (batch_size "auto" at 20 ms a message: a 50 ms budget, _core/sizing.py).
    assert len(log) - keys * per_key <= 2 * int(BUDGET / 0.02)
    assert members(client.queue("xfail"), "default") == []


def test_run_stops_cleanly_on_sigterm(real_client: dynoq.Client, procs: Procs) -> None:
    client = real_client
    q = client.queue("xterm", shards=2, ordered=True)
    p = procs.start("xterm", "--instance", "solo")
    wait_for(lambda: members(client.queue("xterm"), "default") == ["solo"])
    wait_for(lambda: all(client.redis.exists(shard_keys(q, s).lease) for s in range(2)))
    _push(q, 4, 5)
    wait_for(lambda: client.redis.llen(f"{client.prefix}:log") >= 20)
    p.send_signal(signal.SIGTERM)
    assert p.wait(15) == 0
    assert members(client.queue("xterm"), "default") == []  # left the group
    assert not any(client.redis.exists(shard_keys(q, s).lease) for s in range(2))
    assert q.stats().unacked == 0
