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
