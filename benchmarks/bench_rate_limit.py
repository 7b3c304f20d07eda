"""A group's rate limit where the handlers are called: two processes of four workers each
(batch sizes "auto", the default) drain a queue under ``rate_limit=(20, 1.0)``; every
handler call logs when it began. Reported: the most calls in any sliding period (the
limit allows ``count + 1``) and the time the run took against the least the limit allows.
Kind "keys": a queue's ``key_rate_limit=(20, 1.0)`` instead (ordered="key", 7 keys, no
group limit), its figures those of the busiest key.

    python -m benchmarks.bench_rate_limit [--repeats 4] [--tree PATH] [--kinds ...]

``--tree PATH`` runs the members on another checkout's dynoq (e.g. ``git worktree add
/tmp/base HEAD~1``), for a before/after in one run; kinds: threads, groups (ordered="key"),
asyncio, tasks.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import redis

KINDS = ("threads", "groups", "asyncio", "tasks", "keys")
OPTIONS = {"concurrency": 4, "idle_wait": 0.2, "lease_ttl": 2.0}


def busiest(times: list[float], period: float) -> int:
    """The most calls in any sliding window of ``period`` seconds."""
    times = sorted(times)
    return max(bisect.bisect_left(times, t + period) - i for i, t in enumerate(times))


def limited_queue(client: Any, kind: str, count: int, period: float) -> Any:
    """The queue a run drains: keyed for "groups", keyed with a key_rate_limit for "keys"."""
    if kind == "keys":
        return client.queue("limited", shards=4, ordered="key", key_rate_limit=(count, period))
    return client.queue("limited", shards=4, ordered="key" if kind == "groups" else False)


def by_key(logged: list[str]) -> dict[str, list[float]]:
    """The "keys" kind's log ("<key> <time>" a call): each key's call times."""
    out: dict[str, list[float]] = {}
    for line in logged:
        key, _, at = line.rpartition(" ")
        out.setdefault(key, []).append(float(at))
    return out


def span(times: list[float], count: int, period: float, spaced: bool = False) -> float:
    """The time the calls took against the least the limit allows: a group's limit
    grants bursts (their span), a key's spaces every call period / count (``spaced``)."""
    least = (len(times) - 1) / count * period if spaced else (len(times) / count - 1) * period
    return (max(times) - min(times)) / least


def member(url: str, prefix: str, queue: str, count: int, period: float, kind: str) -> None:
    """One member of the group (a process of its own), until SIGTERM."""
    import dynoq

    log, limit = f"{prefix}:log", (count, period)
    if kind == "asyncio":
        asyncio.run(_async_member(url, prefix, queue, limit, log))
        return
    client = dynoq.connect(url, prefix=prefix)
    if kind == "tasks":
        app = dynoq.Tasks(client, queue=queue)

        @app.task(name="hit", rate_limit=limit)
        def hit(n: int) -> None:
            client.redis.rpush(log, repr(time.time()))

        app.worker(**OPTIONS).run()
        return

    if kind == "keys":  # the queue's own limit, per key: each call logs its key

        def handle(msg: Any) -> None:
            client.redis.rpush(log, f"{msg.key} {time.time()!r}")

        client.consumer(queue, handle, **OPTIONS).run()
        return

    def handle(msg: Any) -> None:
        client.redis.rpush(log, repr(time.time()))

    client.consumer(queue, handle, rate_limit=limit, **OPTIONS).run()


async def _async_member(
    url: str, prefix: str, queue: str, limit: tuple[int, float], log: str
) -> None:
    import dynoq.asyncio

    async with dynoq.asyncio.connect(url, prefix=prefix) as client:
        r = await client.redis()

        async def handle(msg: Any) -> None:
            await r.rpush(log, repr(time.time()))

        await client.consumer(await client.queue(queue), handle, rate_limit=limit, **OPTIONS).run()


def one_run(
    url: str, kind: str, tree: str | None, n: int, count: int, period: float, stream: bool
) -> tuple[int, float]:
    import dynoq
    from benchmarks.common import drop_prefix

    prefix = f"bench-rate-{uuid.uuid4().hex[:8]}"
    r = redis.Redis.from_url(url)
    client = dynoq.connect(url, prefix=prefix)
    try:
        q = limited_queue(client, kind, count, period)
        payloads = (
            [{"task": "hit", "args": [i], "kwargs": {}} for i in range(n)]
            if kind == "tasks"
            else list(range(n))
        )
        msgs = [
            dynoq.Message(p, key=f"k{i % 7}" if kind in ("groups", "keys") else None)
            for i, p in enumerate(payloads)
        ]
        if not stream:  # (else pushed as they run, at 1.5 times the limit)
            q.push_many(msgs)
        # This file as a script (its folder first on sys.path, then the tree's dynoq):
        # `-m` would put the working directory, and this tree's dynoq, first.
        env = {**os.environ, "PYTHONPATH": tree or str(Path(__file__).resolve().parents[1])}
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--member",
                    url,
                    prefix,
                    "limited",
                    str(count),
                    str(period),
                    kind,
                ],
                env=env,
            )
            for _ in range(2)
        ]
        try:
            deadline = time.monotonic() + 10 * n / count * period + 30
            for i in range(0, len(msgs) if stream else 0, count + 5):
                q.push_many(msgs[i : i + count + 5])  # more than a period's worth,
                time.sleep(2 * period)  # then idle for a while
            while r.llen(f"{prefix}:log") < n and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            for p in procs:
                p.terminate()
                p.wait(30)
        logged = [t.decode() for t in r.lrange(f"{prefix}:log", 0, -1)]
        if kind == "keys":  # the busiest key's
            return max(
                (busiest(t, period), span(t, count, period, spaced=True))
                for t in by_key(logged).values()
            )
        times = [float(t) for t in logged]
        return busiest(times, period), span(times, count, period)
    finally:
        client.close()
        drop_prefix(r, prefix)
        r.close()


def main() -> None:
    from benchmarks.common import median, parser, server_url, table

    p = parser(__doc__ or "")
    p.add_argument("--tree", default=None, help="another checkout's dynoq for the members")
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--messages", type=int, default=120)
    p.add_argument(
        "--stream",
        action="store_true",
        help="push while the members run: count + 5 every two periods",
    )
    p.add_argument("--member", nargs=6, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.member:
        url, prefix, queue, count, period, kind = args.member
        member(url, prefix, queue, int(count), float(period), kind)
        return
    count, period = 20, 1.0
    rows = [("kind", "busiest sliding second (limit 20)", "median", "time / least")]
    with server_url(args.url) as url:
        for kind in args.kinds.split(","):
            runs = [
                one_run(url, kind, args.tree, args.messages, count, period, args.stream)
                for _ in range(args.repeats)
            ]
            peaks = sorted(b for b, _ in runs)
            rows.append(
                (
                    kind,
                    ", ".join(map(str, peaks)),
                    f"{median(peaks):g}",
                    f"{median([took for _, took in runs]):.2f}x",
                )
            )
    print(
        f"rate_limit=({count}, {period}); 2 processes x 4 workers, batch_size auto; "
        f"{args.messages} messages a run{' pushed while they run' if args.stream else ''}; "
        f"members from {args.tree or 'this tree'}"
    )
    print(table(rows))


if __name__ == "__main__":
    main()
