"""Sweeper benchmark: requeue throughput against a raw baseline, and idle command cost.

    python benchmarks/bench_sweeper.py                # a private embedded Valkey
    python benchmarks/bench_sweeper.py --url redis://127.0.0.1:6379/0

1. Time for one ``Sweeper.run_once()`` to requeue N expired deliveries over S shards (and
   promote them back to ready), against a baseline of raw pipelined ZRANGEBYSCORE + ZREM +
   ZADD doing the same two moves without atomicity, retry counting or kept places.
2. Commands an idle sweeper sends: INFO commandstats deltas while it sweeps Q empty
   queues. "client" counts the commands it sends (script calls, registry reads); "server"
   adds the commands the scripts run inside Redis. Only exact on a private server.

Medians of ``--runs`` runs (>= 3); a table at the end.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis

import dynoq

SCRIPT_INTERNAL = {"zrange", "time", "scard"}  # what the idle `due` script runs in Redis
MEASURING = {"info"}  # the benchmark's own reads


def expire_all(q: dynoq.Queue) -> None:
    for shard in range(q.settings.shards):
        key = q.ops.shard_keys[shard].unack
        q.backend.redis.zunionstore(key, {key: 0})  # every deadline -> 0: expired now


def deliver_all(q: dynoq.Queue, n: int) -> None:
    """Pop every message for a long visibility, then expire the deliveries at once."""
    got = 0
    while got < n:
        batch = q.pop(1000, visibility=3600)
        if not batch:
            raise RuntimeError(f"only {got} of {n} messages were deliverable")
        got += len(batch)
    expire_all(q)


def run_sweeper(client: dynoq.Client, q: dynoq.Queue, n: int) -> float:
    sweeper = client.sweeper()
    sweeper.run_once()  # registry and settings read outside the timing
    deliver_all(q, n)
    t0 = time.perf_counter()
    report = sweeper.run_once()
    elapsed = time.perf_counter() - t0
    if report.total().requeued != n:
        raise RuntimeError(f"sweeper requeued {report.total().requeued}, expected {n}")
    return elapsed


def run_baseline(client: dynoq.Client, q: dynoq.Queue, n: int) -> float:
    r = client.redis
    deliver_all(q, n)
    moved, seq = 0, 0
    t0 = time.perf_counter()
    for shard in range(q.settings.shards):
        k = q.ops.shard_keys[shard]
        for src, dst in ((k.unack, k.delayed), (k.delayed, k.ready)):
            while True:
                sec, usec = r.time()
                now = sec * 1000 + usec // 1000
                ids = r.zrangebyscore(src, "-inf", now, start=0, num=1000)
                if not ids:
                    break
                pipe = r.pipeline(transaction=False)
                pipe.zrem(src, *ids)
                if dst == k.ready:
                    pipe.zadd(dst, {i: seq + j for j, i in enumerate(ids)})
                    seq += len(ids)
                else:
                    pipe.zadd(dst, dict.fromkeys(ids, now))
                    moved += len(ids)
                pipe.execute()
    elapsed = time.perf_counter() - t0
    if moved != n:
        raise RuntimeError(f"baseline moved {moved}, expected {n}")
    return elapsed


def commandstats(r: Any) -> dict[str, int]:
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in r.info("commandstats").items()}


def idle_cost(
    client: dynoq.Client, queues: int, shards: int, interval: float, seconds: float
) -> tuple[float, float, float]:
    """(client commands, server commands) per queue per pass, and client commands/s."""
    for i in range(queues):
        client.queue(f"idle-{i}", shards=shards)
    # refresh every 10 passes, as the defaults (1 s passes, 10 s refresh) do
    sweeper = client.sweeper(interval=interval, refresh_interval=10 * interval)
    passes = [0]
    run_once = sweeper.run_once

    def counted() -> Any:
        passes[0] += 1
        return run_once()

    sweeper.run_once = counted  # type: ignore[method-assign]
    stop = threading.Event()
    thread = threading.Thread(target=sweeper.run_forever, args=(stop,))
    thread.start()
    time.sleep(2 * interval)
    before, total0, t0, p0 = (
        commandstats(client.redis),
        client.redis.info()["total_commands_processed"],
        time.monotonic(),
        passes[0],
    )
    time.sleep(seconds)
    after, total1, t1, p1 = (
        commandstats(client.redis),
        client.redis.info()["total_commands_processed"],
        time.monotonic(),
        passes[0],
    )
    stop.set()
    thread.join()
    delta = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
    sent = sum(v for k, v in delta.items() if k not in SCRIPT_INTERNAL | MEASURING)
    served = total1 - total0 - sum(v for k, v in delta.items() if k in MEASURING)
    # The window's edges may split a pass: a command or two either way, on hundreds.
    n = p1 - p0
    return sent / queues / n, served / queues / n, sent / (t1 - t0)


def median_of(runs: int, fn: Callable[[], float]) -> tuple[float, list[float]]:
    values = [fn() for _ in range(runs)]
    return statistics.median(values), values


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", help="a server to use (default: a private embedded Valkey)")
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--idle-queues", type=int, default=10)
    ap.add_argument("--idle-interval", type=float, default=0.1)
    ap.add_argument("--idle-seconds", type=float, default=3.0)
    args = ap.parse_args()
    prefix = f"bench-sweep-{uuid.uuid4().hex[:8]}"
    client = dynoq.connect(args.url or "embedded://", prefix=prefix)
    try:
        q = client.queue("bench", shards=args.shards, max_retries=1_000_000)
        for i in range(0, args.messages, 5000):
            q.push_many(list(range(i, min(i + 5000, args.messages))))
        sweep, sweep_runs = median_of(args.runs, lambda: run_sweeper(client, q, args.messages))
        base, base_runs = median_of(args.runs, lambda: run_baseline(client, q, args.messages))
        q.clear()
        client.redis.srem(f"{prefix}:queues", "bench")
        idle = [
            idle_cost(client, args.idle_queues, args.shards, args.idle_interval, args.idle_seconds)
            for _ in range(args.runs)
        ]
    finally:
        keys = list(client.redis.scan_iter(match=f"{prefix}:*", count=1000))
        for i in range(0, len(keys), 500):
            client.redis.delete(*keys[i : i + 500])
        client.close()

    def fmt(values: list[float]) -> str:
        return " ".join(f"{v:.3f}" for v in values)

    n, s = args.messages, args.shards
    sent = statistics.median(v[0] for v in idle)
    served = statistics.median(v[1] for v in idle)
    per_s = statistics.median(v[2] for v in idle)
    rows = [
        (f"sweeper: requeue+promote {n:,} expired, {s} shards", f"{sweep:.3f} s", fmt(sweep_runs)),
        ("  = deliveries per second", f"{n / sweep:,.0f}", ""),
        ("baseline: raw pipelined ZRANGEBYSCORE+ZREM+ZADD", f"{base:.3f} s", fmt(base_runs)),
        ("ratio sweeper / baseline", f"{sweep / base:.2f}x", ""),
        (
            f"idle: client commands per queue per pass ({args.idle_queues} queues x {s} shards)",
            f"{sent:.2f}",
            fmt([v[0] for v in idle]),
        ),
        (
            "idle: server commands per queue per pass (incl. in scripts)",
            f"{served:.1f}",
            fmt([v[1] for v in idle]),
        ),
        (
            f"idle: client commands per second at {args.idle_interval}s passes",
            f"{per_s:.1f}",
            fmt([v[2] for v in idle]),
        ),
    ]
    where = args.url or "embedded Valkey"
    print(f"\nbench_sweeper on {where}: medians of {args.runs} runs (redis-py {redis.__version__})")
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    print(f"{'measure'.ljust(w0)}  {'median'.rjust(w1)}  runs")
    for name, value, runs in rows:
        print(f"{name.ljust(w0)}  {value.rjust(w1)}  {runs}")


if __name__ == "__main__":
    main()
