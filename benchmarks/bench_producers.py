"""Many producers on one client (group commit) against push_many, in one run.

    python -m benchmarks.bench_producers [--url redis://...] [--n 20000] [--repeats 3]

  push_many        the queue's batch push, chunks of 1,000 (the baseline: one call a shard)
  64 threads       one sync client, 64 threads each pushing single messages (q.push)
  256 tasks        one asyncio client, 256 tasks each pushing single messages
  lone push p50    one thread pushing one message at a time: q.push (through the group
                   commit) against q.push as before it (the same queue opened again, its
                   single pushes sent by backend.run alone), alternating in slices of
                   200, median latency (µs)
Rounds interleave every measure; each figure is the median of --repeats rounds, and each
ratio is taken within a round, then the median of those.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import threading
import time

import dynoq
import dynoq.asyncio
from benchmarks.common import drop_prefix, median, parser, server_url, server_version, table

SLICE = 200


def threads(q: dynoq.Queue, n: int, workers: int, payload: bytes) -> float:
    each = n // workers
    start = threading.Barrier(workers + 1)

    def work() -> None:
        start.wait()
        for _ in range(each):
            q.push(payload)

    pool = [threading.Thread(target=work) for _ in range(workers)]
    for t in pool:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in pool:
        t.join()
    return each * workers / (time.perf_counter() - t0)


async def tasks(url: str, name: str, n: int, workers: int, payload: bytes) -> float:
    client = dynoq.asyncio.connect(url, prefix="bp")
    try:
        q = await client.queue(name)
        await q.push(payload)  # connected, scripts loaded
        each = n // workers

        async def work() -> None:
            for _ in range(each):
                await q.push(payload)

        t0 = time.perf_counter()
        await asyncio.gather(*(work() for _ in range(workers)))
        return each * workers / (time.perf_counter() - t0)
    finally:
        await client.close()


def lone(q: dynoq.Queue, before: dynoq.Queue, n: int, payload: bytes) -> tuple[float, float]:
    """p50 µs of a lone q.push, and of the same push as before group commit."""
    new: list[float] = []
    old: list[float] = []
    before.ops.combines = lambda: False  # type: ignore[method-assign]
    for _ in range(max(1, n // (2 * SLICE))):
        for queue, times in ((q, new), (before, old)):
            for _ in range(SLICE):
                t0 = time.perf_counter()
                queue.push(payload)
                times.append(time.perf_counter() - t0)
    return statistics.median(new) * 1e6, statistics.median(old) * 1e6


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--n", type=int, default=20_000)
    p.add_argument("--lone-n", type=int, default=4_000)
    args = p.parse_args()
    payload = os.urandom(50).hex().encode()
    runs: dict[str, list[float]] = {
        k: [] for k in ("push_many", "64 threads", "256 tasks", "lone new", "lone old")
    }
    with server_url(args.url) as url:
        client = dynoq.connect(url, prefix="bp")
        r = client.redis
        for rep in range(args.repeats):
            drop_prefix(r, "bp:")
            q = client.queue(f"p{rep}")
            q.push(payload)
            t0 = time.perf_counter()
            for i in range(0, args.n, 1000):
                q.push_many([payload] * min(1000, args.n - i))
            runs["push_many"].append(args.n / (time.perf_counter() - t0))
            runs["64 threads"].append(threads(q, args.n, 64, payload))
            runs["256 tasks"].append(asyncio.run(tasks(url, f"p{rep}", args.n, 256, payload)))
            other = dynoq.connect(url, prefix="bp")
            new, old = lone(q, other.queue(f"p{rep}"), args.lone_n, payload)
            other.close()
            runs["lone new"].append(new)
            runs["lone old"].append(old)
        version = server_version(r)
        drop_prefix(r, "bp:")
        client.close()
    rows = [("measure", "median", "runs", "ratio (median of per-round)", "goal")]

    def ratios(a: str, b: str) -> float:
        return median([x / y for x, y in zip(runs[a], runs[b], strict=True)])

    def fmt(k: str) -> str:
        return " ".join(f"{x:,.0f}" for x in runs[k])

    rows.append(("push_many msgs/s", f"{median(runs['push_many']):,.0f}", fmt("push_many"), "", ""))
    for k in ("64 threads", "256 tasks"):
        rows.append(
            (
                f"{k} msgs/s",
                f"{median(runs[k]):,.0f}",
                fmt(k),
                f"{ratios(k, 'push_many'):.2f}x push_many",
                ">= 0.5x",
            )
        )
    rows.append(
        ("lone push p50 µs, before", f"{median(runs['lone old']):.0f}", fmt("lone old"), "", "")
    )
    rows.append(
        (
            "lone push p50 µs, group commit",
            f"{median(runs['lone new']):.0f}",
            fmt("lone new"),
            f"{ratios('lone new', 'lone old'):.3f}x before",
            "<= 1.05x",
        )
    )
    print(
        f"server {version}, {args.n} messages of {len(payload)} bytes a measure, "
        f"{args.repeats} rounds"
    )
    print(table(rows))


if __name__ == "__main__":
    main()
