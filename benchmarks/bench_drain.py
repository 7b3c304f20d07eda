"""A drain's time a message, split: the client CPU of its pops and of its acks, and the
server's CPU, for a bytes payload and a small dict (what a change to either side moves).

    python -m benchmarks.bench_drain [--url redis://...] [--n 30000] [--repeats 3]
    python -m benchmarks.ab REV1 REV2 bench_drain --bench-from .   (two revisions)

Each round fills a one-shard queue with --n messages of each payload (push_many) and
drains it with pop(100) + ack_many, timing each call's process CPU (time.process_time:
this process alone) and the server's main thread (INFO cpu, user + sys, over the drain).
Figures are µs a message: each the median of --repeats rounds with its range. bench_core
sets a drain beside the raw layout's; this one says where a drain's time goes.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import redis

import dynoq
from benchmarks.common import drop_prefix, parser, server_url, server_version, table

PAYLOADS: dict[str, Any] = {
    "bytes (100)": b"x" * 100,
    "small dict": {"user": 12345, "action": "click", "page": "/home"},
}
PREFIX = "bench-drain"


def server_cpu(r: redis.Redis) -> float:
    info = r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def drain(r: redis.Redis, q: dynoq.Queue, n: int, payload: Any) -> dict[str, float]:
    """µs a message of one drain of ``n`` messages: wall, pop and ack client CPU, server."""
    for i in range(0, n, 5000):
        q.push_many([dynoq.Message(payload) for _ in range(min(5000, n - i))])
    pops = acks = 0.0
    done = 0
    server, start = server_cpu(r), time.perf_counter()
    while True:
        c = time.process_time()
        got = q.pop(100)
        pops += time.process_time() - c
        if not got:
            break
        c = time.process_time()
        done += q.ack_many(got)
        acks += time.process_time() - c
    wall = time.perf_counter() - start
    per = 1e6 / max(done, 1)
    return {
        "wall": wall * per,
        "pop, client": pops * per,
        "ack, client": acks * per,
        "server": (server_cpu(r) - server) * per,
    }


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--n", type=int, default=30_000)
    args = p.parse_args()
    with server_url(args.url) as url:
        r = redis.Redis.from_url(url)
        client = dynoq.connect(url, prefix=PREFIX)
        seen: dict[tuple[str, str], list[float]] = {}
        try:
            for i in range(args.repeats):
                for name, payload in PAYLOADS.items():
                    q = client.queue(f"drain{i}", shards=1)
                    for k, v in drain(r, q, args.n, payload).items():
                        seen.setdefault((name, k), []).append(v)
            version = server_version(r)
        finally:
            drop_prefix(r, PREFIX)
            client.close()
            r.close()
    rows: list[tuple[str, ...]] = [("payload: part", "median us a message", "range")]
    for (name, part), values in seen.items():
        rows.append(
            (
                f"{name}: {part}",
                f"{statistics.median(values):.2f}",
                f"{min(values):.2f}-{max(values):.2f}",
            )
        )
    print(f"server {version}, {args.n:,} messages a drain, pop(100) + ack_many, one shard")
    print(table(rows))


if __name__ == "__main__":
    main()
