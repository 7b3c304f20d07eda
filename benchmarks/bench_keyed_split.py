"""Server time of a message-group queue's pop and ack, split, beside an unordered queue's,
in one run.

    python -m benchmarks.bench_keyed_split [--url redis://...] [--keys 20000] [--repeats 3]

  pop, ack     --keys messages of one key each on one shard; pop(100) until empty, then
               ack_many of each batch: the server main thread's CPU (INFO cpu) over each
               phase, µs a message
  drain        a default consumer (concurrency 4) of 10,000 keys x 10 on 4 shards: the
               server's and this process's CPU over the drain, µs a message, and its rate
Keyed and unordered alternate within each round; each figure is the median of --repeats.
"""

from __future__ import annotations

import resource
import time

import redis

import dynoq
from benchmarks.bench_groups import _queue, cleanup, fill, fresh
from benchmarks.common import median, parser, server_url, server_version, table


def server_cpu(r: redis.Redis) -> float:
    info = r.info("cpu")
    return float(info["used_cpu_sys_main_thread"]) + float(info["used_cpu_user_main_thread"])


def own_cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def split(url: str, r: redis.Redis, keyed: bool, keys: int) -> tuple[float, float]:
    """µs of server CPU a message: pop(100) until empty, then ack_many of each batch."""
    client = fresh(url)
    try:
        q = client.queue("g", shards=1, ordered="key" if keyed else False)
        for i in range(0, keys, 5000):
            q.push_many([dynoq.Message({"i": 0}, key=f"key-{k}") for k in range(i, i + 5000)])
        batches = []
        start = server_cpu(r)
        while got := q.pop(100):
            batches.append(got)
        popped = server_cpu(r)
        for batch in batches:
            q.ack_many(batch)
        acked = server_cpu(r)
        n = sum(len(b) for b in batches)
        return (popped - start) / n * 1e6, (acked - popped) / n * 1e6
    finally:
        cleanup(client)


def drain(url: str, r: redis.Redis, keyed: bool) -> tuple[float, float, float]:
    """(msgs/s, server µs, client µs) of a default consumer draining 10,000 keys x 10."""
    client = fresh(url)
    try:
        q = _queue(client, keyed)
        fill(q, 10_000, 10)
        n = 100_000
        s0, c0, t0 = server_cpu(r), own_cpu(), time.perf_counter()
        c = client.consumer(q, lambda m: None, concurrency=4)
        c.start()
        while c.stats().handled < n:
            time.sleep(0.005)
        t1 = time.perf_counter()
        s1, c1 = server_cpu(r), own_cpu()
        c.stop()
        return n / (t1 - t0), (s1 - s0) / n * 1e6, (c1 - c0) / n * 1e6
    finally:
        cleanup(client)


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--keys", type=int, default=20_000)
    args = p.parse_args()
    got: dict[str, list[float]] = {}
    with server_url(args.url) as url:
        r = redis.Redis.from_url(url)
        version = server_version(r)
        for _ in range(args.repeats):
            for keyed in (False, True):
                side = "keyed" if keyed else "unordered"
                pop, ack = split(url, r, keyed, args.keys)
                rate, srv, cli = drain(url, r, keyed)
                for name, value in (
                    ("pop(100), server µs a message", pop),
                    ("ack_many, server µs a message", ack),
                    ("default consumer drain, msgs/s", rate),
                    ("drain, server µs a message", srv),
                    ("drain, client µs a message", cli),
                ):
                    got.setdefault(f"{name}|{side}", []).append(value)
        r.close()
    rows: list[tuple[str, ...]] = [("measure", "unordered", "keyed", "ratio")]
    for name in dict.fromkeys(k.split("|")[0] for k in got):
        a, b = median(got[f"{name}|unordered"]), median(got[f"{name}|keyed"])
        rows.append((name, f"{a:,.2f}", f"{b:,.2f}", f"{b / a:.2f}x"))
    print(f"server {version}, medians of {args.repeats}")
    print(table(rows))


if __name__ == "__main__":
    main()
