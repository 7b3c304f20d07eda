"""A queue's max_running (DESIGN §3.9): what its slots cost, and how close to the cap
the calls run, in one run.

    python -m benchmarks.bench_running [--url redis://...] [--n 20000] [--repeats 3]

  cost      a default consumer (concurrency 4, batch_size "auto", a no-op handler)
            draining --n messages: msgs/s with max_running=1,000,000 (slots taken and
            given back, the cap never reached) against none (goal: >= 0.95x)
  at cap    two consumers of 8 workers each, a handler sleeping 5 ms, max_running=4:
            msgs/s against what 4 calls at a time allow (800 a second; goal >= 0.8x),
            and the most calls seen running at once (must be <= 4)
Every figure is the median of --repeats runs.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import dynoq
from benchmarks.common import drop_prefix, median, parser, server_url, table


def _client(url: str) -> dynoq.Client:
    return dynoq.connect(url, prefix=f"br-{uuid.uuid4().hex[:8]}")


def drain(url: str, n: int, cap: int | None) -> float:
    """msgs/s of a default consumer draining ``n`` messages, first call to last."""
    client = _client(url)
    calls: list[float] = []
    try:
        q = client.queue("r", shards=4, max_running=cap)
        for i in range(0, n, 5000):
            q.push_many(["x" * 100] * min(5000, n - i))
        c = client.consumer(q, lambda m: calls.append(time.perf_counter())).start()
        while len(calls) < n:
            time.sleep(0.005)
        c.stop()
        return (n - 1) / (max(calls) - min(calls))
    finally:
        drop_prefix(client.redis, client.prefix + ":")
        client.close()


def at_cap(url: str, n: int = 400, cap: int = 4, sleep: float = 0.005) -> tuple[float, int]:
    """(msgs/s against cap / sleep, the most calls running at once)."""
    clients = [_client(url)]
    clients.append(dynoq.connect(url, prefix=clients[0].prefix))
    lock = threading.Lock()
    state = {"running": 0, "most": 0}
    calls: list[float] = []

    def handle(m: Any) -> None:
        with lock:
            state["running"] += 1
            state["most"] = max(state["most"], state["running"])
            calls.append(time.perf_counter())
        time.sleep(sleep)
        with lock:
            state["running"] -= 1

    try:
        q = clients[0].queue("r", shards=4, max_running=cap)
        q.push_many(range(n))
        cs = [c.consumer(c.queue("r"), handle, concurrency=8).start() for c in clients]
        while len(calls) < n:
            time.sleep(0.005)
        for c in cs:
            c.stop()
        rate = (n - 1) / (max(calls) - min(calls))
        return rate / (cap / sleep), state["most"]
    finally:
        drop_prefix(clients[0].redis, clients[0].prefix + ":")
        for c in clients:
            c.close()


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--n", type=int, default=20_000)
    args = p.parse_args()
    with server_url(args.url) as url:
        rows: list[tuple[str, ...]] = [("measure", "no cap", "max_running", "ratio", "goal")]
        free = median([drain(url, args.n, None) for _ in range(args.repeats)])
        capped = median([drain(url, args.n, 1_000_000) for _ in range(args.repeats)])
        rows.append(
            (
                f"default consumer, {args.n:,} no-op calls",
                f"{free:,.0f} msg/s",
                f"{capped:,.0f} msg/s (1,000,000)",
                f"{capped / free:.2f}x",
                ">= 0.95x",
            )
        )
        print(rows[-1], flush=True)
        runs = [at_cap(url) for _ in range(args.repeats)]
        rows.append(
            (
                "2 consumers x 8 workers, 5 ms calls, max_running=4",
                "800 msg/s allowed",
                f"most at once: {max(m for _, m in runs)}",
                f"{median([r for r, _ in runs]):.2f}x",
                ">= 0.8x, most <= 4",
            )
        )
    print(table(rows))


if __name__ == "__main__":
    main()
