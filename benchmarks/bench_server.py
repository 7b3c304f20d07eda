"""Server and client CPU a message costs, dynoq against the raw layout, in one run.

    python -m benchmarks.bench_server [--url redis://...] [--n 20000] [--repeats 3]

Redis runs commands on one thread, so the server CPU a message costs caps every client of
one server. Each side does push + pop + ack of --n messages of 100 bytes on one shard:
  raw          pipelined HSET + ZADD (1,000 a round trip), then bench_core's raw drain (a
               Lua pop of 100 at the server's TIME + 60 s, a pipelined ZREM + HDEL ack)
  delay queue  push_many (1,000 a call), then pop(100) + ack_many
  ordered      the same on an ordered queue (ordered=True; one key, so one shard's order)
  keyed        the same on a message-group queue (ordered="key"), its messages spread
               over 1,000 keys (a pop of 100 takes the heads of 100 keys)
  raw groups   the raw layout of a message-group queue (benchmarks/raw_groups.py: a list
               of ids per key, the keys with a deliverable head, one delivery in flight
               per key), the same 1,000 keys: "keyed" is compared with it, and also with
               "raw" (which keeps no order per key)
  single push  one message a call: q.push against one raw EVALSHA (HSET + ZADD)
Server CPU: the delta of the server's main thread CPU (INFO cpu, user + sys) over the
work, in µs a message; "in scripts" is what INFO commandstats gives EVALSHA (the rest:
the plain commands, reading, parsing and writing replies). Client CPU:
this process's CPU time over the work. Sides alternate within each round; each figure is
the median of --repeats rounds, and each ratio the median of the per-round ratios.

The throughput model: a message costs c µs of client CPU and s µs of server CPU, so N
client cores and M masters (shards spread over them) move at most
min(N / c, M / s) x 1e6 messages a second.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import redis

import dynoq
from benchmarks.bench_core import RAW_PUSH, raw_bulk_push, raw_drain
from benchmarks.common import drop_prefix, median, parser, server_url, server_version, table
from benchmarks.raw_groups import RawGroups
from dynoq._core.codec import new_id


def cpu(r: redis.Redis) -> tuple[float, float]:
    """The server main thread's CPU seconds, and the µs commandstats gives EVALSHA."""
    info = r.info("everything")
    main = info.get("used_cpu_user_main_thread")
    total = (
        float(main) + float(info["used_cpu_sys_main_thread"])
        if main is not None
        else float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    )
    scripts = info.get("cmdstat_evalsha")
    return total, float(scripts["usec"]) if isinstance(scripts, dict) else 0.0


