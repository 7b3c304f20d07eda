"""What an idle consumer costs the server, and how fast it wakes (goal: <= 1 command/s);
and the same for a paused queue holding messages (goal: what an empty queue costs).

    python -m benchmarks.bench_idle [--url redis://...] [--seconds 30] [--shards 16]
        [--consumers 1] [--kinds concurrent,ordered,keyed] [--paused]

Starts ``--consumers`` consumers (default settings: 4 worker threads each) on an empty
queue of 16 shards of each kind, waits until they have settled (start-up is not counted),
then counts for ``--seconds`` every command clients send, with MONITOR (a command a script
runs inside the server is shown as ``lua`` there and not counted: it is not sent). Then
pushes one message and reports how long the idle consumers took to handle it. With
``--paused``, each kind is run a second time on a paused queue holding 1,000 messages
(``Queue.pause``), and the wake-up is the resume.
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


ORDERED: dict[str, bool | str] = {"concurrent": False, "ordered": True, "keyed": "key"}
HELD = 1000  # messages a paused queue holds


def idle(
    url: str, shards: int, kind: str, seconds: float, consumers: int, paused: bool
) -> tuple[float, str, float]:
    client = dynoq.connect(url, prefix=f"idle-{kind}-{int(paused)}")
    q = client.queue("idle", shards=shards, ordered=ORDERED[kind])
    if paused:
        q.pause()
        q.push_many([dynoq.Message(i, key=f"k{i % 100}") for i in range(HELD)])
    done = threading.Event()
    started = [client.consumer(q, lambda m: done.set()).start() for _ in range(consumers)]
    try:
        time.sleep(3 + consumers)  # start-up, first rebalances and leases are not idle cost
        seen = count_commands(url, seconds)
        t0 = time.perf_counter()
        if paused:
            q.resume()
        else:
            q.push("wake up", key="k")
        done.wait(10)
        latency = time.perf_counter() - t0
    finally:
        for c in started:
            c.stop()
        q.resume()
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
    p.add_argument("--consumers", type=int, default=1)
    p.add_argument("--kinds", default="concurrent,ordered")
    p.add_argument("--paused", action="store_true", help="also a paused queue per kind")
    args = p.parse_args()
    rows = [("consumers", "commands/s", "commands seen", "push (resume) -> handled")]
    with server_url(args.url) as url:
        for kind in args.kinds.split(","):
            for paused in (False, True) if args.paused else (False,):
                rate, seen, latency = idle(
                    url, args.shards, kind, args.seconds, args.consumers, paused
                )
                what = f"paused, {HELD} held" if paused else "empty"
                rows.append(
                    (
                        f"{args.consumers} x {kind}, {args.shards} shards, {what}",
                        f"{rate:.2f}",
                        seen,
                        f"{latency * 1000:.1f} ms",
                    )
                )
    print(f"idle consumers (default settings), {args.seconds:g} s each")
    print(table(rows))


if __name__ == "__main__":
    main()
