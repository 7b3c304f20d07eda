"""Subprocess entry point for the rate-limit test: one member of a rate-limited group.

    python tests/rate_member.py URL PREFIX QUEUE COUNT PERIOD

Logs each handling's server time (ms) with RPUSH to ``<prefix>:log``; prints "started".
"""

from __future__ import annotations

import sys

import dynoq


def main(url: str, prefix: str, queue: str, count: str, period: str) -> None:
    client = dynoq.connect(url, prefix=prefix)
    log = f"{prefix}:log"

    def handle(msg: dynoq.Message) -> None:
        client.redis.rpush(log, int(client.server_time() * 1000))

    c = client.consumer(queue, handle, rate_limit=(int(count), float(period)), batch_size=5,
                        concurrency=2, idle_wait=0.2, lease_ttl=2.0).start()
    print("started", flush=True)
    c.run()


if __name__ == "__main__":
    main(*sys.argv[1:6])
