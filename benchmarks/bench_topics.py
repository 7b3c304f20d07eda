"""Topic publish throughput against push_many to one queue, in one run.

    python -m benchmarks.bench_topics [--url redis://...] [--n 50000] [--repeats 3]

  push_many        push_many of N messages (100 B) to a queue of 4 shards
  publish_many/G   publish_many of the same messages to a topic of 4 shards with G
                   subscribed groups (each group's queue gets a copy)
Goal: with 1 group, publish_many >= 0.9x push_many.
"""

from __future__ import annotations

import os
import time

import redis

import dynoq
from benchmarks.common import drop_prefix, median, parser, server_url, table


def timed(n: int, fn: object) -> float:
    t0 = time.perf_counter()
    fn()  # type: ignore[operator]
    return n / (time.perf_counter() - t0)


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--n", type=int, default=50_000)
    args = p.parse_args()
    payload = os.urandom(50).hex()
    cases = ["push_many", "publish_many/1", "publish_many/4", "publish_many/16"]
    results: dict[str, list[float]] = {c: [] for c in cases}
    with server_url(args.url) as url:
        r = redis.Redis.from_url(url)
        client = dynoq.connect(url, prefix="bt")
        for rep in range(args.repeats):
            batch = [dynoq.Message(payload) for _ in range(args.n)]
            q = client.queue(f"q{rep}", shards=4)
            results["push_many"].append(
                timed(
                    args.n,
                    lambda q=q, batch=batch: [
                        q.push_many(batch[i : i + 5000]) for i in range(0, args.n, 5000)
                    ],
                )
            )
            for groups in (1, 4, 16):
                t = client.topic(f"t{rep}-{groups}", shards=4)
                for g in range(groups):
                    t.subscribe(f"g{g}")
                results[f"publish_many/{groups}"].append(
                    timed(
                        args.n,
                        lambda t=t, batch=batch: [
                            t.publish_many(batch[i : i + 5000]) for i in range(0, args.n, 5000)
                        ],
                    )
                )
            drop_prefix(r, "bt:")
        client.close()
        r.close()
    med = {c: median(v) for c, v in results.items()}
    rows = [("operation", "median msgs/s", "runs", "ratio vs push_many")]
    for c in cases:
        rows.append(
            (
                c,
                f"{med[c]:,.0f}",
                " ".join(f"{x:,.0f}" for x in results[c]),
                f"{med[c] / med['push_many']:.2f}x",
            )
        )
    print(
        f"{args.n} messages of 100 bytes, 4 shards, {args.repeats} repeats "
        "(msgs/s counts published messages, not copies)"
    )
    print(table(rows))


if __name__ == "__main__":
    main()
