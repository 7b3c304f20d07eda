"""Prometheus metrics: depths read on scrape, counters, and the HTTP endpoint."""

from __future__ import annotations

import re
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import redis
from helpers import dead_letter, wait_for
from prometheus_client import CollectorRegistry
from test_sweeper import Proc, pop_all

import dynoq
from dynoq.metrics import Metrics, QueueCollector, start_metrics_server
from dynoq.sweeper import QueueSweep, SweepReport


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        body: bytes = r.read()
    return body.decode()


def test_collector_reads_depths_on_scrape(client: dynoq.Client) -> None:
    reg = CollectorRegistry()
    reg.register(QueueCollector(client))
    q = client.queue("depth", shards=2)
    q.push_many([dynoq.Message(i, id=f"r{i}") for i in range(5)])
    q.push("later", id="d", delay=3600)
    q.pop(visibility=60)
    dead = q.pop(visibility=60)[0]
    dead_letter(q, dead)

    def total(state: str) -> float:
        return sum(
            reg.get_sample_value(
                "dynoq_queue_messages", {"queue": "depth", "shard": str(s), "state": state}
            )
            or 0.0
            for s in range(2)
        )

    assert (total("ready"), total("delayed"), total("unacked"), total("dead")) == (3, 1, 1, 1)
    assert reg.get_sample_value("dynoq_redis_up") == 1
    age = reg.get_sample_value("dynoq_queue_oldest_waiting_seconds", {"queue": "depth"})
    assert age is not None and age >= 0
    q.push("more")  # read again on the next scrape, not cached
    assert total("ready") == 4
    assert reg.get_sample_value("dynoq_queue_paused", {"queue": "depth"}) == 0
    q.pause()
    assert reg.get_sample_value("dynoq_queue_paused", {"queue": "depth"}) == 1

    def ended(how: str) -> float | None:
        return reg.get_sample_value("dynoq_queue_ended_total", {"queue": "depth", "how": how})

    assert (ended("cancelled"), ended("expired")) == (0, 0)
    assert q.cancel("d")
    q.push("stale", expires=0.05)
    time.sleep(0.1)
    q.resume()
    q.requeue_expired()  # (the sweeper's pass) dead-letters what expired
    assert (ended("cancelled"), ended("expired")) == (1, 1)


def test_collector_reads_a_queue_created_anew_again(make_client: Any) -> None:
    client = make_client()
    reg = CollectorRegistry()
    reg.register(QueueCollector(client))
    client.queue("anew", shards=4).push("x")
    assert (
        reg.get_sample_value(
            "dynoq_queue_messages", {"queue": "anew", "shard": "3", "state": "ready"}
        )
        is not None
    )
    for key in list(client.redis.scan_iter(match=f"{client.prefix}:*")):
        client.redis.unlink(key)
    make_client().queue("anew", shards=2).push_many(["a", "b", "c"])
    reg.get_sample_value("dynoq_redis_up")  # the scrape that finds the old copy gone
    assert reg.get_sample_value("dynoq_redis_up") == 1.0
    ready = [
        reg.get_sample_value(
            "dynoq_queue_messages", {"queue": "anew", "shard": str(s), "state": "ready"}
        )
        for s in range(4)
    ]
    assert sum(r or 0 for r in ready[:2]) == 3 and ready[2:] == [None, None]


def test_collector_without_queues_and_unknown_names(client: dynoq.Client) -> None:
    reg = CollectorRegistry()
    reg.register(QueueCollector(client, queues=["ghost"]))
    assert reg.get_sample_value("dynoq_redis_up") == 1
    assert reg.get_sample_value("dynoq_queue_oldest_waiting_seconds", {"queue": "ghost"}) is None
    assert client.queue_names() == []  # scraping never creates a queue


def test_collector_reports_down_when_redis_is_unreachable() -> None:
    r = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5)
    reg = CollectorRegistry()
    reg.register(QueueCollector(dynoq.Client(r, prefix="dqt-down")))
    assert reg.get_sample_value("dynoq_redis_up") == 0
    r.close()


