"""Transactional messages against real crashes: producers and checkers are processes,
SIGKILLed at the worst moments, and the orders live in a SQLite file (tests/tx_procs.py).
A message must be delivered if and only if its order was committed to the database."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_for

import dynoq

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
QUEUE = "orders-tx"


def _spawn(*args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": f"{HERE.parent}{os.pathsep}{HERE}"}
    return subprocess.Popen(
        [sys.executable, str(HERE / "tx_procs.py"), *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _orders(path: Path) -> set[str]:
    if not path.exists():
        return set()
    conn = sqlite3.connect(path, timeout=30)
    try:
        return {row[0] for row in conn.execute("SELECT id FROM orders")}
    except sqlite3.OperationalError:
        return set()
    finally:
        conn.close()


def _marks(path: Path) -> list[tuple[int, str]]:
    if not path.exists():
        return []
    return [
        (int(pid), mid)
        for pid, mid in (line.split() for line in path.read_text().splitlines() if line.strip())
    ]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _drain(q: dynoq.Queue, until: float = 1.5) -> list[str]:
    """Everything delivered, acked, until nothing came for ``until`` seconds."""
    got: list[str] = []
    while True:
        msgs = q.pop(100, wait=until)
        if not msgs:
            return got
        got += [m.id or "" for m in msgs]
        q.ack_many(msgs)


@pytest.fixture
def q(real_url: str, prefix: str) -> Any:
    with dynoq.connect(real_url, prefix=prefix) as client:
        yield client.queue(QUEUE, shards=2)


def test_producer_killed_after_the_db_commit_is_delivered_once(
    real_url: str, prefix: str, q: dynoq.Queue, tmp_path: Path
) -> None:
    path, marks = tmp_path / "orders.db", tmp_path / "marks"
    producer = _spawn("produce", real_url, prefix, str(path), "o-1", "after-db-commit")
    assert producer.wait(60) == -signal.SIGKILL, producer.stderr.read() if producer.stderr else ""
    assert _orders(path) == {"o-1"}
    assert q.stats().prepared == 1 and q.pop(10) == []  # held back: nobody committed it
    checker = _spawn("check", real_url, prefix, str(path), str(marks))
    try:
        wait_for(lambda: q.stats().prepared == 0, what="the check-back")
        assert _drain(q) == ["o-1"]
    finally:
        _stop(checker)
    assert checker.returncode == 0  # SIGTERM: a graceful stop
    assert [m for _, m in _marks(marks)] == ["o-1"]
    assert _drain(q, 0.5) == []
    assert q.stats().total("committed") == 1


def test_producer_killed_before_the_db_commit_is_never_delivered(
    real_url: str, prefix: str, q: dynoq.Queue, tmp_path: Path
) -> None:
    path, marks = tmp_path / "orders.db", tmp_path / "marks"
    producer = _spawn("produce", real_url, prefix, str(path), "o-2", "before-db-commit")
    assert producer.wait(60) == -signal.SIGKILL
    assert _orders(path) == set()  # the database rolled the order back
    checker = _spawn("check", real_url, prefix, str(path), str(marks))
    try:
        wait_for(lambda: q.stats().prepared == 0, what="the check-back")
    finally:
        _stop(checker)
    assert _drain(q, 0.5) == [] and not q.contains("o-2")
    assert q.stats().total("rolled_back") == 1


def test_a_checker_killed_while_deciding_is_replaced_once(
    real_url: str, prefix: str, q: dynoq.Queue, tmp_path: Path
) -> None:
    path, marks = tmp_path / "orders.db", tmp_path / "marks"
    producer = _spawn("produce", real_url, prefix, str(path), "o-3", "after-db-commit")
    assert producer.wait(60) == -signal.SIGKILL
    hung = _spawn("check", real_url, prefix, str(path), str(marks), "hang")
    try:
        wait_for(lambda: len(_marks(marks)) == 1, what="the first checker deciding")
        hung.kill()  # SIGKILL while deciding
        hung.wait(10)
    finally:
        _stop(hung)
    assert q.stats().prepared == 1
    other = _spawn("check", real_url, prefix, str(path), str(marks))
    try:
        wait_for(lambda: q.stats().prepared == 0, what="another checker deciding")
        assert _drain(q) == ["o-3"]
    finally:
        _stop(other)
    first, second = _marks(marks)
    assert first[0] == hung.pid and second == (other.pid, "o-3")  # decided once, by it
    assert q.stats().total("committed") == 1


def test_concurrent_commit_and_rollback_from_two_processes_one_wins(
    real_url: str, prefix: str, q: dynoq.Queue, tmp_path: Path
) -> None:
    n = 300
    for i in range(n):
        q.prepare(i, id=f"race-{i}")
    go = tmp_path / "go"
    procs = {
        what: _spawn("decide", real_url, prefix, str(tmp_path / what), what, str(n), str(go))
        for what in ("commit", "rollback")
    }
    wait_for(
        lambda: all((tmp_path / f"{w}.ready").exists() for w in procs),
        timeout=60,
        what="both processes connected",
    )
    (tmp_path / "go.tmp").write_text(str(time.time() + 0.3))
    (tmp_path / "go.tmp").rename(go)  # whole, at once
    for p in procs.values():
        assert p.wait(60) == 0, p.stderr.read() if p.stderr else ""
    won = {
        what: {
            line.split()[0]: line.split()[1] == "True"
            for line in (tmp_path / what).read_text().splitlines()
        }
        for what in procs
    }
    committed = {i for i, ok in won["commit"].items() if ok}
    assert all(won["commit"][i] != won["rollback"][i] for i in won["commit"])  # one wins
    assert len(won["commit"]) == n and 0 < len(committed) < n  # a real race: both won some
    assert set(_drain(q, 0.5)) == committed  # delivered if and only if the commit won
    for i in won["commit"]:  # and every later answer agrees
        assert q.half(i).commit() is (i in committed)
    assert q.stats().prepared == 0


@pytest.mark.backends("embedded", "cluster")  # processes: the server matters little
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_many_producers_and_two_checkers_under_random_kills(
    real_url: str, prefix: str, q: dynoq.Queue, tmp_path: Path
) -> None:
    """Four producers and two checkers for 30 s or more, one of them SIGKILLed and restarted
    every second or so: every order in the database is handled, no other ever is."""
    path, marks = tmp_path / "orders.db", tmp_path / "marks"
    rng = random.Random(27)
    handled: list[str] = []
    consuming = dynoq.connect(real_url, prefix=prefix)
    consumer = consuming.consumer(
        QUEUE, lambda m: handled.append(m.id), concurrency=2, idle_wait=0.1
    )
    procs: dict[str, tuple[list[str], subprocess.Popen[bytes]]] = {}
    generation = 0

    def start(name: str) -> None:
        nonlocal generation
        generation += 1
        if name.startswith("p"):
            args = ["produce", real_url, prefix, str(path), f"{name}g{generation}", "loop"]
        else:
            args = ["check", real_url, prefix, str(path), str(marks)]
        procs[name] = (args, _spawn(*args))

    with consumer:
        for name in ("p1", "p2", "p3", "p4", "c1", "c2"):
            start(name)
        # 30 s at least, longer on a loaded machine where a restarted producer spends its
        # first second importing: the kills go on until 100 orders are in the database.
        end, latest = time.monotonic() + 30, time.monotonic() + 90
        kills = 0
        while time.monotonic() < end or (len(_orders(path)) <= 100 and time.monotonic() < latest):
            time.sleep(rng.uniform(0.3, 1.5))
            name = rng.choice(sorted(procs))
            procs[name][1].kill()
            procs[name][1].wait(10)
            kills += 1
            start(name)
        for name in ("p1", "p2", "p3", "p4"):  # the producers stop dead, mid-order
            procs[name][1].kill()
            procs[name][1].wait(10)
        try:
            wait_for(
                lambda: q.stats().prepared == 0,
                timeout=60,
                what="the checkers deciding every order left undecided",
            )
            committed = _orders(path)
            wait_for(
                lambda: set(handled) >= committed, timeout=60, what="every committed order handled"
            )
        finally:
            for name in ("c1", "c2"):
                _stop(procs[name][1])
    consuming.close()
    assert kills >= 10 and len(committed) > 100
    assert set(handled) == committed  # nothing rolled back was ever delivered
    stats = q.stats()
    assert stats.dead == 0 and stats.size == 0
