"""Recurring messages: exactly one occurrence per tick with several consumers and
sweepers, no drift, missed ticks skipped, unschedule, bad input."""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import os
import threading
import time
import zoneinfo
from collections import Counter

import msgpack
import pytest

import dynoq
from dynoq._core.schedules import Schedule

FLAVORS = ("sync", "async")  # every test on the asyncio client too

SOAK = float(os.environ.get("DYNOQ_SCHEDULE_SOAK", "3"))  # seconds; 60 for the long run


def test_ticks_come_from_the_definition() -> None:
    every = Schedule("s", 10.0, None, None, 0, None, None, None, anchor=1000.0)
    assert every.next_tick(1_000_000, 1_000_000) == 1_010_000
    assert every.next_tick(1_010_000, 1_010_005) == 1_020_000  # from the tick, not "now"
    assert every.next_tick(1_010_000, 1_095_000) == 1_100_000  # missed ticks are skipped
    # A tick a stall made late is still pushed (at once), not skipped; a second is the limit.
    assert every.next_tick(1_010_000, 1_020_900) == 1_020_000
    assert every.next_tick(1_010_000, 1_021_000) == 1_020_000
    assert every.next_tick(1_010_000, 1_021_001) == 1_030_000
    cron = Schedule("c", None, "*/5 * * * *", None, 0, None, None, None, anchor=0.0)
    t = 1_795_000_000_000  # ms
    nxt = cron.next_tick(t, t)
    assert nxt > t and (nxt // 1000) % 300 == 0 and nxt - t <= 300_000
    assert cron.next_tick(nxt, nxt + 300_400) == nxt + 300_000  # late, not skipped
    assert cron.next_tick(nxt, nxt + 302_000) == nxt + 600_000


BERLIN = zoneinfo.ZoneInfo("Europe/Berlin")


def _ticks(s: Schedule, start: dt.datetime, n: int) -> list[dt.datetime]:
    """The next n ticks of ``s`` from ``start``, each from the one before (as firing
    goes: the pop that delivers a tick asks for the next), in Berlin's wall time."""
    ms, out = round(start.timestamp() * 1000), []
    for _ in range(n):
        ms = s.next_tick(ms, ms)
        out.append(dt.datetime.fromtimestamp(ms / 1000, BERLIN))
    return out


def test_cron_in_a_time_zone_across_both_2026_dst_changes() -> None:
    # A fake clock: next_tick is given the time. Europe/Berlin springs forward on 29 March
    # 2026 (02:00 -> 03:00) and falls back on 25 October (03:00 -> 02:00).
    daily = Schedule("r", None, "30 2 * * *", None, 0, None, None, None, 0.0, "Europe/Berlin")
    spring = _ticks(daily, dt.datetime(2026, 3, 27, 12, tzinfo=BERLIN), 4)
    assert [t.strftime("%m-%d %H:%M %Z") for t in spring] == [
        "03-28 02:30 CET",
        "03-29 03:00 CEST",  # 02:30 never comes: it runs once, at the jump
        "03-30 02:30 CEST",
        "03-31 02:30 CEST",
    ]
    autumn = _ticks(daily, dt.datetime(2026, 10, 23, 12, tzinfo=BERLIN), 4)
    assert [t.strftime("%m-%d %H:%M %Z") for t in autumn] == [
        "10-24 02:30 CEST",
        "10-25 02:30 CEST",  # 02:30 comes twice: it runs once, the first time
        "10-26 02:30 CET",
        "10-27 02:30 CET",
    ]
    report = Schedule("m", None, "0 9 * * *", None, 0, None, None, None, 0.0, "Europe/Berlin")
    hours = {t.hour for t in _ticks(report, dt.datetime(2026, 3, 20, tzinfo=BERLIN), 230)}
    assert hours == {9}  # 09:00 Berlin time all year, whatever UTC says
    utc = Schedule("u", None, "30 2 * * *", None, 0, None, None, None, 0.0)
    assert {t.astimezone(dt.timezone.utc).hour for t in _ticks(utc, spring[0], 10)} == {2}


def test_a_schedule_keeps_its_time_zone(client: dynoq.Client) -> None:
    q = client.queue("zoned", shards=2)
    first = q.schedule("report", "r", cron="0 9 * * *", tz="Europe/Berlin")
    q.schedule("utc", "u", cron="0 9 * * *")
    zoned, utc = q.schedules()
    assert (zoned.tz, utc.tz) == ("Europe/Berlin", None)
    local = dt.datetime.fromtimestamp(first, BERLIN)
    assert (local.hour, local.minute) == (9, 0)
    for bad in ("Mars/Olympus", "../../etc/passwd", "", "x" * 100):
        with pytest.raises(dynoq.InvalidArgument):
            q.schedule("bad", 1, cron="0 9 * * *", tz=bad)
    with pytest.raises(dynoq.InvalidArgument, match="tz= goes with cron="):
        q.schedule("bad", 1, every=60, tz="Europe/Berlin")
    assert [s.id for s in q.schedules()] == ["report", "utc"]


@pytest.mark.sync_only
def test_a_definition_dynoq_did_not_write_fires_nothing_and_stops_no_pop(
    client: dynoq.Client, flavor: str, caplog: pytest.LogCaptureFixture
) -> None:
    q = client.queue("planted", shards=1)
    q.schedule("tick", "t", every=0.2)
    sched = q.ops.shard_keys[0].sched
    for spec in (
        [None, "0 9 * * *", 0, 0, None, None, "t", "Nope/Nope"],  # a zone that is none
        [None, "not cron", 0, 0, None, None, "t"],
        ["ten", None, 0, 0, None, None, "t"],
        [1, 2, 3],
    ):
        client.redis.hset(sched, "tick", msgpack.packb(spec))
        time.sleep(0.25)
        got = q.pop(1, wait=1)  # delivered: its next tick is not
        assert len(got) == 1 and got[0].payload == "t"
        q.ack(got[0])
        assert q.size() == 0
        q.schedule("tick", "t", every=0.2)  # a good definition again, for the next case
    assert "cannot be read" in caplog.text


@pytest.mark.slow
def test_one_occurrence_per_tick_with_three_consumers_and_two_sweepers(
    real_url: str, prefix: str, real_client: dynoq.Client
) -> None:
    clients = [dynoq.connect(real_url, prefix=prefix) for _ in range(5)]
    ticks: Counter[int] = Counter()
    lock = threading.Lock()

    def handle(msg: dynoq.Message) -> None:
        assert msg.headers is not None
        with lock:
            ticks[msg.headers["dynoq.tick"]] += 1

    q = real_client.queue("heartbeat", shards=4)
    every = 0.2
    consumers = [c.consumer("heartbeat", handle, idle_wait=0.1, lease_ttl=2) for c in clients[:3]]
    sweepers = [c.sweeper(interval=0.05) for c in clients[3:]]
    threads = [threading.Thread(target=s.run_forever) for s in sweepers]
    try:
        for c in consumers:
            c.start()
        for t in threads:
            t.start()
        first = q.schedule("beat", {"ping": True}, every=every)
        time.sleep(SOAK)
        assert q.unschedule("beat")
        time.sleep(0.3)
    finally:
        for s in sweepers:
            s.stop()
        for c in consumers:
            c.stop(10)
        for t in threads:
            t.join(10)
        for c in clients:
            c.close()
    assert all(n == 1 for n in ticks.values()), [t for t, n in ticks.items() if n > 1]
    got = sorted(ticks)
    assert got[0] == round(first * 1000)
    steps = {b - a for a, b in itertools.pairwise(got)}
    assert steps == {round(every * 1000)}, steps  # every tick, no gap, no drift
    assert len(got) >= SOAK / every * 0.8
    assert q.schedules() == []


def test_schedules_are_listed_replaced_and_stopped(client: dynoq.Client) -> None:
    q = client.queue("jobs", shards=3)
    q.schedule("nightly", {"job": "report"}, cron="0 3 * * *", priority=5)
    first = q.schedule("poll", "poll", every=3600)
    [nightly, poll] = q.schedules()
    assert (nightly.id, nightly.cron, nightly.priority) == ("nightly", "0 3 * * *", 5)
    assert poll.every == 3600 and poll.last_tick == pytest.approx(first)
    assert q.stats().delayed == 2  # each waits for its first tick
    q.schedule("poll", "poll-v2", every=7200)  # replaces: one waiting occurrence still
    assert q.stats().delayed == 2 and q.peek() == []
    assert q.unschedule("nightly") and not q.unschedule("nightly")
    assert [s.id for s in q.schedules()] == ["poll"] and q.stats().delayed == 1


def test_the_sweeper_keeps_the_chain_going_without_consumers(client: dynoq.Client) -> None:
    # The pop that delivers an occurrence pushes the next one; when nothing pops (or the
    # popping process died right after), the sweeper does, once the current tick came.
    q = client.queue("chain", shards=2)
    q.schedule("tick", "t", every=0.6)  # ticks far enough apart for a loaded machine
    sweeper = client.sweeper()
    assert sweeper.run_once().total().fired == 0  # the first tick has not come yet
    time.sleep(0.65)
    assert sweeper.run_once().total().fired == 1
    assert sweeper.run_once().total().fired == 0  # that tick's next is there already
    [due] = q.pop(10)
    assert due.id is not None and due.id.startswith("tick@")
    assert q.stats().delayed == 1


def test_bad_schedules_are_refused(client: dynoq.Client) -> None:
    q = client.queue("bad-sched", shards=2)
    ordered = client.queue("bad-sched-ordered", shards=2, ordered=True)
    for call in (
        lambda: q.schedule("x", 1),
        lambda: q.schedule("x", 1, every=1, cron="* * * * *"),
        lambda: q.schedule("x", 1, every=0),
        lambda: q.schedule("x", 1, cron="nope"),
        lambda: q.schedule("a@b", 1, every=1),
        lambda: q.schedule("", 1, every=1),
        lambda: q.schedule("x", 1, every=1, priority=100),
        lambda: ordered.schedule("x", 1, every=1, priority=3),
    ):
        with pytest.raises(dynoq.InvalidArgument):
            call()
    with pytest.raises(dynoq.PayloadTypeError):
        q.schedule("x", {1, 2}, every=1)
    assert q.schedules() == [] and q.size() == 0


def _occurrence(q: dynoq.Queue, wait: float = 3.0) -> dynoq.Message | None:
    got = q.pop(1, wait=wait)
    return got[0] if got else None


def test_overlap_skip_skips_an_occurrence_while_the_last_one_runs(
    client: dynoq.Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "dynoq.schedules")
    q = client.queue("reports", shards=2)
    q.schedule("report", "r", every=0.4, overlap="skip")
    assert [s.overlap for s in q.schedules()] == ["skip"]
    first = _occurrence(q)
    assert first is not None  # runs (held: not acked)
    time.sleep(0.45)
    assert q.pop(1, wait=0.6) == []  # the next tick came: skipped, first still runs
    assert "skipped" in caplog.text
    assert q.stats().unacked == 1 and q.ack(first)
    after = _occurrence(q)
    assert after is not None and after.id != first.id
    assert after.headers is not None and first.headers is not None
    assert after.headers["dynoq.tick"] - first.headers["dynoq.tick"] >= 800  # one skipped
    # a redelivery of the occurrence that runs runs again
    assert q.extend(after, 0)  # its visibility ends: it goes back
    again = _occurrence(q)
    assert again is not None and again.id == after.id and again.attempts == 2
    q.ack(again)


def test_overlap_allow_runs_occurrences_side_by_side(client: dynoq.Client) -> None:
    q = client.queue("reports", shards=2)
    q.schedule("report", "r", every=0.4)  # overlap="allow", the default
    assert [s.overlap for s in q.schedules()] == ["allow"]
    first = _occurrence(q)
    time.sleep(0.45)
    second = _occurrence(q)
    assert first is not None and second is not None and first.id != second.id


def test_overlap_skip_lets_the_next_run_once_the_last_is_dead_or_unscheduled(
    client: dynoq.Client,
) -> None:
    q = client.queue("reports", shards=1, max_retries=0)
    q.schedule("report", "r", every=0.3, overlap="skip")
    first = _occurrence(q)
    assert first is not None
    q.nack(first)  # no retries left: dead-lettered, it runs no more
    assert q.stats().dead == 1
    assert _occurrence(q) is not None  # the next tick runs
    control = q.ops.shard_keys[0].control
    assert client.redis.hexists(control, "run:report")
    assert q.unschedule("report")
    assert not client.redis.hexists(control, "run:report")


@pytest.mark.slow
def test_overlap_skip_never_runs_two_at_once_across_consumers(
    real_url: str, prefix: str, real_client: dynoq.Client
) -> None:
    clients = [dynoq.connect(real_url, prefix=prefix) for _ in range(2)]
    spans: list[tuple[float, float]] = []
    lock = threading.Lock()

    def handle(msg: dynoq.Message) -> None:
        start = time.monotonic()
        time.sleep(0.5)  # longer than the schedule's step: the next ticks come meanwhile
        with lock:
            spans.append((start, time.monotonic()))

    q = real_client.queue("slow", shards=2)
    consumers = [c.consumer("slow", handle, idle_wait=0.05, lease_ttl=2) for c in clients]
    try:
        for c in consumers:
            c.start()
        q.schedule("slow", "s", every=0.15, overlap="skip")
        time.sleep(2.5)
        q.unschedule("slow")
    finally:
        for c in consumers:
            c.stop(10)
        for c in clients:
            c.close()
    spans.sort()
    assert len(spans) >= 3
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end - 0.01, spans  # none started while another ran
    assert q.stats().total("acked") > len(spans)  # the skipped ones, acked unhandled


def test_bad_overlap_is_refused_and_stores_nothing(client: dynoq.Client) -> None:
    q = client.queue("reports", shards=2)
    for bad in ("queue", "", None, 1):
        with pytest.raises(dynoq.InvalidArgument, match="overlap"):
            q.schedule("x", 1, every=1, overlap=bad)  # type: ignore[arg-type]
    assert q.schedules() == [] and q.size() == 0
