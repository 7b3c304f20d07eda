"""Workflows against plain tasks, in the same run (ratios per round, then medians).

    python -m benchmarks.bench_flows [--url redis://...] [--n 10000] [--repeats 5]
        [--chords 200] [--celery-python /path/to/venv/bin/python]

  group       a chord of N no-op tasks and its callback, started before the worker, against
              the same N no-op tasks pushed as plain tasks (push_many): a worker of
              concurrency 4 (batch "auto"), from its start to the callback's return (the
              flow) or the N-th ack (plain): messages a second (goal: >= 0.8x)
  callback    chords of 20 no-op members, one after another on a running worker: from the
              last member's return to the callback's start, ms (goal: p99 <= 50 ms)
  server      the server's time a member: flow-advance of a group's members in calls of
              100 (their ends recorded and walked), against ack_many of the same
              messages in calls of 100: microseconds of EVALSHA a message (INFO
              commandstats, before and after: a shared server's other clients count too)
  large       with --large N,N,...: a chord of each N (at most dynoq's limit, 10,000
              members) started and run once: the start's
              seconds (plan, parts, pushes), the members' msgs/s, and the longest script
              call (SLOWLOG; a private server only: it sets slowlog-log-slower-than):
              the call that gathers the group's value
  celery      with --celery-python (an interpreter with celery[redis]): Celery's chord of
              the same N no-op tasks and a callback, Redis broker and result backend, a
              thread-pool worker of concurrency 4 (benchmarks/celery_chord.py), on the same
              server: the anchor
Each round runs group's two sides back to back, in alternating order, on fresh prefixes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import redis

import dynoq
from benchmarks.common import drop_prefix, median, parser, server_url, server_version, table
from dynoq._core import flows as flows_core

CHORD_MEMBERS = 20
WORKER = {"concurrency": 4, "idle_wait": 0.05}


def _prefix() -> str:
    return f"bf-{uuid.uuid4().hex[:8]}"


class Clock:
    """Times noted by the tasks: each member's return, the callback's start."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ended: dict[str, float] = {}
        self.started: dict[str, float] = {}
        self.calls = 0

    def member(self, tag: str) -> None:
        now = time.perf_counter()
        with self.lock:
            self.calls += 1
            self.ended[tag] = max(self.ended.get(tag, 0.0), now)

    def callback(self, tag: str) -> None:
        self.started.setdefault(tag, time.perf_counter())


def _chord_tasks(client: dynoq.Client, clock: Clock) -> tuple[dynoq.Tasks, Any, Any]:
    """The app, and its member and callback tasks."""
    app = _app(client, clock)
    noop, done = app.get("noop"), app.get("done")
    assert noop is not None and done is not None
    return app, noop, done


def _run_chord(client: dynoq.Client, n: int) -> tuple[float, float]:
    """A chord of N no-op members: seconds to start it, and from a worker's start to
    the callback's return."""
    app, noop, done = _chord_tasks(client, Clock())
    shape = app.chord([noop.s(i) for i in range(n)], done.s())
    t0 = time.perf_counter()
    h = shape.delay()
    started = time.perf_counter() - t0
    worker = app.worker(**WORKER)
    t0 = time.perf_counter()
    worker.start()
    assert h.result(timeout=900) == n
    ran = time.perf_counter() - t0
    worker.stop()
    return started, ran


def _app(client: dynoq.Client, clock: Clock) -> dynoq.Tasks:
    app = dynoq.Tasks(client, queue="f")

    @app.task(name="noop")
    def noop(i: int, tag: str = "") -> int:
        clock.member(tag)
        return i

    @app.task(name="done")
    def done(values: list[int], tag: str = "") -> int:
        clock.callback(tag)
        return len(values)

    return app


def plain(url: str, n: int) -> float:
    """N plain no-op tasks, pushed first: messages a second, worker start to N-th ack."""
    client = dynoq.connect(url, prefix=_prefix())
    try:
        app = _app(client, Clock())
        q = app.queue("f")
        for i in range(0, n, 5000):
            q.push_many(
                [{"task": "noop", "args": [j], "kwargs": {}} for j in range(i, min(n, i + 5000))]
            )
        worker = app.worker(**WORKER)
        t0 = time.perf_counter()
        worker.start()
        while q.stats().total("acked") < n:
            time.sleep(0.002)
        spent = time.perf_counter() - t0
        worker.stop()
        return n / spent
    finally:
        drop_prefix(client.redis, client.prefix)
        client.close()


def group(url: str, n: int) -> float:
    """A chord of N no-op members, started first: messages a second, worker start to the
    callback's return."""
    client = dynoq.connect(url, prefix=_prefix())
    try:
        _, ran = _run_chord(client, n)
        return n / ran
    finally:
        drop_prefix(client.redis, client.prefix)
        client.close()


def callback_delays(url: str, chords: int) -> list[float]:
    """Chords of CHORD_MEMBERS no-op members, one after another on a running worker: ms
    from the last member's return to the callback's start, per chord."""
    client = dynoq.connect(url, prefix=_prefix())
    try:
        clock = Clock()
        app, noop, done = _chord_tasks(client, clock)
        out = []
        with app.worker(**WORKER):
            for c in range(chords):
                tag = f"c{c}"
                members = [noop.s(i, tag=tag) for i in range(CHORD_MEMBERS)]
                h = app.chord(members, done.s(tag=tag)).delay()
                assert h.result(timeout=60) == CHORD_MEMBERS
                out.append((clock.started[tag] - clock.ended[tag]) * 1000)
        return out
    finally:
        drop_prefix(client.redis, client.prefix)
        client.close()


