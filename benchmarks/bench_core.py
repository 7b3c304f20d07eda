"""Core queue throughput against a raw redis-py baseline doing the same work, in one run.

    python -m benchmarks.bench_core [--url redis://...] [--n 50000] [--repeats 3]

Baselines (the same storage work without dynoq's semantics):
  bulk push   pipelined HSET + ZADD per message, 1,000 per round trip
  drain       a small Lua script pops 100 (ZPOPMIN + ZADD unack + HMGET), then a
              pipelined ZREM unack + HDEL acks them
  single push one EVALSHA of a Lua script doing HSET + ZADD per message
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

RAW_POP = """
local items = redis.call('ZPOPMIN', KEYS[1], ARGV[1])
local ids, unack = {}, {}
for i = 1, #items, 2 do
  ids[#ids + 1] = items[i]
  unack[#unack + 1] = ARGV[2]
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


def raw_bulk_push(r: redis.Redis, n: int, payload: bytes) -> None:
    pipe = r.pipeline(transaction=False)
    for i in range(n):
        msg_id = f"m{i}"
        pipe.hset("raw:msgs", msg_id, payload)
        pipe.zadd("raw:ready", {msg_id: i})
        if i % 1000 == 999:
            pipe.execute()
    pipe.execute()


def raw_drain(r: redis.Redis) -> int:
    pop = r.register_script(RAW_POP)
    done = 0
    while True:
        reply = pop(keys=["raw:ready", "raw:unack", "raw:msgs"], args=[100, time.time() + 60])
        if not reply:
            return done
        ids = reply[0]
        pipe = r.pipeline(transaction=False)
        pipe.zrem("raw:unack", *ids)
        pipe.hdel("raw:msgs", *ids)
        pipe.execute()
        done += len(ids)


def raw_single_push(r: redis.Redis, n: int, payload: bytes) -> None:
    push = r.register_script(RAW_PUSH)
    for i in range(n):
        push(keys=["raw:msgs", "raw:ready"], args=[f"s{i}", i, payload])


def dynoq_drain(q: dynoq.Queue) -> int:
    done = 0
    while True:
        got = q.pop(100)
        if not got:
            return done
        done += q.ack_many(got)


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--n", type=int, default=50_000)
    p.add_argument("--single-n", type=int, default=20_000,
                   help="messages for the single-push comparison")
    p.add_argument("--shards", type=int, default=4)
    args = p.parse_args()
    payload = os.urandom(50).hex().encode()  # 100 bytes
    results: dict[str, list[float]] = {k: [] for k in (
        "raw bulk push", "push_many", "raw drain", "pop(100)+ack_many",
        "raw single push", "push")}
    memory: list[float] = []
    with server_url(args.url) as url:
        r = redis.Redis.from_url(url)
        client = dynoq.connect(url, prefix="bench")
        for rep in range(args.repeats):
            drop_prefix(r, "raw:")
            drop_prefix(r, "bench:")
            q = client.queue(f"core{rep}", shards=args.shards)
            results["raw bulk push"].append(rate(args.n, lambda: raw_bulk_push(r, args.n,
                                                                              payload)))
            before = int(r.info("memory")["used_memory"])
            batch = [dynoq.Message(payload) for _ in range(args.n)]
            results["push_many"].append(rate(args.n, lambda q=q, b=batch: q.push_many(b)))
            memory.append((int(r.info("memory")["used_memory"]) - before) / args.n)
            results["raw drain"].append(rate(args.n, lambda: raw_drain(r)))
            results["pop(100)+ack_many"].append(rate(args.n, lambda q=q: dynoq_drain(q)))
            results["raw single push"].append(
                rate(args.single_n, lambda: raw_single_push(r, args.single_n, payload)))
            results["push"].append(rate(args.single_n, lambda q=q: [
                q.push(payload) for _ in range(args.single_n)]))
            q.clear()
        version = server_version(r)
        clean_up(r, client, "raw:", "bench:")
    med = {k: median(v) for k, v in results.items()}
    rows = [("operation", "median msgs/s", "runs", "ratio vs raw", "goal")]
    for name, base, goal in (("push_many", "raw bulk push", 0.8),
                             ("pop(100)+ack_many", "raw drain", 0.9),
                             ("push", "raw single push", 0.9)):
        rows.append((base, f"{med[base]:,.0f}", " ".join(f"{x:,.0f}" for x in results[base]),
                     "", ""))
        rows.append((name, f"{med[name]:,.0f}", " ".join(f"{x:,.0f}" for x in results[name]),
                     f"{med[name] / med[base]:.2f}x", f">= {goal}x"))
    print(f"server {version}, {args.n} messages of {len(payload)} bytes, "
          f"{args.shards} shards, {args.repeats} repeats")
    print(table(rows))
    print(f"Redis memory per queued message: {median(memory):.0f} bytes (used_memory delta; "
          "python -m benchmarks.bench_memory compares it with the raw layout)")


if __name__ == "__main__":
    main()
