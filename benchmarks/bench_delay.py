"""Delay precision under load: how late after its due time a delayed message is handled.

    python -m benchmarks.bench_delay [--url redis://...] [--rates 10000,200] [--seconds 6]
        [--shards 16] [--repeats 3] [--cases bare,default,batch100,async100]

Before each timed window, messages are pushed with delays such that ``rate`` of them a
second become due, evenly spread over ``--seconds`` (due times on the server's clock:
dynoq computes them from Redis TIME, and each popped message carries it as
``deliver_at``). Nothing else is pushed during the window. The handler (or the bare loop,
right after ``pop`` returns) records lateness = local ``time.time()`` corrected by the
offset to the server's TIME (measured before each run, lowest round trip of 25) minus
``deliver_at``. Goal (issue "Performance"): 10,000 messages/s due across 16 shards,
p99 <= 5 ms.

The fill's garbage (tens of thousands of Message objects, made in this process) is
collected before the window: left, it set off one of Python's full collections (20-30 ms
here, a pause of every thread) inside the window, a cost of the benchmark's producer, not
of a consumer, whose producers are other processes. The full collections that still
happen inside a window (the consumer's own) are counted in the table.

  bare       one thread: ``q.pop(100, wait=1)`` + ``q.ack_many`` (the core, no consumer)
  default    the sync consumer with default settings (4 threads, batch_size 1)
  batch100   the sync consumer, batch_size 100 (what bench_consumer measures)
  async100   the asyncio consumer, batch_size 100

Every figure is the median over ``--repeats`` runs of that run's percentile.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import threading
import time
import uuid
from collections.abc import Callable

import redis

import dynoq
import dynoq.asyncio
from benchmarks.common import median, parser, server_url, table

BODY = "x" * 50
PUSH_RATE = 12_000.0  # a pessimistic push_many rate (shared, loaded machine): the lead
SETTLE = 1.5  # seconds for a consumer to start (first rebalance) before the window


def clock_offset(r: redis.Redis) -> float:
    """Server TIME minus local time.time(), from the sample with the lowest round trip."""
    best: tuple[float, float] | None = None
    for _ in range(25):
        t0 = time.time()
        sec, usec = r.time()
        t1 = time.time()
        sample = (t1 - t0, sec + usec / 1e6 - (t0 + t1) / 2)
        if best is None or sample[0] < best[0]:
            best = sample
    assert best is not None
    return best[1]


def percentiles(late: list[float]) -> tuple[float, float, float]:
    """p50, p99, max in ms."""
    s = sorted(late)
    return (
        1000 * statistics.median(s),
        1000 * s[min(len(s) - 1, int(len(s) * 0.99))],
        1000 * s[-1],
    )


class Run:
    """One timed window: a fresh queue, messages pushed so that ``rate``/s fall due from
    ``start`` (server clock) on for ``seconds``."""

    def __init__(self, url: str, rate: float, seconds: float, shards: int) -> None:
        self.url, self.rate, self.seconds = url, rate, seconds
        self.n = int(rate * seconds)
        self.prefix = f"bd-{uuid.uuid4().hex[:8]}"
        self.client = dynoq.connect(url, prefix=self.prefix)
        self.q = self.client.queue("d", shards=shards)
        self.offset = clock_offset(self.client.redis)
        self.late: list[float] = []
        self.lock = threading.Lock()
        self.start = float("inf")  # the window's start (server clock), once filled
        self._gc_began = 0.0
        self.full_gcs: list[float] = []  # seconds each full collection in the window took

    def now(self) -> float:
        """Server-clock time now."""
        return time.time() + self.offset

    def fill(self) -> float:
        """Push everything; returns the window's start (server clock)."""
        start = self.now() + self.n / PUSH_RATE + 0.5 + SETTLE
        chunk = 2000
        for i in range(0, self.n, chunk):
            now = self.now()
            items = [
                dynoq.Message(BODY, delay=max(start + j / self.rate - now, 0.0))
                for j in range(i, min(i + chunk, self.n))
            ]
            self.q.push_many(items)
        left = start - self.now()
        if left < SETTLE:
            print(f"  (push ran late: {left:.2f} s before the window)")
        gc.collect()  # the fill's garbage (see the module docstring)
        self.start = start
        return start

    def _gc(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] < 2:
            return
        if phase == "start":
            self._gc_began = self.now()
        elif self.start <= self._gc_began <= self.start + self.seconds:
            self.full_gcs.append(self.now() - self._gc_began)

    def __enter__(self) -> Run:
        gc.callbacks.append(self._gc)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._gc)
        self.close()

    def record(self, m: dynoq.Message) -> None:
        late = self.now() - (m.deliver_at or 0.0)
        with self.lock:
            self.late.append(late)

    def record_many(self, msgs: list[dynoq.Message]) -> None:
        now = self.now()
        with self.lock:
            self.late.extend(now - (m.deliver_at or 0.0) for m in msgs)

    def wait_done(self, start: float, handled: Callable[[], int]) -> None:
        end = start + self.seconds + 10
        while len(self.late) < self.n and self.now() < end:
            time.sleep(0.05)
        if len(self.late) < self.n:
            print(f"  (only {len(self.late)} of {self.n} handled)")

    def close(self) -> None:
        keys = list(self.client.redis.scan_iter(match=f"{self.prefix}:*", count=1000))
        for i in range(0, len(keys), 1000):
            self.client.redis.delete(*keys[i : i + 1000])
        self.client.close()


