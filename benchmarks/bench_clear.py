"""How long ``clear()`` of a large queue stops the server, against the DEL it used to be, in
one run (DESIGN §2.14: nothing blocks the server for long).

    python -m benchmarks.bench_clear [--url redis://...] [--n 300000] [--shards 1] [--repeats 3]

Each repeat fills one queue with ``--n`` messages (all waiting) twice, and deletes them
once each way, the two ways interleaved:
  DEL     one DEL per shard of the shard's data keys (what clear() sent before): the
          server frees every message in its main thread
  clear   q.clear(): a script per shard that checks the queue's epoch and UNLINKs the
          same keys (the server frees them in a background thread)
The server's own time for the delete is its SLOWLOG entry (the threshold set to 0: use a
private server): what every other client waits. Meanwhile a thread PINGs the server on a
connection of its own, one after another: its slowest PING during the delete, and in as
long a quiet time just before (on a loaded machine the client's own noise can exceed
what the server adds).
Medians of the repeats. On a server with ``lazyfree-lazy-user-del yes`` (Valkey 8's
default) DEL frees in the background too; the table says which setting it ran with.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import redis

import dynoq
from benchmarks.common import drop_prefix, median, parser, server_url, server_version, table

PREFIX = "bench-clear"
FILL_CHUNK = 10_000


class Pinger(threading.Thread):
    """PINGs back to back on its own connection, keeping (sent, answered) times."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.samples: list[tuple[float, float]] = []
        self.done = threading.Event()

    def run(self) -> None:
        r = redis.Redis.from_url(self.url)
        try:
            while not self.done.is_set():
                t0 = time.perf_counter()
                r.ping()
                self.samples.append((t0, time.perf_counter()))
        finally:
            r.close()

    def worst(self, start: float, end: float) -> float:
        """The slowest PING (ms) that was waiting at any time between start and end."""
        return max(
            ((b - a) * 1000 for a, b in self.samples if b >= start and a <= end), default=0.0
        )


def fill(q: dynoq.Queue, n: int) -> None:
    for i in range(0, n, FILL_CHUNK):
        q.push_many(
            [
                dynoq.Message({"n": j, "pad": "x" * 40}, id=f"m{j}")
                for j in range(i, min(i + FILL_CHUNK, n))
            ]
        )


def slowest_entry(r: redis.Redis, command: str) -> float:
    """The longest SLOWLOG entry (ms) of ``command`` since the last reset."""
    durations = []
    for e in r.slowlog_get(-1):  # every entry (the PINGs are there too)
        text = e["command"]
        text = text.decode(errors="replace") if isinstance(text, bytes) else str(text)
        if text.split(" ", 1)[0].upper() == command:
            durations.append(e["duration"] / 1000)
    return max(durations, default=0.0)


def timed(r: redis.Redis, pinger: Pinger, delete: Callable[[], Any]) -> tuple[float, float]:
    """(the slowest concurrent PING (ms) while ``delete`` ran, the slowest in as long a
    quiet time just before: the machine's own noise)."""
    time.sleep(0.5)  # quiet PINGs before: the pinger is warm, the noise measured
    r.slowlog_reset()
    start = time.perf_counter()
    delete()
    end = time.perf_counter()
    time.sleep(0.05)
    span = max(end - start, 0.2)
    return pinger.worst(start, end), pinger.worst(start - span, start - 0.001)


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--n", type=int, default=300_000)
    p.add_argument("--shards", type=int, default=1)
    args = p.parse_args()
    with server_url(args.url) as url:
        r = redis.Redis.from_url(url)  # a private server: its SLOWLOG threshold is changed
        lazy = r.config_get("lazyfree-lazy-user-del").get("lazyfree-lazy-user-del", "?")
        old = r.config_get("slowlog-*")
        r.config_set("slowlog-log-slower-than", 0)
        r.config_set("slowlog-max-len", 1_000_000)
        client = dynoq.connect(url, prefix=PREFIX)
        q = client.queue("big", shards=args.shards)
        pinger = Pinger(url)
        pinger.start()
        results: dict[str, tuple[list[float], list[float], list[float]]] = {
            "DEL": ([], [], []),
            "clear": ([], [], []),
        }

        def raw_del() -> None:
            pipe = r.pipeline(transaction=False)
            for k in q.ops.shard_keys:
                pipe.delete(*k.data())
            pipe.execute()

        try:
            for _ in range(args.repeats):
                for name, delete, command in (
                    ("DEL", raw_del, "DEL"),
                    ("clear", q.clear, "EVALSHA"),
                ):
                    fill(q, args.n)
                    assert q.size() == args.n
                    during, before = timed(r, pinger, delete)
                    results[name][0].append(during)
                    results[name][1].append(before)
                    results[name][2].append(slowest_entry(r, command))
                    assert q.size() == 0
        finally:
            pinger.done.set()
            pinger.join()
            for setting, value in old.items():
                r.config_set(str(setting), str(value))
            r.slowlog_reset()
            drop_prefix(r, PREFIX)
            client.close()
        print(
            f"server {server_version(r)}, lazyfree-lazy-user-del {lazy}; {args.n:,} "
            f"messages in {args.shards} shard(s); medians of {args.repeats}"
        )
        rows: list[tuple[str, ...]] = [
            (
                "delete",
                "server time of the delete (ms)",
                "slowest PING during it (ms)",
                "slowest PING just before (ms)",
            )
        ]
        for name, (pings, quiet, server) in results.items():
            rows.append(
                (name, f"{median(server):.2f}", f"{median(pings):.1f}", f"{median(quiet):.1f}")
            )
        print(table(rows))
        r.close()


if __name__ == "__main__":
    main()
