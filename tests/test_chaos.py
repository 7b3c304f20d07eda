"""The chaos soak (benchmarks/chaos.py): its checker on hand-made records, a short soak on
a private server with AOF (SIGKILLs, connection kills, a server restart), and a planted
fault the checker must catch."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import wait_for

import dynoq
from benchmarks import chaos, chaos_roles
from benchmarks.chaos_check import (
    EXPIRY,
    KILL_CONNECTION,
    KILL_CONSUMER,
    OTHER,
    PLANNED,
    RESTART,
    SERVER_RESTART,
    SIGKILL,
    TAKEOVER,
    Event,
    Handling,
    Pushed,
    check,
    handling_value,
    parse_handling,
    parse_pushed,
    pushed_value,
)
from benchmarks.chaos_roles import GROUPS, record_key, write
from dynoq import Message
from dynoq._core.calls import Cmd

S = 1_000_000  # microseconds in a second


def handled(at: float, msg_id: str, consumer: str = "c0.0", **kw: object) -> Handling:
    options: dict[str, object] = {"queue": "jobs", "shard": 0, **kw}
    return Handling(at=int(at * S), consumer=consumer, id=msg_id, **options)  # type: ignore[arg-type]


def keyed(seq: int, key: str = "k") -> Pushed:
    return Pushed(f"{key}-{seq}", "ordered", key, seq)


def test_a_message_never_handled_nor_dead_is_lost() -> None:
    pushed = [Pushed("a", "jobs"), Pushed("b", "jobs"), Pushed("c", "jobs")]
    report = check(pushed, [handled(1, "a")], ["c"], [], visibility=3)
    assert (report.pushed, report.handled, report.dead, report.lost) == (3, 1, 1, 1)
    assert report.lost_ids == ["b"]
    assert report.failures() == ["lost = 1"]


def test_a_seq_first_handled_before_the_seq_before_it_is_an_order_violation() -> None:
    pushed = [keyed(s) for s in range(4)] + [keyed(s, "other") for s in range(2)]
    log = [
        handled(1, "k-0"),
        handled(2, "k-2"),
        handled(3, "k-1"),
        handled(4, "k-3"),
        handled(5, "k-1"),  # a later handling of seq 1 changes nothing: the first counts
        handled(6, "other-0"),
        handled(7, "other-1"),
    ]
    report = check(pushed, log, [], [], visibility=3)
    assert report.order_violations == 1  # seq 2 before seq 1; seq 3 after seq 2 is fine
    assert "k: seq 2 (k-2)" in report.violation_examples[0]
    assert report.failures() == ["order violations = 1"]


def test_a_handling_without_the_lease_and_a_stale_fence_are_counted() -> None:
    pushed = [keyed(s) for s in range(4)]
    log = [
        handled(1, "k-0", queue="ordered", fence=2, held=True),
        handled(2, "k-1", queue="ordered", fence=3, held=True, consumer="c1.0"),
        handled(3, "k-2", queue="ordered", fence=2, held=False),  # the old holder, late
        handled(4, "k-3", queue="ordered", fence=3, held=True, consumer="c1.0"),
        handled(5, "x", queue="ordered", shard=1, fence=1, held=True),
    ]  # another shard
    report = check(pushed, log, [], [], visibility=3)
    assert (report.without_lease, report.stale_fence) == (1, 1)
    assert report.stale_examples == [
        "ordered k-2 (c0.0 at 3.000 (shard 0 fence 2, attempt 1)) after k-1 "
        "(c1.0 at 2.000 (shard 0 fence 3, attempt 1))"
    ]
    assert report.failures() == ["handled without the lease = 1", "handled with a stale fence = 1"]


def test_a_write_the_fenced_store_refused_is_counted_and_does_nothing() -> None:
    # The old holder's handler started under its lease; its write arrived after the
    # lease moved on (held up by a restart) and was refused: no handling, no stale fence.
    pushed = [keyed(s) for s in range(2)]
    log = [
        handled(1, "k-0", queue="ordered", fence=2, held=True),
        handled(2, "k-1", queue="ordered", fence=3, held=True, consumer="c1.0"),
        handled(3, "k-1", queue="ordered", fence=2, refused=True),
    ]
    report = check(pushed, log, [], [], visibility=3)
    assert report.refused == {"ordered": 1} and report.failures() == []
    assert sum(report.duplicates.values()) == 0
    raw = "3000000|r|c0.0|ordered|k-1|k|1|0|2|1|0"
    assert parse_handling(raw).refused and parse_handling(raw).held is None


def test_the_soak_store_refuses_a_message_groups_write_after_its_key_was_taken_over(
    real_client: dynoq.Client,
) -> None:
    # A handler whose first write is held up (a server restart) past its delivery's
    # visibility: the key was given back with its fence raised and handled again, so the
    # late write must be refused, not recorded as a handling with a stale fence (CI's
    # soak of stop 36 counted one). On real servers: the record is a Lua script.
    q = real_client.queue(GROUPS, shards=1, ordered="key", unack_timeout=0.2)
    q.push({"key": "a", "seq": 0}, key="a")
    [late] = q.pop()
    got: list[Message] = []
    wait_for(lambda: got.extend(q.pop()) or got, what="redelivery")
    [again] = got
    assert (late.fence, again.fence) == (1, 2)
    prefix = real_client.prefix
    old, new = (
        chaos_roles.Handling(me, prefix, q, m, f"{me}:1", 0.0)
        for me, m in (("c0.0", late), ("c1.0", again))
    )
    with pytest.raises(dynoq.ServerError, match="FENCED"):
        write(real_client, [old.started()], 0)
    write(real_client, [new.started()], 0)
    records = real_client.backend.run(Cmd(("HGETALL", record_key(prefix, GROUPS, 0))))
    by_call = {k.decode(): parse_handling(v.decode()) for k, v in dict(records).items()}
    assert (by_call["c0.0:1"].refused, by_call["c0.0:1"].fence) == (True, 1)
    assert (by_call["c1.0:1"].held, by_call["c1.0:1"].fence) == (True, 2)


def test_duplicates_are_counted_with_their_cause() -> None:
    pushed = [Pushed(i, "jobs") for i in "abcdef"]
    events = [
        Event(int(1.5 * S), KILL_CONSUMER, "c0.0"),  # kills the first handler of "a"
        Event(int(1.6 * S), KILL_CONSUMER, "c9.0"),  # someone else: not "f"'s cause
        Event(int(19 * S), SERVER_RESTART, "valkey", until=int(20.5 * S)),
    ]
    log = [
        handled(1, "a"),
        handled(2, "a", "c1.0"),
        handled(1, "b", "c3.0", fence=1),
        handled(2, "b", "c1.0", fence=2),
        handled(10, "c"),
        handled(13, "c"),  # the visibility (3 s) ran out
        handled(1, "d", planned=True),
        handled(1.3, "d"),
        handled(20, "e"),
        handled(21, "e"),  # the server came back meanwhile
        handled(1, "f", "c2.0"),
        handled(2, "f", "c2.0"),
    ]
    report = check(pushed, log, [], events, visibility=3)
    assert dict(report.duplicates) == {
        SIGKILL: 1,
        TAKEOVER: 1,
        EXPIRY: 1,
        PLANNED: 1,
        RESTART: 1,
        OTHER: 1,
    }
    assert report.events[KILL_CONSUMER] == 2
    assert report.calls == {"c0": 7, "c1": 2, "c2": 2, "c3": 1}  # by name, any generation
    assert report.failures() == []  # at-least-once: duplicates are allowed, and explained


def test_records_read_back_as_written() -> None:
    value = handling_value("c1.2", "ordered", "o-p0-7", "p0-k7", 0, 3, 5, 2, True)
    assert parse_handling(f"1700000000123456|1|{value}") == Handling(
        at=1700000000123456,
        consumer="c1.2",
        queue="ordered",
        id="o-p0-7",
        shard=3,
        key="p0-k7",
        seq=0,
        fence=5,
        held=True,
        attempts=2,
        planned=True,
    )
    plain = parse_handling(
        "5||" + handling_value("c0.0", "jobs", "j", None, None, 0, None, 1, False)
    )
    assert (plain.held, plain.fence, plain.key, plain.seq) == (None, None, None, None)
    assert parse_pushed("o-1", pushed_value("ordered", "k", 4)) == Pushed("o-1", "ordered", "k", 4)


@pytest.mark.slow
def test_a_short_soak_loses_nothing_and_keeps_order(tmp_path: Path) -> None:
    cfg = chaos.Config(
        seconds=30,
        restarts=1,
        every=1.0,
        seed=12,
        drain_timeout=30,
        log_dir=str(tmp_path),
        out=lambda _: None,
    )
    report = chaos.run(cfg)
    table = chaos.render(report, "short soak")
    assert report.failures() == [], table
    assert report.events[SERVER_RESTART] == 1, table
    assert report.events[KILL_CONSUMER] >= 2 and report.events[KILL_CONNECTION] >= 1, table
    assert report.pushed > 100 and report.handled > 0, table
    # c2 runs on dynoq.asyncio (Config.async_consumers): each flavor took part
    assert set(report.calls) == {"c0", "c1", "c2"} and min(report.calls.values()) > 0, table


@pytest.mark.slow
def test_the_checker_catches_a_planted_fault(tmp_path: Path) -> None:
    # The "ordered" stream on a plain queue, consumed from a backlog: out of order.
    # A backlog of messages, not of seconds: the fault shows only when consumers share one.
    cfg = chaos.Config(
        seconds=3,
        plant="unordered",
        chaos=False,
        backlog=1,
        backlog_min=60,
        sweepers=1,
        log_dir=str(tmp_path),
        out=lambda _: None,
    )
    report = chaos.run(cfg)
    assert report.order_violations > 0, chaos.render(report, "planted fault")
    assert report.lost == 0