def bare(run: Run) -> None:
    start = run.fill()
    q = run.q
    while len(run.late) < run.n and run.now() < start + run.seconds + 10:
        msgs = q.pop(100, wait=1.0)
        if msgs:
            run.record_many(msgs)
            q.ack_many(msgs)


def sync_consumer(run: Run, **options: object) -> None:
    start = run.fill()
    c = run.client.consumer(run.q, run.record, **options).start()  # type: ignore[arg-type]
    try:
        run.wait_done(start, lambda: c.stats().handled)
    finally:
        c.stop()


def async_consumer(run: Run, **options: object) -> None:
    start = run.fill()

    async def main() -> None:
        client = dynoq.asyncio.connect(run.url, prefix=run.prefix)
        try:
            q = await client.queue("d")

            async def handler(m: dynoq.Message) -> None:
                run.record(m)

            c = client.consumer(q, handler, **options)  # type: ignore[arg-type]
            await c.start()
            try:
                end = start + run.seconds + 10
                while len(run.late) < run.n and run.now() < end:
                    await asyncio.sleep(0.05)
            finally:
                await c.stop()
        finally:
            await client.close()

    asyncio.run(main())


CASES: dict[str, tuple[str, Callable[[Run], None]]] = {
    "bare": ("bare loop: pop(100, wait=1) + ack_many", bare),
    "default": ("sync consumer, default settings (4 threads, batch 1)", sync_consumer),
    "batch100": ("sync consumer, batch_size 100", lambda run: sync_consumer(run, batch_size=100)),
    "async100": (
        "asyncio consumer, batch_size 100",
        lambda run: async_consumer(run, batch_size=100),
    ),
}


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--rates", default="10000,200")
    p.add_argument("--seconds", type=float, default=6.0)
    p.add_argument("--shards", type=int, default=16)
    p.add_argument("--cases", default="bare,default,batch100,async100")
    args = p.parse_args()
    rates = [float(x) for x in args.rates.split(",")]
    cases = args.cases.split(",")
    rows: list[tuple[str, ...]] = [
        ("rate/s", "case", "p50 ms", "p99 ms", "max ms", "runs (p99)", "full GCs in windows")
    ]
    with server_url(args.url) as url:
        for rate in rates:
            for name in cases:
                title, fn = CASES[name]
                got, pauses = [], []
                for _ in range(args.repeats):
                    with Run(url, rate, args.seconds, args.shards) as run:
                        fn(run)
                        got.append(percentiles(run.late))
                        pauses += run.full_gcs
                    print(
                        f"  {rate:g}/s {name}: p50 {got[-1][0]:.1f} p99 {got[-1][1]:.1f} "
                        f"max {got[-1][2]:.1f} ms",
                        flush=True,
                    )
                p50, p99, mx = (median([g[i] for g in got]) for i in range(3))
                gcs = f"{len(pauses)}, longest {1000 * max(pauses):.0f} ms" if pauses else "0"
                rows.append(
                    (
                        f"{rate:,.0f}",
                        title,
                        f"{p50:.1f}",
                        f"{p99:.1f}",
                        f"{mx:.1f}",
                        ", ".join(f"{g[1]:.1f}" for g in got),
                        gcs,
                    )
                )
    print(
        f"due -> handled lateness, {args.shards} shards, {args.seconds:g} s windows, "
        f"median of {args.repeats} runs"
    )
    print(table(rows))


if __name__ == "__main__":
    main()
