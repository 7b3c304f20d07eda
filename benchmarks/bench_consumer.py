"""Consumer throughput and failover, against the bare core loop in the same run.

    python -m benchmarks.bench_consumer [--url redis://...] [--n 20000] [--repeats 3]

  raw drain     bench_core's baseline: a bare Lua pop of 100 + pipelined ZREM/HDEL acks
  bare loop     q.pop(100) + q.ack_many(...) in one thread (the core, no consumer)
  default       a no-op-handler consumer with its default settings, each round against
                a raw drain of its own (the median of the rounds' ratios)
  concurrent    a no-op-handler consumer, batch 100, concurrency 1 and 4 (ratio to raw);
                "steady" times first to last handler call, without start-up (joining
                the group, the first rebalance, starting threads)
  ordered       8 shards, 64 keys, batch 10, concurrency 4: one consumer, then two
  failover      a consumer process is SIGKILLed; seconds until the survivor holds all
                shards (goal: lease_ttl + one heartbeat, well under lease_ttl +
                rebalance_interval)
Every figure is the median of --repeats runs.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid

import redis

import dynoq
from benchmarks.bench_core import raw_bulk_push, raw_drain
from benchmarks.common import drop_prefix, median, parser, server_url, table

LEASE_TTL = 2.0
REBALANCE = 20.0


def fresh(url: str) -> dynoq.Client:
    return dynoq.connect(url, prefix=f"bc-{uuid.uuid4().hex[:8]}")


def cleanup(client: dynoq.Client) -> None:
    keys = list(client.redis.scan_iter(match=f"{client.prefix}:*", count=1000))
    for i in range(0, len(keys), 1000):
        client.redis.delete(*keys[i : i + 1000])
    client.close()


def fill(q: dynoq.Queue, n: int, *, keys: int = 0) -> None:
    body = "x" * 100
    items = [dynoq.Message(body, key=f"k{i % keys}") if keys else body for i in range(n)]
    for i in range(0, n, 5000):
        q.push_many(items[i : i + 5000])


def bare(url: str, n: int) -> float:
    client = fresh(url)
    try:
        q = client.queue("b", shards=4)
        fill(q, n)
        t0 = time.perf_counter()
        done = 0
        while done < n:
            msgs = q.pop(100)
            done += q.ack_many(msgs)
        return n / (time.perf_counter() - t0)
    finally:
        cleanup(client)


def raw(url: str, n: int) -> float:
    r = redis.Redis.from_url(url)
    try:
        drop_prefix(r, "raw:")
        raw_bulk_push(r, n, b"x" * 100)
        t0 = time.perf_counter()
        raw_drain(r)
        return n / (time.perf_counter() - t0)
    finally:
        drop_prefix(r, "raw:")
        r.close()


def consume(
    url: str, n: int, *, consumers: int = 1, ordered: bool = False, **options: object
) -> tuple[float, float]:
    """(msgs/s from start() to the last message, msgs/s from first to last handler call)."""
    client = fresh(url)
    calls: list[float] = []

    def handler(m: dynoq.Message) -> None:
        calls.append(time.perf_counter())  # list.append is atomic: safe across threads

    try:
        q = client.queue("c", shards=8 if ordered else 4, ordered=ordered)
        fill(q, n, keys=64 if ordered else 0)
        cs = [
            client.consumer(
                q, handler, lease_ttl=LEASE_TTL, rebalance_interval=REBALANCE, **options
            )
            for _ in range(consumers)
        ]
        t0 = time.perf_counter()
        for c in cs:
            c.start()
        while sum(c.stats().handled for c in cs) < n:
            time.sleep(0.002)
        elapsed = time.perf_counter() - t0
        for c in cs:
            c.stop()
        return n / elapsed, (n - 1) / (max(calls) - min(calls))
    finally:
        cleanup(client)


def failover(url: str) -> float:
    client = fresh(url)
    q = client.queue("f", shards=8, ordered=True)
    child = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.bench_consumer", "--child", url, client.prefix, "f"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "started"
        c = client.consumer(
            q,
            lambda m: None,
            lease_ttl=LEASE_TTL,
            rebalance_interval=REBALANCE,
            instance_id="zz-survivor",
        ).start()
        while len(c.assignment) != 4:
            time.sleep(0.005)
        child.send_signal(signal.SIGKILL)
        t0 = time.perf_counter()
        while len(c.assignment) != 8:
            time.sleep(0.005)
        took = time.perf_counter() - t0
        c.stop()
        return took
    finally:
        child.kill()
        child.wait()
        if child.stdout:
            child.stdout.close()
        cleanup(client)


def child(url: str, prefix: str, queue: str) -> None:
    client = dynoq.connect(url, prefix=prefix)
    c = client.consumer(
        client.queue(queue),
        lambda m: None,
        lease_ttl=LEASE_TTL,
        rebalance_interval=REBALANCE,
        instance_id="aa-victim",
    ).start()
    print("started", flush=True)
    c.run()


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child(*sys.argv[2:5])
        return
    p = parser(__doc__ or "")
    p.add_argument("--n", type=int, default=20000)
    args = p.parse_args()
    n, reps = args.n, args.repeats
    with server_url(args.url) as url:
        rows: list[tuple[str, ...]] = [
            ("case", "msgs/s (median)", "steady (median)", "vs raw drain", "steady vs raw")
        ]
        raws, bares = [], []
        for _ in range(reps):  # interleaved: both see the same machine
            raws.append(raw(url, n))
            bares.append(bare(url, n))
        base = median(raws)
        rows.append(("raw drain: Lua pop(100) + pipelined acks", f"{base:,.0f}", "-", "1.00x", "-"))
        b = median(bares)
        rows.append(("bare loop: pop(100) + ack_many", f"{b:,.0f}", "-", f"{b / base:.2f}x", "-"))

        def add(name: str, runs: list[tuple[float, float]]) -> None:
            whole, steady = median([w for w, _ in runs]), median([s for _, s in runs])
            rows.append(
                (
                    name,
                    f"{whole:,.0f}",
                    f"{steady:,.0f}",
                    f"{whole / base:.2f}x",
                    f"{steady / base:.2f}x",
                )
            )

        # The consumer as it comes (batch_size "auto", concurrency 4), each round right
        # after a raw drain of its own: the ratio is the median of the rounds' ratios.
        pairs = [(raw(url, n), consume(url, n)) for _ in range(reps)]
        whole = median([c[0] for _, c in pairs])
        steady = median([c[1] for _, c in pairs])
        rows.append(
            (
                "concurrent consumer, default settings (batch auto, concurrency 4)",
                f"{whole:,.0f}",
                f"{steady:,.0f}",
                f"{median([c[0] / r for r, c in pairs]):.2f}x",
                f"{median([c[1] / r for r, c in pairs]):.2f}x",
            )
        )
        for conc in (1, 4):
            add(
                f"concurrent consumer, batch 100, concurrency {conc}",
                [consume(url, n, batch_size=100, concurrency=conc) for _ in range(reps)],
            )
        for k in (1, 2):
            add(
                f"ordered, 8 shards, batch 10, {k} consumer(s)",
                [
                    consume(url, n // 2, consumers=k, ordered=True, batch_size=10, concurrency=4)
                    for _ in range(reps)
                ],
            )
        took = median([failover(url) for _ in range(reps)])
        rows.append(
            (
                f"failover after SIGKILL (lease_ttl {LEASE_TTL:g} s, rebalance {REBALANCE:g} s)",
                f"{took:.2f} s",
                "-",
                "-",
                "-",
            )
        )
        print(table(rows))


if __name__ == "__main__":
    main()
