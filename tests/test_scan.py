"""The read-only walk behind exports and spark.read.format("dynoq") (dynoq._core.scan), on
every backend: every state with its time and failure, pages that hold one page whatever
the shard's size, and no entry lost or repeated when the entry a page ended on leaves."""

from __future__ import annotations

from typing import Any

import pytest

import dynoq
from dynoq._core import reasons, scan
from dynoq.spark.export import COLUMNS, scan_shard


def _walk(
    q: dynoq.Queue,
    shard: int,
    zset: str,
    states: tuple[str, ...] = scan.STATES,
    between: Any = None,
) -> tuple[list[scan.Found], int]:
    """Every page of one sorted set; ``between(page_number)`` runs between pages."""
    found: list[scan.Found] = []
    after, pages = None, 0
    while True:
        got, after = q.backend.drive(scan.walk_page(q.ops, shard, zset, after, states))
        found += got
        pages += 1
        if after is None:
            return found, pages
        if between is not None:
            between(pages)


def test_every_state_with_its_time_and_failure(client: dynoq.Client) -> None:
    q = client.queue("audit", shards=1, max_retries=0, unack_timeout=60)
    now = client.server_time()
    q.push_many([dynoq.Message({"n": i}, id=f"m{i}") for i in range(6)])
    q.push({"later": 1}, id="later", delay=3600)
    [flying] = q.pop()
    [failed] = q.pop()
    try:
        raise ValueError("no such customer")
    except ValueError as exc:
        why = reasons.why(exc, "worker-1")
    assert q.backend.run(q.ops.nack_call(failed, delay=0, mode="dead", why=why)) == (0, 1)
    rows = {r["id"]: r for r in scan_shard(q, 0, scan.STATES)}
    assert set(rows) == {f"m{i}" for i in range(6)} | {"later"}
    assert all(set(r) == set(COLUMNS) for r in rows.values())
    inflight, dead, later = rows[flying.id or ""], rows[failed.id or ""], rows["later"]
    assert inflight["state"] == "unacked"
    assert inflight["visibility_deadline"].timestamp() == pytest.approx(now + 60, abs=5)
    assert dead["state"] == "dead" and dead["dead_at"].timestamp() == pytest.approx(now, abs=5)
    assert (dead["error_type"], dead["error"]) == ("ValueError", "no such customer")
    assert later["state"] == "delayed"
    assert later["deliver_at"].timestamp() == pytest.approx(now + 3600, abs=5)
    assert later["visibility_deadline"] is None and later["error"] is None
    assert {r["state"] for r in rows.values()} == set(scan.STATES)
    # The default states leave in-flight messages out; a due delayed message is ready.
    assert {r["id"] for r in scan_shard(q, 0)} == set(rows) - {flying.id}
    q.reschedule("later", delay=0)
    [later] = [r for r in scan_shard(q, 0, ["ready"]) if r["id"] == "later"]
    assert later["state"] == "ready"
    stats = q.stats()
    by_state = [r["state"] for r in scan_shard(q, 0, scan.STATES)]
    assert (by_state.count("ready"), by_state.count("unacked"), by_state.count("dead")) == (
        stats.ready,
        stats.unacked,
        stats.dead,
    )


def test_a_walk_holds_a_page_and_meets_each_message_once(
    client: dynoq.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scan, "PAGE", 50)
    q = client.queue("big", shards=1)
    q.push_many([dynoq.Message(i, id=f"m{i:04d}") for i in range(230)])
    found, pages = _walk(q, 0, "ready")
    assert [f.message.id for f in found] == [f"m{i:04d}" for i in range(230)]  # push order
    assert pages == 5  # 50 a page: nothing but a page is ever read at once


def test_no_message_is_lost_or_repeated_when_a_page_end_leaves(
    client: dynoq.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The entry a page ended on is popped (and others before it) before the next page:
    the walk goes on right after where it was, by score, then among equal scores by id."""
    monkeypatch.setattr(scan, "PAGE", 20)
    q = client.queue("ties", shards=1)
    q.push_many([dynoq.Message(i, id=f"t{i:03d}", delay=3600) for i in range(100)])
    # Same due time for all: one tie group, ordered by id (what a million timers set in
    # the same millisecond look like).
    keys = q.ops.shard_keys[0]
    client.redis.zadd(keys.delayed, {f"t{i:03d}": 5_000_000_000_000 for i in range(100)})
    gone: list[str] = []

    def pop_the_anchor(page: int) -> None:
        for i in (page * 20 - 1, page * 20 - 7):  # the page's last entry and one before it
            q.remove(f"t{i:03d}")
            gone.append(f"t{i:03d}")

    found, _ = _walk(q, 0, "delayed", between=pop_the_anchor)
    met = [f.message.id for f in found]
    assert len(met) == len(set(met))  # none repeated
    stayed = [f"t{i:03d}" for i in range(100) if f"t{i:03d}" not in gone]
    assert [m for m in met if m in stayed] == stayed  # none that stayed was missed
