"""dynoq.asyncio against the sync client and a raw redis.asyncio baseline, same run.

    python benchmarks/bench_async.py [--url redis://...] [--n 20000] [--repeats 3]

  push_many       push_many in chunks of 1000 (sync, async) vs raw redis.asyncio pipelined
                  HSET+ZADD per message, chunks of 1000
  pop+ack_many    pop(100) + ack_many (sync, async) vs raw redis.asyncio: one Lua pop of
                  100 (ZRANGEBYSCORE/ZREM/ZADD unack/HMGET) + pipelined ZREM/HDEL
  consumer        no-op handler, batch 100, concurrency 1 and 4: async vs sync consumer
Every figure is the median of --repeats runs (msgs/s).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(__file__))
import redis.asyncio as aredis
from common import median, parser, server_url, table

import dynoq
import dynoq.asyncio

BODY = "x" * 100
CHUNK = 1000
POP_LUA = """
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
if #ids == 0 then return {} end
redis.call('ZREM', KEYS[1], unpack(ids))
for _, id in ipairs(ids) do redis.call('ZADD', KEYS[2], ARGV[1] + 30000, id) end
local bodies = redis.call('HMGET', KEYS[3], unpack(ids))
local out = {}
for i, id in ipairs(ids) do out[2 * i - 1] = id; out[2 * i] = bodies[i] end
return out
"""


def prefix() -> str:
    return f"ba-{uuid.uuid4().hex[:8]}"


async def drop(url: str, pfx: str) -> None:
    r = aredis.Redis.from_url(url)
    keys = [k async for k in r.scan_iter(match=f"{pfx}*", count=1000)]
    for i in range(0, len(keys), 1000):
        await r.delete(*keys[i : i + 1000])
    await r.aclose()


# -- raw redis.asyncio ---------------------------------------------------------------------


async def raw(url: str, n: int) -> tuple[float, float]:
    pfx = prefix()
    r = aredis.Redis.from_url(url)
    pending, unack, data = f"{pfx}:pending", f"{pfx}:unack", f"{pfx}:data"
    ids = [uuid.uuid4().hex for _ in range(n)]
    t0 = time.perf_counter()
    for i in range(0, n, CHUNK):
        pipe = r.pipeline(transaction=False)
        for msg_id in ids[i : i + CHUNK]:
            pipe.hset(data, msg_id, BODY)
            pipe.zadd(pending, {msg_id: 0})
        await pipe.execute()
    push = n / (time.perf_counter() - t0)
    pop = r.register_script(POP_LUA)
    t0 = time.perf_counter()
    done = 0
    while done < n:
        got = await pop(keys=[pending, unack, data], args=[int(time.time() * 1000), 100])
        got_ids = got[::2]
        pipe = r.pipeline(transaction=False)
        pipe.zrem(unack, *got_ids)
        pipe.hdel(data, *got_ids)
        await pipe.execute()
        done += len(got_ids)
    popack = n / (time.perf_counter() - t0)
    await r.aclose()
    await drop(url, pfx)
    return push, popack


# -- dynoq sync and asyncio ----------------------------------------------------------------


def sync_core(url: str, n: int) -> tuple[float, float]:
    with dynoq.connect(url, prefix=prefix()) as c:
        q = c.queue("b", shards=4)
        items = [BODY] * n
        t0 = time.perf_counter()
        for i in range(0, n, CHUNK):
            q.push_many(items[i : i + CHUNK])
        push = n / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        done = 0
        while done < n:
            done += q.ack_many(q.pop(100))
        popack = n / (time.perf_counter() - t0)
        asyncio.run(drop(url, c.prefix))
    return push, popack


async def async_core(url: str, n: int) -> tuple[float, float]:
    async with dynoq.asyncio.connect(url, prefix=prefix()) as c:
        q = await c.queue("b", shards=4)
        items = [BODY] * n
        t0 = time.perf_counter()
        for i in range(0, n, CHUNK):
            await q.push_many(items[i : i + CHUNK])
        push = n / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        done = 0
        while done < n:
            done += await q.ack_many(await q.pop(100))
        popack = n / (time.perf_counter() - t0)
        await drop(url, c.prefix)
    return push, popack


def sync_consumer(url: str, n: int, concurrency: int) -> float:
    with dynoq.connect(url, prefix=prefix()) as c:
        q = c.queue("c", shards=4)
        for i in range(0, n, 5000):
            q.push_many([BODY] * min(5000, n - i))
        cons = c.consumer(q, lambda m: None, batch_size=100, concurrency=concurrency)
        t0 = time.perf_counter()
        cons.start()
        while cons.stats().handled < n:
            time.sleep(0.002)
        rate = n / (time.perf_counter() - t0)
        cons.stop()
        asyncio.run(drop(url, c.prefix))
    return rate


async def async_consumer(url: str, n: int, concurrency: int) -> float:
    async with dynoq.asyncio.connect(url, prefix=prefix()) as c:
        q = await c.queue("c", shards=4)
        for i in range(0, n, 5000):
            await q.push_many([BODY] * min(5000, n - i))

        async def noop(msg: dynoq.Message) -> None:
            pass

        cons = c.consumer(q, noop, batch_size=100, concurrency=concurrency)
        t0 = time.perf_counter()
        await cons.start()
        while cons.stats().handled < n:
            await asyncio.sleep(0.002)
        rate = n / (time.perf_counter() - t0)
        await cons.stop()
        await drop(url, c.prefix)
    return rate


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--n", type=int, default=20000)
    args = p.parse_args()
    n, reps = args.n, args.repeats
    with server_url(args.url) as url:
        raws = [asyncio.run(raw(url, n)) for _ in range(reps)]
        syncs = [sync_core(url, n) for _ in range(reps)]
        asyncs = [asyncio.run(async_core(url, n)) for _ in range(reps)]
        rows: list[tuple[str, ...]] = [
            ("case", "msgs/s (median)", "vs raw redis.asyncio", "async vs sync")
        ]
        for i, what in enumerate(("push_many (chunks of 1000)", "pop(100) + ack_many")):
            base = median([r[i] for r in raws])
            s, a = median([r[i] for r in syncs]), median([r[i] for r in asyncs])
            rows.append((f"{what}: raw redis.asyncio", f"{base:,.0f}", "1.00x", "-"))
            rows.append((f"{what}: dynoq sync", f"{s:,.0f}", f"{s / base:.2f}x", "-"))
            rows.append(
                (f"{what}: dynoq.asyncio", f"{a:,.0f}", f"{a / base:.2f}x", f"{a / s:.2f}x")
            )
        for conc in (1, 4):
            s = median([sync_consumer(url, n, conc) for _ in range(reps)])
            a = median([asyncio.run(async_consumer(url, n, conc)) for _ in range(reps)])
            rows.append(
                (f"consumer, no-op, batch 100, concurrency {conc}: sync", f"{s:,.0f}", "-", "-")
            )
            rows.append(
                (
                    f"consumer, no-op, batch 100, concurrency {conc}: asyncio",
                    f"{a:,.0f}",
                    "-",
                    f"{a / s:.2f}x",
                )
            )
        print(table(rows))


if __name__ == "__main__":
    main()
