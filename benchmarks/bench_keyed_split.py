"""Server time of a message-group queue's pop and ack, split, beside an unordered queue's,
in one run.

    python -m benchmarks.bench_keyed_split [--url redis://...] [--keys 20000] [--repeats 3]

  pop, ack     --keys messages of one key each on one shard; pop(100) until empty, then
               ack_many of each batch: the server main thread's CPU (INFO cpu) over each
               phase, µs a message
  drain        a default consumer (concurrency 4) of 10,000 keys x 10 on 4 shards: the
               server's and this process's CPU over the drain, µs a message, and its rate
The measuring is bench_server's (``measure``), the queues bench_groups'.
Keyed and unordered alternate within each round; each figure is the median of --repeats.
"""

from __future__ import annotations

import time
from typing import Any

import redis

from benchmarks.bench_groups import _queue, cleanup, fill, fresh
from benchmarks.bench_server import measure
from benchmarks.common import median, parser, server_url, server_version, table


def split(url: str, r: redis.Redis, keyed: bool, keys: int) -> tuple[float, float]:
    """µs of server CPU a message: pop(100) until empty, then ack_many of each batch."""
    client = fresh(url)
    try:
        q = client.queue("g", shards=1, ordered="key" if keyed else False)
        fill(q, keys, 1)
        batches: list[list[Any]] = []

        def pop_all() -> None:
            while got := q.pop(100):
                batches.append(got)

        pop = measure(r, keys, pop_all)[0]
        ack = measure(r, keys, lambda: [q.ack_many(b) for b in batches])[0]
        return pop, ack
    finally:
        cleanup(client)


def drain(url: str, r: redis.Redis, keyed: bool) -> tuple[float, float, float]:
    """(msgs/s, server µs, client µs) of a default consumer draining 10,000 keys x 10."""
    client = fresh(url)
    try:
        q = _queue(client, keyed)
        fill(q, 10_000, 10)
        n = 100_000
        c = client.consumer(q, lambda m: None, concurrency=4)

        def run() -> None:
            c.start()
            while c.stats().handled < n:
                time.sleep(0.005)

        server, _, client_us, wall = measure(r, n, run)
        c.stop()
        return 1e6 / wall, server, client_us
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
