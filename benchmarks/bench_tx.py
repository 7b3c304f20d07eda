"""Transactional messages: prepare + commit against a plain push, and delivery from a
queue holding many prepared messages against one holding none, side by side in one run.

    python -m benchmarks.bench_tx [--url redis://...] [--n 5000] [--drain-n 20000]
                                  [--prepared 100000] [--repeats 3]

  push                 N single pushes (100 B), one round trip each
  prepare+commit       N prepares, each committed at once (two round trips)
  drain/0 prepared     pop(100) + ack_many until DRAIN_N ready messages are handled, from a
                       queue of 4 shards with no prepared messages
  drain/P prepared     the same from a queue that also holds P prepared messages
Goals: prepare+commit >= 0.45x push; drain with P prepared >= 0.9x drain with none.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import redis

import dynoq
from benchmarks.common import clean_up, median, parser, server_url, server_version, table
from dynoq._core.calls import Batch


def fill_prepared(q: dynoq.Queue, count: int, payload: str) -> None:
    """``count`` prepared messages, sent 1,000 per round trip (their checks far away)."""
    for start in range(0, count, 1000):
        calls = [
            q.transactions.prepare(
                payload,
                id=None,
                key=None,
                delay=0.0,
                priority=0,
                headers=None,
                check_after_s=86400.0,
            )[2]
            for _ in range(min(1000, count - start))
        ]
        q.backend.run(Batch(calls))


ROUNDS = 10  # alternating rounds per repeat


def seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def produce(q: dynoq.Queue, how: str, n: int, payload: str) -> None:
    for _ in range(n):
        if how == "push":
            q.push(payload)
        else:
            q.prepare(payload).commit()


def drain(q: dynoq.Queue, n: int) -> None:
    handled = 0
    while handled < n:
        got = q.pop(100)
        handled += q.ack_many(got)


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--n", type=int, default=5000)
    p.add_argument("--drain-n", type=int, default=20_000)
    p.add_argument("--prepared", type=int, default=100_000)
    args = p.parse_args()
    payload = os.urandom(50).hex()
    many = f"drain/{args.prepared:,} prepared"
    cases = ["push", "prepare+commit", "drain/0 prepared", many]
    results: dict[str, list[float]] = {c: [] for c in cases}
    with server_url(args.url) as url:
        r = redis.Redis.from_url(url)
        version = server_version(r)
        client = dynoq.connect(url, prefix="btx")
        empty = client.queue("empty", shards=4)
        full = client.queue("full", shards=4)
        fill_prepared(full, args.prepared, payload)
        assert full.stats().prepared == args.prepared
        step, drain_step = args.n // ROUNDS, args.drain_n // ROUNDS
        for rep in range(args.repeats):
            # Side by side in small alternating rounds (one first, then the other), so
            # both cases see the same load on a shared machine.
            q = client.queue(f"p{rep}", shards=4)
            spent = dict.fromkeys(cases, 0.0)
            for k in range(ROUNDS):
                for name in cases[:2] if k % 2 == 0 else cases[1::-1]:
                    spent[name] += seconds(lambda n=name, q=q: produce(q, n, step, payload))
                for name in cases[2:] if k % 2 == 0 else cases[:1:-1]:
                    target = empty if name == cases[2] else full
                    target.push_many([payload] * drain_step)
                    spent[name] += seconds(lambda t=target: drain(t, drain_step))
            for name in cases:
                done = step if name in cases[:2] else drain_step
                results[name].append(done * ROUNDS / spent[name])
        assert full.stats().prepared == args.prepared and full.size() == 0
        clean_up(r, client, "btx:")
    med = {c: median(v) for c, v in results.items()}
    base = {
        "push": "push",
        "prepare+commit": "push",
        "drain/0 prepared": "drain/0 prepared",
        many: "drain/0 prepared",
    }
    rows = [("operation", "median msgs/s", "runs", "ratio")]
    for c in cases:
        rows.append(
            (
                c,
                f"{med[c]:,.0f}",
                " ".join(f"{x:,.0f}" for x in results[c]),
                f"{med[c] / med[base[c]]:.2f}x vs {base[c]}",
            )
        )
    print(
        f"server {version}; {args.n} messages of 100 bytes pushed or prepared, "
        f"{args.drain_n} drained; 4 shards, {args.repeats} repeats"
    )
    print(table(rows))


if __name__ == "__main__":
    main()
