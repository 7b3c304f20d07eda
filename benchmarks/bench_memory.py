"""Redis memory per queued message: dynoq against the raw layout, in one run.

    python -m benchmarks.bench_memory [--url redis://...] [--n 1000000] [--sizes 100,1024]

Raw layout: HSET <msgs> <id> <payload> + ZADD <ready> <seq> <id> (pipelined), the least a
delay queue can store. dynoq: push_many of the same ids and payloads into a one-shard
queue (its record adds the enqueue time, delay and priority, and msgpack framing).
Bytes per message = used_memory delta / n, with the encodings Redis chose reported.
Each size is measured --repeats times (raw and dynoq alternate); medians are shown.
"""

from __future__ import annotations

import os
import time
from typing import Any

import redis

import dynoq
from benchmarks.common import drop_prefix, median, parser, server_url, server_version, table

CHUNK = 10_000


def used(r: redis.Redis) -> int:
    """used_memory once deleted keys are really freed (DEL frees big keys lazily, in a
    background thread, on Valkey 8 and Redis with lazyfree-lazy-user-del)."""
    while int(r.info("memory").get("lazyfree_pending_objects", 0)):
        time.sleep(0.05)
    return int(r.info("memory")["used_memory"])


def raw_fill(r: redis.Redis, n: int, payload: bytes) -> tuple[int, str, str]:
    before = used(r)
    pipe = r.pipeline(transaction=False)
    for i in range(n):
        pipe.hset("rawmem:msgs", f"m{i}", payload)
        pipe.zadd("rawmem:ready", {f"m{i}": i})
        if i % 1000 == 999:
            pipe.execute()
    pipe.execute()
    grown = used(r) - before
    return grown, r.object("encoding", "rawmem:msgs"), r.object("encoding", "rawmem:ready")


def dynoq_fill(
    client: dynoq.Client, r: redis.Redis, n: int, payload: bytes, name: str
) -> tuple[int, str, str]:
    q = client.queue(name, shards=1)
    before = used(r)
    for start in range(0, n, CHUNK):
        q.push_many(
            [dynoq.Message(payload, id=f"m{i}") for i in range(start, min(start + CHUNK, n))]
        )
    grown = used(r) - before
    keys = q.ops.shard_keys[0]
    return grown, r.object("encoding", keys.msgs), r.object("encoding", keys.ready)


def enc(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--sizes", default="100,1024", help="payload sizes in bytes")
    args = p.parse_args()
    rows = [
        (
            "payload",
            "raw B/msg",
            "dynoq B/msg",
            "ratio",
            "goal",
            "runs (ratio)",
            "encodings raw / dynoq (hash, zset)",
        )
    ]
    with server_url(args.url) as url:
        r = redis.Redis.from_url(url)
        client = dynoq.connect(url, prefix="benchmem")
        version = server_version(r)
        for size in (int(s) for s in args.sizes.split(",")):
            payload = os.urandom(size)
            raw_b, dyn_b, ratios, encodings = [], [], [], ""
            for rep in range(args.repeats):
                drop_prefix(r, "rawmem:")
                drop_prefix(r, "benchmem:")
                raw, rh, rz = raw_fill(r, args.n, payload)
                drop_prefix(r, "rawmem:")
                dyn, dh, dz = dynoq_fill(client, r, args.n, payload, f"mem{size}-{rep}")
                drop_prefix(r, "benchmem:")
                raw_b.append(raw / args.n)
                dyn_b.append(dyn / args.n)
                ratios.append(dyn / raw)
                encodings = f"{enc(rh)}, {enc(rz)} / {enc(dh)}, {enc(dz)}"
            rows.append(
                (
                    f"{size} B",
                    f"{median(raw_b):.0f}",
                    f"{median(dyn_b):.0f}",
                    f"{median(ratios):.3f}x",
                    "<= 1.10x",
                    " ".join(f"{x:.3f}" for x in ratios),
                    encodings,
                )
            )
        client.close()
        r.close()
    print(f"server {version}, {args.n:,} messages per run, {args.repeats} repeats")
    print(table(rows))


if __name__ == "__main__":
    main()
