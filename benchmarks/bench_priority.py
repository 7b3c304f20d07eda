"""What priority across shards costs a pop and a consumer, against the raw drain in the
same run (issue 25, item 12).

    python -m benchmarks.bench_priority [--url redis://...] [--n 20000] [--repeats 3]
                                        [--only TEXT]

Cases, on 4 shards, each the median of --repeats runs:
  raw drain            bench_core's baseline: a bare Lua pop of 100 + pipelined acks
  drain, priority 0    q.pop(100) + q.ack_many until empty (every message priority 0,
                       the default: the common case, which must cost what it did)
  drain, priority 5    the same, every message priority 5 (equal, but not 0)
  drain, 0..9          the same, priorities 0..9 at random
  pop(1), priority 0   q.pop(1) + q.ack one message at a time (--n / 10 messages)
  pop(1), priority 5   the same, every message priority 5 (equal, but not 0)
  pop(1), 0..9         the same, priorities 0..9 at random
  empty pop            q.pop(1) on an empty queue (calls/s)
  consumer, priority 0 a no-op consumer, concurrency 4, batch 100: start to last message
  consumer, priority 5 the same, every message priority 5
  consumer, 0..9       the same, priorities 0..9 at random
  ordered consumer     bench_consumer's ordered case (8 shards, 64 keys, batch 10,
                       concurrency 4; --n / 10 messages), which takes no priority
Each case also counts its round trips (requests sent: a script call, a command or a
pipeline) per message (per call for the empty pop): unlike a rate on a shared machine,
that count does not move with the load. The tree to measure is the one on PYTHONPATH:
run it as a file to compare trees (``PYTHONPATH=<tree> python benchmarks/bench_priority.py``).
"""

from __future__ import annotations

import random
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import redis

sys.path.append(str(Path(__file__).resolve().parent.parent))  # run as a file, too

import dynoq
from benchmarks.bench_core import raw_bulk_push, raw_drain
from benchmarks.common import drop_prefix, median, parser, server_url, table

SHARDS = 4


TRIPS: list[int] = [0]  # requests sent by the client being measured (all its threads)
LOCK = threading.Lock()


def fresh(url: str) -> dynoq.Client:
    client = dynoq.connect(url, prefix=f"bp-{uuid.uuid4().hex[:8]}")
    run = client.backend.run
    inside = threading.local()  # a batch of one call runs that call: one trip, not two

    def counted(request: object) -> object:
        depth = getattr(inside, "depth", 0)
        if depth == 0:
            with LOCK:
                TRIPS[0] += 1
        inside.depth = depth + 1
        try:
            return run(request)  # type: ignore[arg-type]
        finally:
            inside.depth = depth

    client.backend.run = counted  # type: ignore[method-assign]
    return client


def measured(n: int, fn: Callable[[], object]) -> tuple[float, float]:
    """(items per second, round trips per item) of one run of ``fn`` over ``n`` items."""
    TRIPS[0] = 0
    t0 = time.perf_counter()
    fn()
    return n / (time.perf_counter() - t0), TRIPS[0] / n


def cleanup(client: dynoq.Client) -> None:
    drop_prefix(client.redis, client.prefix + ":")
    client.close()


def fill(q: dynoq.Queue, n: int, priorities: str) -> None:
    rng = random.Random(7)
    body = "x" * 100
    for i in range(0, n, 5000):
        if priorities == "0":
            q.push_many([body] * min(5000, n - i))
        else:
            q.push_many(
                [
                    dynoq.Message(body, priority=5 if priorities == "5" else rng.randrange(10))
                    for _ in range(min(5000, n - i))
                ]
            )


def raw(url: str, n: int) -> tuple[float, float]:
    r = redis.Redis.from_url(url)
    try:
        drop_prefix(r, "raw:")
        raw_bulk_push(r, n, b"x" * 100)
        t0 = time.perf_counter()
        raw_drain(r)
        return n / (time.perf_counter() - t0), 2 / 100  # a pop and an ack pipeline per 100
    finally:
        drop_prefix(r, "raw:")
        r.close()


