"""What an idle consumer costs the server, and how fast it wakes (goal: <= 1 command/s).

    python -m benchmarks.bench_idle [--url redis://...] [--seconds 30] [--shards 16]

Starts a consumer (default settings: 4 worker threads) on an empty queue of 16 shards,
concurrent and then ordered, waits until it has settled (start-up is not counted), then
counts for ``--seconds`` every command clients send, with MONITOR (a command a script runs
inside the server is shown as ``lua`` there and not counted: it is not sent). Then pushes
one message and reports how long the idle consumer took to handle it.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import redis

import dynoq
from benchmarks.common import parser, server_url, table
from dynoq._core.lua import SCRIPTS

NAMES = {s.sha: name for name, s in SCRIPTS.items()}


def command_name(command: str) -> str:
    """``EVALSHA <sha> ...`` by the script's name, other commands by their own."""
    words = command.split()
    if words[0].upper() == "EVALSHA" and len(words) > 1:
        return NAMES.get(words[1].strip("'\""), "EVALSHA ?")
    return words[0].upper()


def count_commands(url: str, seconds: float) -> Counter[str]:
    """Commands sent by clients during ``seconds`` (a script's own commands are not sent)."""
    seen: Counter[str] = Counter()
    admin = redis.Redis.from_url(url)
    start = float(admin.time()[0])
    end = start + seconds

    def listen() -> None:
        with redis.Redis.from_url(url, socket_timeout=seconds + 10).monitor() as m:
            for event in m.listen():  # ends when the connection is closed below
                if event["time"] >= end:
                    return
                if event["client_type"] != "lua":
                    seen[command_name(event["command"])] += 1

    t = threading.Thread(target=listen, daemon=True)
    t.start()
    time.sleep(seconds + 0.5)
    admin.ping()  # an event past the end, so the listener returns
    t.join(5)
    admin.close()
    return seen


def idle(url: str, shards: int, ordered: bool, seconds: float) -> tuple[float, str, float]:
    client = dynoq.connect(url, prefix=f"idle{int(ordered)}")
    q = client.queue("idle", shards=shards, ordered=ordered)
    done = threading.Event()
    consumer = client.consumer(q, lambda m: done.set()).start()
    try:
        time.sleep(3)  # start-up, first rebalance and leases are not idle cost
        seen = count_commands(url, seconds)
        t0 = time.perf_counter()
        q.push("wake up", key="k")
        done.wait(10)
        latency = time.perf_counter() - t0
    finally:
        consumer.stop()
        q.clear()
        client.close()
    return (
        sum(seen.values()) / seconds,
        ", ".join(f"{k} {v}" for k, v in seen.most_common()),
        latency,
    )


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--shards", type=int, default=16)
    args = p.parse_args()
    rows = [("consumer", "commands/s", "commands seen", "push -> handled")]
    with server_url(args.url) as url:
        for ordered in (False, True):
            rate, seen, latency = idle(url, args.shards, ordered, args.seconds)
            rows.append(
                (
                    f"{'ordered' if ordered else 'concurrent'}, {args.shards} shards",
                    f"{rate:.2f}",
                    seen,
                    f"{latency * 1000:.1f} ms",
                )
            )
    print(f"idle consumers (default settings), {args.seconds:g} s each")
    print(table(rows))


if __name__ == "__main__":
    main()
