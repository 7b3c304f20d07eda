"""Enqueue if and only if your database commits (RocketMQ's transactional messages).

An order is written to SQLite and its "order placed" message prepared in one flow: the
message is delivered only once the order is committed. A producer that crashes between
its database commit and the message's commit leaves a prepared message behind; the
checker asks the database about it and commits it (or rolls it back).

    python examples/transactional_outbox.py
"""

import os
import sqlite3
import tempfile
import time

import dynoq

db = sqlite3.connect(
    os.path.join(tempfile.mkdtemp(), "shop.db"), isolation_level=None, check_same_thread=False
)  # the checker runs in its own thread
db.execute("CREATE TABLE orders (id TEXT PRIMARY KEY, total INTEGER)")


def place_order(q: dynoq.Queue, order_id: str, total: int, *, fail: bool = False) -> None:
    with q.transaction({"order": order_id, "total": total}, id=order_id):
        db.execute("BEGIN")
        try:
            db.execute("INSERT INTO orders VALUES (?, ?)", (order_id, total))
            if fail:
                raise ValueError("card declined")
            db.execute("COMMIT")  # the message commits right after, when the block ends
        except Exception:
            db.execute("ROLLBACK")
            raise  # ...and is rolled back with the order


def check(msg: dynoq.Message) -> str:
    """The check-back: is this order in the database?"""
    found = db.execute("SELECT 1 FROM orders WHERE id = ?", (msg.id,)).fetchone()
    return "commit" if found else "rollback"


with dynoq.connect(os.environ.get("DYNOQ_URL", "embedded://"), prefix="outbox") as client:
    orders = client.queue("order-events", shards=2)
    place_order(orders, "A-1", 30)
    try:
        place_order(orders, "A-2", 99, fail=True)
    except ValueError as exc:
        print("order A-2 failed:", exc)

    # A producer that died after its database commit, before committing the message:
    half = orders.prepare({"order": "A-3", "total": 12}, id="A-3", check_after=0.2)
    db.execute("INSERT INTO orders VALUES ('A-3', 12)")
    print("prepared:", orders.stats().prepared, "| waiting:", orders.size())  # 1 | 1
    del half  # ...the process is gone; the checker finds the order and commits it

    with client.checker(orders, check, check_interval=0.2, poll_interval=0.1):
        delivered = []
        deadline = time.monotonic() + 30
        while len(delivered) < 2 and time.monotonic() < deadline:
            for m in orders.pop(10, wait=1.0):
                delivered.append(m.payload["order"])
                orders.ack(m)
    print("delivered:", sorted(delivered))  # ['A-1', 'A-3']: never A-2
    assert sorted(delivered) == ["A-1", "A-3"] and orders.stats().prepared == 0
    orders.clear()
