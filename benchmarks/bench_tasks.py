"""Tasks against the queue they run on, in the same run (ratios per round, then medians).

    python -m benchmarks.bench_tasks [--url redis://...] [--n 5000] [--repeats 5]

  delay         fn.delay(1, "x") one after another, against q.push() of the same payload
                ({"task", "args", "kwargs"}) on the same queue, in alternating chunks of
                50 calls (the machine's load varies faster than a run) (goal: >= 0.9x)
  worker        a worker running a no-op task, against a consumer with a no-op handler,
                on N waiting messages of the same payload (10 N with a batch of 100);
                both count their calls, and the rate is from the first call to the last
                (goal: >= 0.8x); batch 1 and batch 100, concurrency 4
  keep_result   the same worker with keep_result=60 (a task-keep script call per batch
                and shard, before the acks, in their round trip) against keep_result=0
  commands      INFO commandstats deltas per message for the worker runs: what a task
                costs in Redis commands (keep_result=0: the consumer's; 60: one SET more)
Both flavors (--flavors sync,async); each round runs the cases of a row back to back, in
alternating order, on fresh prefixes.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

import redis

import dynoq
import dynoq.asyncio
from benchmarks.common import drop_prefix, median, parser, server_url, server_version, table

PAYLOAD_ARGS = (1, "x")


def _payload(name: str) -> dict[str, Any]:
    return {"task": name, "args": list(PAYLOAD_ARGS), "kwargs": {}}


def _prefix() -> str:
    return f"bt-{uuid.uuid4().hex[:8]}"


class Calls:
    """What a no-op handler (or task) does: count, and note the first and last time."""

    def __init__(self) -> None:
        self.first = self.last = 0.0
        self.n = 0

    def hit(self) -> None:
        now = time.perf_counter()
        if not self.n:
            self.first = now
        self.last = now
        self.n += 1

    def rate(self) -> float:
        return (self.n - 1) / (self.last - self.first)


def commandstats(r: redis.Redis) -> dict[str, int]:
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in r.info("commandstats").items()}


def _delta(before: dict[str, int], after: dict[str, int], n: int) -> dict[str, float]:
    out = {k: (after.get(k, 0) - before.get(k, 0)) / n for k in after}
    return {k: v for k, v in out.items() if v >= 0.005 and k not in ("info",)}


# -- sync ----------------------------------------------------------------------------------

CHUNK = 50  # calls of one side before the other's: both see the same moment of the machine


def sync_delay(url: str, n: int) -> tuple[float, float]:
    """(q.push() /s, fn.delay() /s), measured in alternating chunks of CHUNK calls."""
    client = dynoq.connect(url, prefix=_prefix())
    try:
        app = dynoq.Tasks(client, queue="d")
        noop = app.task(name="bench.noop")(lambda a, b: None)
        q = app.queue("d")
        payload = _payload("bench.noop")
        q.push(payload)  # both: queue opened, scripts loaded
        noop.delay(*PAYLOAD_ARGS)
        spent = [0.0, 0.0]
        for _ in range(n // CHUNK):
            t0 = time.perf_counter()
            for _ in range(CHUNK):
                q.push(payload)
            t1 = time.perf_counter()
            for _ in range(CHUNK):
                noop.delay(*PAYLOAD_ARGS)
            t2 = time.perf_counter()
            spent[0] += t1 - t0
            spent[1] += t2 - t1
        done = n // CHUNK * CHUNK
        return done / spent[0], done / spent[1]
    finally:
        drop_prefix(client.redis, client.prefix)
        client.close()


def sync_worker(
    url: str,
    n: int,
    *,
    task: bool,
    batch: int,
    keep: float = 0.0,
    counts: dict[str, list[dict[str, float]]] | None = None,
    label: str = "",
) -> float:
    client = dynoq.connect(url, prefix=_prefix())
    calls = Calls()
    try:
        app = dynoq.Tasks(client, queue="w")
        app.task(name="bench.noop", keep_result=keep)(lambda a, b: calls.hit())
        q = app.queue("w")
        for i in range(0, n, 5000):
            q.push_many([_payload("bench.noop")] * min(5000, n - i))
        options = {"concurrency": 4, "batch_size": batch, "idle_wait": 0.5}
        before = commandstats(client.redis)
        if task:
            runner: Any = app.worker(**options)
        else:
            runner = client.consumer(q, lambda m: calls.hit(), **options)
        runner.start()
        while calls.n < n:
            time.sleep(0.005)
        while q.stats().total("acked") < n:
            time.sleep(0.005)
        runner.stop()
        if counts is not None:
            counts.setdefault(label, []).append(_delta(before, commandstats(client.redis), n))
        return calls.rate()
    finally:
        drop_prefix(client.redis, client.prefix)
        client.close()


# -- asyncio -------------------------------------------------------------------------------


async def _async_delay(url: str, n: int) -> tuple[float, float]:
    prefix = _prefix()
    async with dynoq.asyncio.connect(url, prefix=prefix) as client:
        app = dynoq.asyncio.Tasks(client, queue="d")

        async def noop(a: Any, b: Any) -> None:
            return None

        task = app.task(name="bench.noop")(noop)
        q = await app.queue("d")
        payload = _payload("bench.noop")
        await q.push(payload)
        await task.delay(*PAYLOAD_ARGS)
        spent = [0.0, 0.0]
        for _ in range(n // CHUNK):
            t0 = time.perf_counter()
            for _ in range(CHUNK):
                await q.push(payload)
            t1 = time.perf_counter()
            for _ in range(CHUNK):
                await task.delay(*PAYLOAD_ARGS)
            t2 = time.perf_counter()
            spent[0] += t1 - t0
            spent[1] += t2 - t1
    r = redis.Redis.from_url(url)
    drop_prefix(r, prefix)
    r.close()
    done = n // CHUNK * CHUNK
    return done / spent[0], done / spent[1]


async def _async_worker(url: str, n: int, task: bool, batch: int, keep: float) -> float:
    prefix = _prefix()
    calls = Calls()
    async with dynoq.asyncio.connect(url, prefix=prefix) as client:
        app = dynoq.asyncio.Tasks(client, queue="w")

        async def noop(a: Any, b: Any) -> None:
            calls.hit()

        async def handler(m: dynoq.Message) -> None:
            calls.hit()

        app.task(name="bench.noop", keep_result=keep)(noop)
        q = await app.queue("w")
        for i in range(0, n, 5000):
            await q.push_many([_payload("bench.noop")] * min(5000, n - i))
        options = {"concurrency": 4, "batch_size": batch, "idle_wait": 0.5}
        runner: Any = (
            await app.worker(**options) if task else client.consumer(q, handler, **options)
        )
        await runner.start()
        while calls.n < n:
            await asyncio.sleep(0.005)
        while (await q.stats()).total("acked") < n:
            await asyncio.sleep(0.005)
        await runner.stop()
    r = redis.Redis.from_url(url)
    drop_prefix(r, prefix)
    r.close()
    return calls.rate()


def async_delay(url: str, n: int) -> tuple[float, float]:
    return asyncio.run(_async_delay(url, n))


def async_worker(
    url: str,
    n: int,
    *,
    task: bool,
    batch: int,
    keep: float = 0.0,
    counts: Any = None,
    label: str = "",
) -> float:
    return asyncio.run(_async_worker(url, n, task, batch, keep))


# -- the report ----------------------------------------------------------------------------


def rounds(
    reps: int, base: Callable[[], float], case: Callable[[], float]
) -> tuple[float, float, float]:
    """(median base rate, median case rate, median of the per-round ratios), each round
    running both, in alternating order."""
    bases, cases, ratios = [], [], []
    for i in range(reps):
        if i % 2:
            c, b = case(), base()
        else:
            b, c = base(), case()
        bases.append(b)
        cases.append(c)
        ratios.append(c / b)
    return median(bases), median(cases), median(ratios)


def measure(
    flavor: str, url: str, n: int, reps: int, counts: dict[str, list[dict[str, float]]]
) -> list[tuple[str, ...]]:
    """One flavor's rows. A batch of 100 runs 10 n messages (n would take a few ms)."""
    delay, work = (sync_delay, sync_worker) if flavor == "sync" else (async_delay, async_worker)
    rows: list[tuple[str, ...]] = []
    pairs = [delay(url, n) for _ in range(reps)]
    rows.append(
        (
            flavor,
            "fn.delay() vs q.push()",
            f"{median([x for x, _ in pairs]):,.0f}",
            f"{median([y for _, y in pairs]):,.0f}",
            f"{median([y / x for x, y in pairs]):.2f}x",
            ">= 0.9x",
        )
    )
    for batch in (1, 100):
        m = n * (10 if batch > 1 else 1)
        b, c, ratio = rounds(
            reps,
            partial(
                work,
                url,
                m,
                task=False,
                batch=batch,
                counts=counts,
                label=f"{flavor} consumer, batch {batch}",
            ),
            partial(
                work,
                url,
                m,
                task=True,
                batch=batch,
                counts=counts,
                label=f"{flavor} tasks, keep 0, batch {batch}",
            ),
        )
        rows.append(
            (
                flavor,
                f"no-op tasks vs no-op handler, batch {batch}",
                f"{b:,.0f}",
                f"{c:,.0f}",
                f"{ratio:.2f}x",
                ">= 0.8x",
            )
        )
    for batch in (1, 100):
        m = n * (10 if batch > 1 else 1)
        b, c, ratio = rounds(
            reps,
            partial(work, url, m, task=True, batch=batch),
            partial(
                work,
                url,
                m,
                task=True,
                batch=batch,
                keep=60.0,
                counts=counts,
                label=f"{flavor} tasks, keep 60, batch {batch}",
            ),
        )
        rows.append(
            (
                flavor,
                f"keep_result=60 vs 0, batch {batch}",
                f"{b:,.0f}",
                f"{c:,.0f}",
                f"{ratio:.2f}x",
                "-",
            )
        )
    return rows


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--n", type=int, default=5000)
    p.add_argument("--flavors", default="sync,async")
    args = p.parse_args()
    n, reps = args.n, args.repeats
    with server_url(args.url) as url:
        r = redis.Redis.from_url(url)
        print(f"{n} messages a case, {reps} rounds, {server_version(r)} at {url}")
        rows: list[tuple[str, ...]] = [
            ("flavor", "case", "baseline /s", "case /s", "ratio (median)", "goal")
        ]
        counts: dict[str, list[dict[str, float]]] = {}
        for flavor in args.flavors.split(","):
            rows += measure(flavor, url, n, reps, counts)
        print(table(rows))
        print(
            "\nRedis commands per message (INFO commandstats deltas, median of the runs; "
            "sync runs only: an asyncio\nrun's commands are the same; idle pops and "
            "heartbeats included):"
        )
        names = sorted({k for runs in counts.values() for d in runs for k in d})
        crow: list[tuple[str, ...]] = [("run", *names)]
        for label, runs in counts.items():
            crow.append((label, *(f"{median([d.get(k, 0.0) for d in runs]):.2f}" for k in names)))
        if counts:
            print(table(crow))
        r.close()


if __name__ == "__main__":
    main()
