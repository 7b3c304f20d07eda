"""Subprocess entry point for the consumer tests: one group member in its own process.

    python tests/consumer_helpers.py URL PREFIX QUEUE [--sleep S] [--lease-ttl S] [--run]

Each handled message is logged as ``instance|key|seq|shard`` with RPUSH to
``<prefix>:log`` (one list, so the log order across processes is the handling order).
The process prints "started" once it has joined, then runs until SIGTERM/SIGKILL.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

import dynoq


def wait_for(cond: Callable[[], Any], timeout: float = 15.0, what: str = "condition") -> None:
    """Poll ``cond`` until it is true; fail after ``timeout`` seconds (tests only)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


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
    args = ap.parse_args()
    client = dynoq.connect(args.url, prefix=args.prefix)
    q = client.queue(args.queue)
    me = args.instance or f"proc-{time.monotonic_ns()}"

    def handler(msg: dynoq.Message) -> None:
        p = msg.payload
        client.redis.rpush(log_key(args.prefix), f"{me}|{p['k']}|{p['i']}|{msg.shard}")
        if args.sleep:
            time.sleep(args.sleep)

    c = client.consumer(q, handler, concurrency=args.concurrency, lease_ttl=args.lease_ttl,
                        rebalance_interval=args.rebalance_interval, instance_id=me)
    c.start()
    print("started", flush=True)
    try:
        c.run()  # start() was called: run() then only waits for a signal
    finally:
        client.close()


if __name__ == "__main__":
    sys.exit(main())
