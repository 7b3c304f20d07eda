"""Core queue throughput against a raw redis-py baseline doing the same work, in one run.

    python -m benchmarks.bench_core [--url redis://...] [--n 50000] [--repeats 3]

Baselines (the same storage work without dynoq's semantics):
  bulk push   pipelined HSET + ZADD per message, 1,000 per round trip
  drain       a small Lua script pops 100 (ZPOPMIN + ZADD unack at the server's TIME
              + 60 s + HMGET), then a pipelined ZREM unack + HDEL acks them
  single push one EVALSHA of a Lua script doing HSET + ZADD per message
Raw ids are 16 random characters, as dynoq mints them. The drain is measured on one shard
against one raw key set, both filled with --drain-n messages, raw and dynoq alternating in
slices of --slice messages within the same round (so both see the same moment of a shared,
noisy machine); each side's rate is its messages over its own summed time.
Also reports Redis memory per queued message (used_memory delta / messages).
Also reports Redis memory per queued message (used_memory delta / messages).
"""

from __future__ import annotations

import os
import time

import redis

import dynoq
from benchmarks.common import (
    clean_up,
    drop_prefix,
    median,
    parser,
    rate,
    server_url,
    server_version,
    table,
)
from dynoq._core.codec import new_id

RAW_POP = """
local t = redis.call('TIME')
local deadline = t[1] * 1000 + math.floor(t[2] / 1000) + 60000
local items = redis.call('ZPOPMIN', KEYS[1], ARGV[1])
local ids, unack = {}, {}
for i = 1, #items, 2 do
  ids[#ids + 1] = items[i]
  unack[#unack + 1] = deadline
  unack[#unack + 1] = items[i]
end
if #ids == 0 then return {} end
redis.call('ZADD', KEYS[2], unpack(unack))
return {ids, redis.call('HMGET', KEYS[3], unpack(ids))}
"""
RAW_PUSH = """
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
"""


def raw_bulk_push(r: redis.Redis, n: int, payload: bytes, prefix: str = "raw:") -> None:
    """``n`` messages with 16-character random ids (dynoq's own), 1,000 a round trip."""
    pipe = r.pipeline(transaction=False)
    for i in range(n):
        msg_id = new_id()
        pipe.hset(f"{prefix}msgs", msg_id, payload)
        pipe.zadd(f"{prefix}ready", {msg_id: i})
        if i % 1000 == 999:
            pipe.execute()
    pipe.execute()


def raw_drain(r: redis.Redis, limit: int | None = None, prefix: str = "raw:") -> int:
    """Pop 100 and ack them until the raw set is empty (or ``limit`` were done)."""
    pop = r.register_script(RAW_POP)
    keys = [f"{prefix}ready", f"{prefix}unack", f"{prefix}msgs"]
    done = 0
    while limit is None or done < limit:
        reply = pop(keys=keys, args=[100])
        if not reply:
            break
        ids = reply[0]
        pipe = r.pipeline(transaction=False)
        pipe.zrem(keys[1], *ids)
        pipe.hdel(keys[2], *ids)
        pipe.execute()
        done += len(ids)
    return done


def raw_single_push(r: redis.Redis, n: int, payload: bytes) -> None:
    push = r.register_script(RAW_PUSH)
    for i in range(n):
        push(keys=["raw:msgs", "raw:ready"], args=[new_id(), i, payload])


def dynoq_drain(q: dynoq.Queue, limit: int | None = None) -> int:
    done = 0
    while limit is None or done < limit:
        got = q.pop(100)
        if not got:
            break
        done += q.ack_many(got)
    return done


