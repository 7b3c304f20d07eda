"""Redis commands per second that idle blocked pops send (goal: <= 2/s per consumer).

    python -m benchmarks.bench_idle [--url redis://...] [--seconds 20] [--shards 4]

Runs consumers looping ``pop(wait=...)`` on an empty queue and counts, from INFO
commandstats, the commands clients send (EVALSHA, SUBSCRIBE, PING...): the commands that
run inside a script are counted by the server too, but are not sent.
Then pushes one message and reports how fast a waiting pop got it.
"""

from __future__ import annotations

import threading
import time

import redis

import dynoq
from benchmarks.common import parser, server_url

SENT = ("evalsha", "eval", "subscribe", "unsubscribe", "ping", "script|load", "hello")


def sent(admin: redis.Redis) -> int:
    stats = admin.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in SENT)


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--consumers", type=int, default=2)
    p.add_argument("--wait", type=float, default=5.0)
    args = p.parse_args()
    with server_url(args.url) as url:
        admin = redis.Redis.from_url(url)
        client = dynoq.connect(url, prefix="idle")
        q = client.queue("idle", shards=args.shards)
        q.clear()
        stop = threading.Event()
        got: list[float] = []

        def consume() -> None:
            while not stop.is_set():
                for _ in q.pop(wait=args.wait):
                    got.append(time.monotonic())

        threads = [threading.Thread(target=consume) for _ in range(args.consumers)]
        for t in threads:
            t.start()
        time.sleep(1.0)  # let them settle into waiting
        before = sent(admin)
        time.sleep(args.seconds)
        after = sent(admin)
        per_consumer = (after - before) / args.seconds / args.consumers
        pushed = time.monotonic()
        q.push("wake up")
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            time.sleep(0.001)
        latency = (got[0] - pushed) * 1000 if got else float("nan")
        stop.set()
        for t in threads:
            t.join()
        client.close()
        admin.close()
    print(f"{args.consumers} idle consumers, {args.shards} shards, pop(wait={args.wait}):")
    print(f"  {per_consumer:.2f} Redis commands/s per waiting consumer (goal <= 2)")
    print(f"  push -> waiting pop latency: {latency:.1f} ms")


if __name__ == "__main__":
    main()