def drain(url: str, n: int, priorities: str) -> tuple[float, float]:
    client = fresh(url)
    try:
        q = client.queue("d", shards=SHARDS)
        fill(q, n, priorities)

        def run() -> None:
            done = 0
            while done < n:
                done += q.ack_many(q.pop(100))

        return measured(n, run)
    finally:
        cleanup(client)


def one_by_one(url: str, n: int, priorities: str) -> tuple[float, float]:
    client = fresh(url)
    try:
        q = client.queue("o", shards=SHARDS)
        fill(q, n, priorities)

        def run() -> None:
            for _ in range(n):
                [m] = q.pop(1)
                q.ack(m)

        return measured(n, run)
    finally:
        cleanup(client)


def empty(url: str, n: int) -> tuple[float, float]:
    client = fresh(url)
    try:
        q = client.queue("e", shards=SHARDS)
        q.pop(1)

        def run() -> None:
            for _ in range(n):
                q.pop(1)

        return measured(n, run)
    finally:
        cleanup(client)


def consume(url: str, n: int, priorities: str) -> tuple[float, float]:
    client = fresh(url)
    try:
        q = client.queue("c", shards=SHARDS)
        fill(q, n, priorities)
        c = client.consumer(q, lambda m: None, concurrency=4, batch_size=100)

        def run() -> None:
            c.start()
            while c.stats().handled < n:
                time.sleep(0.002)

        try:
            return measured(n, run)
        finally:
            c.stop()
    finally:
        cleanup(client)


def consume_ordered(url: str, n: int) -> tuple[float, float]:
    """bench_consumer's ordered case: 8 shards, 64 keys, batch 10, concurrency 4."""
    client = fresh(url)
    try:
        q = client.queue("k", shards=8, ordered=True)
        for i in range(0, n, 5000):
            q.push_many(
                [dynoq.Message("x" * 100, key=f"k{j % 64}") for j in range(i, min(i + 5000, n))]
            )
        c = client.consumer(q, lambda m: None, concurrency=4, batch_size=10)

        def run() -> None:
            c.start()
            while c.stats().handled < n:
                time.sleep(0.002)

        try:
            return measured(n, run)
        finally:
            c.stop()
    finally:
        cleanup(client)


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--n", type=int, default=20_000)
    p.add_argument(
        "--only",
        default="",
        metavar="TEXT",
        help="run only the cases whose name holds TEXT (and the raw drain)",
    )
    args = p.parse_args()
    n, small = args.n, max(args.n // 10, 100)
    cases = {
        "raw drain": lambda u: raw(u, n),
        "drain, priority 0": lambda u: drain(u, n, "0"),
        "drain, priority 5": lambda u: drain(u, n, "5"),
        "drain, 0..9": lambda u: drain(u, n, "mixed"),
        "pop(1), priority 0": lambda u: one_by_one(u, small, "0"),
        "pop(1), priority 5": lambda u: one_by_one(u, small, "5"),
        "pop(1), 0..9": lambda u: one_by_one(u, small, "mixed"),
        "empty pop (calls/s)": lambda u: empty(u, small),
        "consumer, priority 0": lambda u: consume(u, n, "0"),
        "consumer, priority 5": lambda u: consume(u, n, "5"),
        "consumer, 0..9": lambda u: consume(u, n, "mixed"),
        "ordered consumer": lambda u: consume_ordered(u, small),
    }
    cases = {k: f for k, f in cases.items() if args.only in k or k == "raw drain"}
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in cases}
    with server_url(args.url) as url:
        for _ in range(args.repeats):
            for name, fn in cases.items():
                results[name].append(fn(url))
    base = median([r for r, _ in results["raw drain"]])
    rows = [("case", "msgs/s (median)", "vs raw drain", "round trips / msg", "runs")]
    for name, values in results.items():
        rate = median([r for r, _ in values])
        rows.append(
            (
                name,
                f"{rate:,.0f}",
                f"{rate / base:.2f}x",
                f"{median([t for _, t in values]):.3f}",
                " ".join(f"{r:,.0f}" for r, _ in values),
            )
        )
    print(
        f"dynoq from {Path(dynoq.__file__).parent.parent}, n={n}, {SHARDS} shards, "
        f"{args.repeats} repeats"
    )
    print(table(rows))


if __name__ == "__main__":
    main()