def _evalsha_usec(r: redis.Redis) -> int:
    return int(r.info("commandstats").get("cmdstat_evalsha", {}).get("usec", 0))


def server_cost(url: str, n: int) -> tuple[float, float]:
    """Server microseconds a member of a group of N: its end's flow-advance (calls of
    100), and its message's ack (ack_many of 100)."""
    client = dynoq.connect(url, prefix=_prefix())
    r = client.redis
    try:
        app, noop, done = _chord_tasks(client, Clock())
        h = app.chord([noop.s(i) for i in range(n)], done.s()).delay()
        q = app.queue("f")
        msgs: list[dynoq.Message] = []
        while len(msgs) < n:
            msgs += q.pop(1000)
        value = flows_core.encode_value(0, q.ops.limit)
        ends = []
        for m in msgs:
            member = flows_core.member_of(m)
            assert member is not None
            ends.append((member.leaf, value, False))
        before = _evalsha_usec(r)
        for i in range(0, n, 100):
            client.backend.run(
                flows_core.advance_many(client.prefix, h.id, q.ops.limit, ends[i : i + 100])
            )
        walked = _evalsha_usec(r)
        for i in range(0, n, 100):
            q.ack_many(msgs[i : i + 100])
        acked = _evalsha_usec(r)
        return (walked - before) / n, (acked - walked) / n
    finally:
        drop_prefix(r, client.prefix)
        client.close()


def large(url: str, n: int) -> tuple[float, float, float]:
    """A chord of N no-op members: the start's seconds, members' msgs/s, and the longest
    script call in ms (SLOWLOG)."""
    client = dynoq.connect(url, prefix=_prefix())
    r = client.redis
    try:
        r.config_set("slowlog-log-slower-than", 1000)
        r.slowlog_reset()
        started, ran = _run_chord(client, n)
        longest = max((e["duration"] for e in r.slowlog_get(128)), default=0) / 1000
        return started, n / ran, longest
    finally:
        drop_prefix(r, client.prefix)
        client.close()


def celery(python: str, url: str, n: int) -> float:
    """Celery's chord of N no-op tasks (benchmarks/celery_chord.py): messages a second."""
    script = Path(__file__).with_name("celery_chord.py")
    db_url = url if url.count("/") > 2 else url.rstrip("/") + "/0"
    run = subprocess.run(
        [python, str(script), db_url, str(n)], capture_output=True, text=True, timeout=900
    )
    if run.returncode != 0:
        raise SystemExit(f"celery_chord.py failed:\n{run.stderr[-2000:]}")
    return float(json.loads(run.stdout.strip().splitlines()[-1])["rate"])


def _percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--n", type=int, default=10_000)
    p.add_argument("--chords", type=int, default=200)
    p.add_argument("--celery-python", default=None)
    p.add_argument("--large", default="", help="chord sizes to start and run once: 10000,100000")
    args = p.parse_args()
    with server_url(args.url) as url:
        r = redis.Redis.from_url(url)
        print(f"server {server_version(r)}, N={args.n}, repeats={args.repeats}")
        rounds: list[dict[str, float]] = []
        for i in range(args.repeats):
            sides = [("plain", plain), ("group", group)]
            if i % 2:
                sides.reverse()
            got = {name: fn(url, args.n) for name, fn in sides}
            if args.celery_python:
                got["celery"] = celery(args.celery_python, url, args.n)
            rounds.append(got)
            print(f"round {i + 1}: " + ", ".join(f"{k} {v:,.0f}/s" for k, v in got.items()))
        delays = callback_delays(url, args.chords)
        costs = [server_cost(url, args.n) for _ in range(args.repeats)]
        rows: list[tuple[str, ...]] = [("figure", "median", "range", "ratio (range)")]
        ratios = [x["group"] / x["plain"] for x in rounds]
        for name in ("plain", "group", "celery"):
            values = [x[name] for x in rounds if name in x]
            if not values:
                continue
            rel = [x[name] / x["plain"] for x in rounds if name in x]
            rows.append(
                (
                    f"{name} msgs/s",
                    f"{median(values):,.0f}",
                    f"{min(values):,.0f}-{max(values):,.0f}",
                    f"{median(rel):.2f}x ({min(rel):.2f}-{max(rel):.2f})",
                )
            )
        rows.append(
            (
                f"callback delay ms ({args.chords} chords of {CHORD_MEMBERS})",
                f"{median(delays):.1f}",
                f"p99 {_percentile(delays, 0.99):.1f}, max {max(delays):.1f}",
                "",
            )
        )
        walks, acks = [c[0] for c in costs], [c[1] for c in costs]
        rows.append(
            (
                "server us a member: flow-advance",
                f"{median(walks):.2f}",
                f"{min(walks):.2f}-{max(walks):.2f}",
                f"{median([w / a for w, a in costs]):.2f}x the ack's",
            )
        )
        rows.append(
            (
                "server us a message: ack",
                f"{median(acks):.2f}",
                f"{min(acks):.2f}-{max(acks):.2f}",
                "",
            )
        )
        print(table(rows))
        print(f"group / plain: median {median(ratios):.2f}x (goal >= 0.8x)")
        sizes = [int(x) for x in args.large.split(",") if x]
        if sizes:
            big: list[tuple[str, ...]] = [
                ("chord of", "start s", "members msgs/s", "longest call ms")
            ]
            for n in sizes:
                started, rate, longest = large(url, n)
                big.append((f"{n:,}", f"{started:.2f}", f"{rate:,.0f}", f"{longest:.1f}"))
            print(table(big))
        r.close()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
