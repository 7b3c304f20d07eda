"""Subprocess entry point for the consumer tests: one group member in its own process.

    python tests/consumer_helpers.py URL PREFIX QUEUE [--sleep S] [--lease-ttl S] [--async]

Each handled message is logged as ``instance|key|seq|shard`` with RPUSH to
``<prefix>:log`` (one list, so the log order across processes is the handling order).
The process prints "started" once it has joined, then runs until SIGTERM/SIGKILL.
With ``--async`` the member is a dynoq.asyncio consumer (its handler awaits).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

import dynoq


def log_key(prefix: str) -> str:
    return f"{prefix}:log"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("prefix")
    ap.add_argument("queue")
    ap.add_argument("--sleep", type=float, default=0.0)
    ap.add_argument("--lease-ttl", type=float, default=2.0)
    ap.add_argument("--rebalance-interval", type=float, default=5.0)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--instance", default=None)
    ap.add_argument("--async", dest="use_async", action="store_true")
    args = ap.parse_args()
    if args.use_async:
        asyncio.run(main_async(args))
        return
    client = dynoq.connect(args.url, prefix=args.prefix)
    q = client.queue(args.queue)
    me = args.instance or f"proc-{time.monotonic_ns()}"

    def handler(msg: dynoq.Message) -> None:
        p = msg.payload
        client.redis.rpush(log_key(args.prefix), f"{me}|{p['k']}|{p['i']}|{msg.shard}")
        if args.sleep:
            time.sleep(args.sleep)

    c = client.consumer(
        q,
        handler,
        concurrency=args.concurrency,
        lease_ttl=args.lease_ttl,
        rebalance_interval=args.rebalance_interval,
        instance_id=me,
    )
    c.start()
    print("started", flush=True)
    try:
        c.run()  # start() was called: run() then only waits for a signal
    finally:
        client.close()


async def main_async(args: argparse.Namespace) -> None:
    import dynoq.asyncio  # here: the sync children start no slower for it

    me = args.instance or f"proc-{time.monotonic_ns()}"
    async with dynoq.asyncio.connect(args.url, prefix=args.prefix) as client:
        q = await client.queue(args.queue)
        r = await client.redis()

        async def handler(msg: dynoq.Message) -> None:
            p = msg.payload
            await r.rpush(log_key(args.prefix), f"{me}|{p['k']}|{p['i']}|{msg.shard}")
            if args.sleep:
                await asyncio.sleep(args.sleep)

        c = client.consumer(
            q,
            handler,
            concurrency=args.concurrency,
            lease_ttl=args.lease_ttl,
            rebalance_interval=args.rebalance_interval,
            instance_id=me,
        )
        await c.start()
        print("started", flush=True)
        await c.run()  # start() was called: run() then only waits for a signal


if __name__ == "__main__":
    sys.exit(main())
