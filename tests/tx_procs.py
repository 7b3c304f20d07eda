"""Processes for tests/test_transactions_procs.py: a producer that writes an order to a
SQLite file and prepares its message, and a checker that looks the order up.

    python tx_procs.py produce URL PREFIX DB ORDER STAGE
        STAGE: "before-db-commit" (SIGKILLs itself after prepare, before the database
        commit), "after-db-commit" (SIGKILLs itself after the database commit, before
        half.commit()), "done" (commits both), "loop" (orders ORDER-0, ORDER-1, ...
        forever, a quarter of them rolled back in the database, killed by the test)
    python tx_procs.py decide URL PREFIX OUT WHAT N GO
        connected, writes OUT.ready; once the file GO holds a time (time.time()), at
        that time commits race-0 .. race-N-1 (WHAT "commit") or rolls
        them back from the other end (WHAT "rollback") as fast as it can, so the two
        meet in the middle; writes "<id> <True|False>" lines to OUT
    python tx_procs.py check URL PREFIX DB MARKS [hang]
        runs a checker until SIGTERM; writes a line to MARKS at each check; with "hang"
        it hangs in its first check (the test SIGKILLs it there)
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import sys
import time

import dynoq

QUEUE = "orders-tx"
MAX_TRANSACTION = 3.0  # seconds: a producer's database transaction is over by then


def db(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, total INTEGER)")
    return conn


def order(
    q: dynoq.Queue, conn: sqlite3.Connection, order_id: str, stage: str, keep: bool = True
) -> None:
    half = q.prepare({"order": order_id}, id=order_id, check_after=0.5)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO orders VALUES (?, ?)", (order_id, 42))
    if stage == "before-db-commit":
        os.kill(os.getpid(), signal.SIGKILL)
    if not keep:
        conn.execute("ROLLBACK")
        half.rollback()
        return
    conn.execute("COMMIT")
    if stage == "after-db-commit":
        os.kill(os.getpid(), signal.SIGKILL)
    half.commit()


def produce(url: str, prefix: str, path: str, order_id: str, stage: str) -> None:
    conn = db(path)
    with dynoq.connect(url, prefix=prefix) as client:
        q = client.queue(QUEUE, shards=2)
        if stage != "loop":
            order(q, conn, order_id, stage)
            return
        rng = random.Random()
        for n in range(1_000_000):
            order(q, conn, f"{order_id}-{n}", "done", keep=rng.random() > 0.25)


def check(url: str, prefix: str, path: str, marks: str, hang: bool) -> None:
    conn = db(path)

    def decide(msg: dynoq.Message) -> str:
        with open(marks, "a") as f:
            f.write(f"{os.getpid()} {msg.id}\n")
        if hang:
            time.sleep(3600)
        found = conn.execute("SELECT 1 FROM orders WHERE id = ?", (msg.id,)).fetchone()
        if found:
            return "commit"
        # Absent: rolled back, or its transaction is still open (its producer is slow, not
        # dead). Only a transaction that can no longer commit may be rolled back.
        age = time.time() - (msg.enqueued_at or 0.0)
        return "rollback" if age > MAX_TRANSACTION else "unknown"

    with dynoq.connect(url, prefix=prefix) as client:
        q = client.queue(QUEUE, shards=2)
        client.checker(
            q, decide, check_interval=0.2, claim_timeout=1.0, max_checks=100, poll_interval=0.1
        ).run()


def decide(url: str, prefix: str, out: str, what: str, n: int, go: str) -> None:
    with dynoq.connect(url, prefix=prefix) as client:
        q = client.queue(QUEUE, shards=2)
        order = range(n) if what == "commit" else range(n - 1, -1, -1)
        halves = [q.half(f"race-{i}") for i in order]
        q.stats()  # connected (every node of a cluster)
        with open(out + ".ready", "w"):
            pass
        while not os.path.exists(go):  # the test renames it into place whole
            time.sleep(0.01)
        with open(go) as f:
            start = float(f.read())
        while time.time() < start:
            pass  # spin: both processes begin within microseconds of each other
        results = [(h.id, getattr(h, what)()) for h in halves]
    with open(out, "w") as f:
        f.writelines(f"{i} {r}\n" for i, r in results)


if __name__ == "__main__":
    cmd, url, prefix, path, arg, *rest = sys.argv[1:]
    if cmd == "decide":
        decide(url, prefix, path, arg, int(rest[0]), rest[1])
    elif cmd == "produce":
        produce(url, prefix, path, arg, rest[0])
    else:
        check(url, prefix, path, arg, rest == ["hang"])