def measure(r: redis.Redis, n: int, work: Callable[[], Any]) -> tuple[float, float, float, float]:
    """(server µs, script µs, client µs, wall µs) a message of ``work``."""
    s0, u0 = cpu(r)
    c0, w0 = time.process_time(), time.perf_counter()
    work()
    c1, w1 = time.process_time(), time.perf_counter()
    s1, u1 = cpu(r)
    return ((s1 - s0) * 1e6 / n, (u1 - u0) / n, (c1 - c0) * 1e6 / n, (w1 - w0) * 1e6 / n)


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--n", type=int, default=20_000)
    p.add_argument("--single-n", type=int, default=5_000)
    args = p.parse_args()
    payload = os.urandom(50).hex().encode()
    n = args.n
    names = ("raw", "delay queue", "ordered", "keyed", "raw groups", "raw single", "push")
    runs: dict[str, list[tuple[float, float, float, float]]] = {k: [] for k in names}
    with server_url(args.url) as url:
        r = redis.Redis.from_url(url)
        client = dynoq.connect(url, prefix="bs")
        push_script = r.register_script(RAW_PUSH)
        for rep in range(args.repeats):
            drop_prefix(r, "raw:")
            drop_prefix(r, "bs:")
            delay = client.queue(f"d{rep}", shards=1)
            ordered = client.queue(f"o{rep}", shards=1, ordered=True)
            keyed = client.queue(f"k{rep}", shards=1, ordered="key")
            single = client.queue(f"s{rep}", shards=1)
            for q in (delay, ordered, keyed, single):
                q.push("warm", key="k0")
                q.ack_many(q.pop(1))

            def raw() -> None:
                raw_bulk_push(r, n, payload)
                raw_drain(r)

            def through(q: dynoq.Queue, key: str | None, keys: int = 1) -> Callable[[], None]:
                def go() -> None:
                    for i in range(0, n, 1000):
                        q.push_many(
                            [
                                dynoq.Message(payload, key=key and f"{key}{j % keys}")
                                for j in range(i, min(i + 1000, n))
                            ]
                        )
                    while got := q.pop(100):
                        q.ack_many(got)

                return go

            runs["raw"].append(measure(r, n, raw))
            runs["delay queue"].append(measure(r, n, through(delay, None)))
            runs["ordered"].append(measure(r, n, through(ordered, "k")))
            runs["keyed"].append(measure(r, n, through(keyed, "k", 1000)))
            groups = RawGroups(r, f"raw:g{rep}")

            def raw_groups(g: RawGroups = groups) -> None:
                for i in range(0, n, 1000):
                    g.push(
                        [(f"k{j % 1000}", new_id(), payload) for j in range(i, min(i + 1000, n))]
                    )
                g.drain()

            runs["raw groups"].append(measure(r, n, raw_groups))
            groups.drop()
            runs["raw single"].append(
                measure(
                    r,
                    args.single_n,
                    lambda: [
                        push_script(keys=["raw:msgs", "raw:ready"], args=[new_id(), i, payload])
                        for i in range(args.single_n)
                    ],
                )
            )
            runs["push"].append(
                measure(
                    r,
                    args.single_n,
                    lambda q=single: [q.push(payload) for _ in range(args.single_n)],
                )
            )
        version = server_version(r)
        drop_prefix(r, "raw:")
        drop_prefix(r, "bs:")
        client.close()
        r.close()

    def med(k: str, i: int) -> float:
        return median([x[i] for x in runs[k]])

    def ratio(k: str, base: str, i: int) -> str:
        return f"{median([a[i] / b[i] for a, b in zip(runs[k], runs[base], strict=True)]):.2f}x"

    rows = [
        (
            "work (µs a message)",
            "server CPU",
            "runs",
            "server ratio",
            "in scripts",
            "client CPU",
            "client ratio",
            "wall",
            "msgs/s ratio",
        )
    ]
    for label, k, base in (
        ("raw", "raw", "raw"),
        ("delay queue", "delay queue", "raw"),
        ("ordered", "ordered", "raw"),
        ("keyed", "keyed", "raw"),
        ("raw groups", "raw groups", "raw"),
        ("keyed vs raw groups", "keyed", "raw groups"),
        ("raw single", "raw single", "raw single"),
        ("push", "push", "raw single"),
    ):
        rows.append(
            (
                label,
                f"{med(k, 0):.2f}",
                " ".join(f"{x[0]:.2f}" for x in runs[k]),
                "" if k == base else ratio(k, base, 0),
                f"{med(k, 1):.2f}",
                f"{med(k, 2):.2f}",
                "" if k == base else ratio(k, base, 2),
                f"{med(k, 3):.2f}",
                "" if k == base else ratio(base, k, 3),
            )
        )
    print(
        f"server {version}, {n} messages of {len(payload)} bytes a round (single push: "
        f"{args.single_n}), one shard, {args.repeats} rounds"
    )
    print(table(rows))
    print()
    model = [
        ("work", "client µs", "server µs", "N=1 M=1", "N=2 M=1", "N=4 M=1", "N=4 M=3", "N=8 M=3")
    ]
    for k in ("raw", "delay queue", "ordered", "keyed", "raw groups", "push"):
        c, s = med(k, 2), med(k, 0)
        model.append(
            (
                k,
                f"{c:.2f}",
                f"{s:.2f}",
                *(
                    f"{min(cores / c, masters / s) * 1e6:,.0f}"
                    for cores, masters in ((1, 1), (2, 1), (4, 1), (4, 3), (8, 3))
                ),
            )
        )
    print("throughput model, msgs/s = min(N / client µs, M / server µs) x 1e6")
    print(table(model))


if __name__ == "__main__":
    main()