def drains(
    r: redis.Redis, q: dynoq.Queue, n: int, piece: int, payload: bytes
) -> tuple[float, float]:
    """Raw and dynoq drain rates of ``n`` messages each, alternating in slices."""
    raw_bulk_push(r, n, payload)
    for i in range(0, n, 5000):
        q.push_many([dynoq.Message(payload) for _ in range(min(5000, n - i))])
    spent = {"raw": 0.0, "dynoq": 0.0}
    done = {"raw": 0, "dynoq": 0}
    while done["raw"] < n or done["dynoq"] < n:
        for side, drain in (
            ("raw", lambda: raw_drain(r, piece)),
            ("dynoq", lambda: dynoq_drain(q, piece)),
        ):
            start = time.perf_counter()
            done[side] += drain()
            spent[side] += time.perf_counter() - start
    return done["raw"] / spent["raw"], done["dynoq"] / spent["dynoq"]


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--n", type=int, default=50_000)
    p.add_argument(
        "--single-n", type=int, default=20_000, help="messages for the single-push comparison"
    )
    p.add_argument("--shards", type=int, default=4, help="shards of the push queue")
    p.add_argument(
        "--drain-n",
        type=int,
        default=20_000,
        help="messages a round of the drain comparison (one shard)",
    )
    p.add_argument(
        "--slice",
        type=int,
        default=2_000,
        help="messages each side drains before the other takes its turn",
    )
    args = p.parse_args()
    payload = os.urandom(50).hex().encode()  # 100 bytes
    results: dict[str, list[float]] = {
        k: []
        for k in (
            "raw bulk push",
            "push_many",
            "raw drain",
            "pop(100)+ack_many",
            "raw single push",
            "push",
        )
    }
    memory: list[float] = []
    with server_url(args.url) as url:
        r = redis.Redis.from_url(url)
        client = dynoq.connect(url, prefix="bench")
        for rep in range(args.repeats):
            drop_prefix(r, "raw:")
            drop_prefix(r, "bench:")
            q = client.queue(f"core{rep}", shards=args.shards)
            results["raw bulk push"].append(rate(args.n, lambda: raw_bulk_push(r, args.n, payload)))
            before = int(r.info("memory")["used_memory"])
            batch = [dynoq.Message(payload) for _ in range(args.n)]
            results["push_many"].append(rate(args.n, lambda q=q, b=batch: q.push_many(b)))
            memory.append((int(r.info("memory")["used_memory"]) - before) / args.n)
            q.clear()
            drop_prefix(r, "raw:")
            raw_rate, dynoq_rate = drains(
                r, client.queue(f"drain{rep}", shards=1), args.drain_n, args.slice, payload
            )
            results["raw drain"].append(raw_rate)
            results["pop(100)+ack_many"].append(dynoq_rate)
            results["raw single push"].append(
                rate(args.single_n, lambda: raw_single_push(r, args.single_n, payload))
            )
            results["push"].append(
                rate(args.single_n, lambda q=q: [q.push(payload) for _ in range(args.single_n)])
            )
            q.clear()
        version = server_version(r)
        clean_up(r, client, "raw:", "bench:")
    med = {k: median(v) for k, v in results.items()}
    rows = [("operation", "median msgs/s", "runs", "ratio vs raw", "goal")]
    for name, base, goal in (
        ("push_many", "raw bulk push", 0.8),
        ("pop(100)+ack_many", "raw drain", 0.9),
        ("push", "raw single push", 0.9),
    ):
        rows.append(
            (base, f"{med[base]:,.0f}", " ".join(f"{x:,.0f}" for x in results[base]), "", "")
        )
        rows.append(
            (
                name,
                f"{med[name]:,.0f}",
                " ".join(f"{x:,.0f}" for x in results[name]),
                f"{med[name] / med[base]:.2f}x",
                f">= {goal}x",
            )
        )
    print(
        f"server {version}, {args.n} messages of {len(payload)} bytes ({args.shards} "
        f"shards) to push, {args.drain_n} a round to drain (one shard, slices of "
        f"{args.slice}), {args.repeats} repeats"
    )
    print(table(rows))
    print(
        f"Redis memory per queued message: {median(memory):.0f} bytes (used_memory delta; "
        "python -m benchmarks.bench_memory compares it with the raw layout)"
    )


if __name__ == "__main__":
    main()