def test_counters_and_handler_histogram() -> None:
    reg = CollectorRegistry()
    m = Metrics(reg)
    m.record_sweep(
        SweepReport(
            queues={
                "a": QueueSweep(requeued=3, dead_lettered=1),
                "b": QueueSweep(promoted=2, trimmed=4, reaped=1),
            },
            passes=1,
        )
    )
    m.sweep_failed()
    assert reg.get_sample_value("dynoq_requeued_total", {"queue": "a"}) == 3
    assert reg.get_sample_value("dynoq_dead_lettered_total", {"queue": "a"}) == 1
    assert reg.get_sample_value("dynoq_promoted_total", {"queue": "b"}) == 2
    assert reg.get_sample_value("dynoq_dedupe_trimmed_total", {"queue": "b"}) == 4
    assert reg.get_sample_value("dynoq_reaped_members_total", {"queue": "b"}) == 1
    assert reg.get_sample_value("dynoq_sweeps_total", {"outcome": "ok"}) == 1
    assert reg.get_sample_value("dynoq_sweeps_total", {"outcome": "error"}) == 1
    with m.time_handler("a", "g"):
        pass
    with pytest.raises(RuntimeError), m.time_handler("a", "g"):
        raise RuntimeError("handler failed")
    m.observe_handler("a", "g", 0.2, ok=True)
    labels = {"queue": "a", "group": "g"}
    assert reg.get_sample_value("dynoq_handled_total", labels) == 2
    assert reg.get_sample_value("dynoq_failed_total", labels) == 1
    assert reg.get_sample_value("dynoq_handler_seconds_count", labels) == 3
    assert reg.get_sample_value("dynoq_handler_seconds_bucket", {**labels, "le": "0.25"}) == 3


def test_http_endpoint(client: dynoq.Client) -> None:
    reg = CollectorRegistry()
    m = Metrics(reg)
    q = client.queue("http", shards=1)
    q.push_many([1, 2, 3])
    server, thread = start_metrics_server(0, addr="127.0.0.1", registry=reg, client=client)
    try:
        m.observe_handler("http", "g", 0.01, ok=True)
        text = scrape(server.server_port)
        assert 'dynoq_queue_messages{queue="http",shard="0",state="ready"} 3.0' in text
        assert "dynoq_redis_up 1.0" in text
        assert 'dynoq_handled_total{group="g",queue="http"} 1.0' in text
        assert "dynoq_handler_seconds_bucket" in text
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.mark.slow
def test_sweeper_process_serves_metrics(
    real_client: dynoq.Client, real_url: str, prefix: str, tmp_path: Path
) -> None:
    q = real_client.queue("scraped", shards=2)
    q.push_many(list(range(7)))
    pop_all(q, 7, visibility=0.3)
    p = Proc(
        real_url, prefix, tmp_path / "sweeper.log", "--interval", "0.05", "--metrics-port", "0"
    )  # on loopback by default
    try:
        _check_scrapes(p)
    finally:
        if p.p.poll() is None:
            p.p.kill()
            p.p.wait(10)


def _check_scrapes(p: Proc) -> None:
    wait_for(lambda: "/metrics" in p.text(), what="the metrics endpoint to be logged", timeout=30)
    port = int(re.search(r"127\.0\.0\.1:(\d+)/metrics", p.text()).group(1))  # type: ignore[union-attr]

    def requeued() -> bool:
        return 'dynoq_requeued_total{queue="scraped"} 7.0' in scrape(port)

    wait_for(requeued, what="the requeue counter on the endpoint", timeout=30)
    text = scrape(port)
    ready = sum(
        float(v)
        for v in re.findall(
            r'dynoq_queue_messages\{queue="scraped",shard="\d",state="ready"\} ([\d.]+)', text
        )
    )
    assert ready == 7
    assert 'dynoq_sweeps_total{outcome="ok"}' in text
    assert p.stop() == 0


