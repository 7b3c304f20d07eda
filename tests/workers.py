"""Entry points for test subprocesses (importable by spawned children)."""

from __future__ import annotations

from typing import Any

import dynoq


def produce_consume(url: str, prefix: str, worker: int, n: int, out: Any) -> None:
    """Push n messages, then pop and ack until the queue is drained; report acked ids."""
    with dynoq.connect(url, prefix=prefix) as client:
        q = client.queue("mp")
        for start in range(0, n, 500):
            q.push_many([dynoq.Message(i, id=f"w{worker}-{i}") for i in range(start, start + 500)])
        acked: list[str] = []
        idle = 0
        while idle < 3:
            got = q.pop(50, wait=0.5)
            if not got:
                idle += 1
                continue
            idle = 0
            for m in got:
                if q.ack(m):
                    acked.append(m.id or "")
        out.put(acked)


def race_ensure(url: str, prefix: str, ids: list[str], barrier: Any, out: Any) -> None:
    with dynoq.connect(url, prefix=prefix) as client:
        q = client.queue("race")
        barrier.wait()
        out.put([i for i in ids if q.ensure("x", id=i)])


def capped_member(url: str, prefix: str, queue: str, n: int, out: Any) -> None:
    """A consumer of a queue with max_running (its own process, two workers: it holds two
    slots at most, so a cap of three leaves the other member one): each call counts
    itself in ``<prefix>:running`` while it runs and logs how many ran with it, until
    ``n`` calls were logged in all; says it is ready in ``<prefix>:ready``; reports how
    many calls it made."""
    import time

    with dynoq.connect(url, prefix=prefix) as client:
        r, made = client.redis, [0]

        def handle(msg: dynoq.Message) -> None:
            r.rpush(f"{prefix}:peaks", r.incr(f"{prefix}:running"))
            time.sleep(0.02)
            r.decr(f"{prefix}:running")
            made[0] += 1

        c = client.consumer(queue, handle, concurrency=2, idle_wait=0.2).start()
        r.incr(f"{prefix}:ready")
        while r.llen(f"{prefix}:peaks") < n:
            time.sleep(0.05)
        c.stop()
        out.put(made[0])