def test_transactions_prepared_decided_and_checks(client: dynoq.Client) -> None:
    reg = CollectorRegistry()
    reg.register(QueueCollector(client))
    m = Metrics(reg)
    q = client.queue("txm", shards=2)
    q.prepare("kept").commit()
    q.prepare("dropped").rollback()
    q.prepare("open", check_after=3600)
    q.prepare("asked", id="asked", check_after=0)

    def decided(outcome: str) -> float | None:
        return reg.get_sample_value(
            "dynoq_transactions_total", {"queue": "txm", "outcome": outcome}
        )

    assert (
        sum(
            reg.get_sample_value(
                "dynoq_queue_messages", {"queue": "txm", "shard": str(s), "state": "prepared"}
            )
            or 0.0
            for s in range(2)
        )
        == 2
    )
    assert (decided("committed"), decided("rolled_back")) == (1, 1)
    checker = client.checker(
        q,
        lambda msg: "maybe",
        check_interval=0.05,
        poll_interval=0.05,
        max_checks=2,
        observer=m.observe_check,
    )
    checker.start()
    try:
        wait_for(lambda: q.stats().dead == 1, what="buried after two checks", timeout=30)
    finally:
        checker.stop()
    labels = {"queue": "txm", "group": "producers"}
    assert (
        reg.get_sample_value("dynoq_transaction_checks_total", {**labels, "outcome": "invalid"})
        == 2
    )
    assert (
        reg.get_sample_value("dynoq_transaction_checks_total", {**labels, "outcome": "buried"}) == 1
    )
    assert decided("rolled_back") == 2


def test_a_queue_of_a_later_layout_is_named_and_the_others_still_read(client: dynoq.Client) -> None:
    from dynoq._core import layout
    from dynoq._core.keys import QueueKeys, TopicKeys

    reg = CollectorRegistry()
    reg.register(QueueCollector(client))
    client.queue("fine", shards=1).push("x")
    client.queue("later", shards=1).push("y")
    client.topic("news").subscribe("audit")
    client.redis.hset(QueueKeys(client.prefix, "later").meta, "layout", layout.LAYOUT + 1)
    client.redis.hset(TopicKeys(client.prefix, "news").meta, "layout", layout.LAYOUT + 1)
    assert reg.get_sample_value("dynoq_redis_up") == 1  # Redis is fine
    assert (
        reg.get_sample_value(
            "dynoq_queue_messages", {"queue": "fine", "shard": "0", "state": "ready"}
        )
        == 1
    )
    for name in ("later", "news"):
        assert reg.get_sample_value("dynoq_queue_unreadable", {"queue": name}) == 1
    assert reg.get_sample_value("dynoq_queue_unreadable", {"queue": "fine"}) is None


def test_flows_are_counted_by_outcome(client: dynoq.Client) -> None:
    reg = CollectorRegistry()
    reg.register(QueueCollector(client))
    tasks = dynoq.Tasks(client, queue="metered")

    @tasks.task(name="one")
    def one(x: int) -> int:
        return x

    @tasks.task(name="never", max_retries=0)
    def never(x: int) -> int:
        raise ValueError("never")

    def count(outcome: str) -> float | None:
        return reg.get_sample_value("dynoq_flows_total", {"outcome": outcome})

    assert [count(o) for o in ("started", "succeeded", "failed", "cancelled")] == [0, 0, 0, 0]
    ok = (one.s(1) | one.s()).delay()
    bad = tasks.chord([one.s(1), never.s(2)], one.s()).delay()
    stopped = (one.s(1) | one.s()).delay()
    assert stopped.cancel()
    with tasks.worker(idle_wait=0.05):
        assert ok.result(timeout=20) == 1
        with pytest.raises(dynoq.TaskFailed):
            bad.result(timeout=20)
    assert [count(o) for o in ("started", "succeeded", "failed", "cancelled")] == [3, 1, 1, 1]
