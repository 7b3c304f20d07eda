"""The chaos soak's worker processes (``python -m benchmarks.chaos_roles
producer|consumer|consumer-async``).

Both read the server from ``DYNOQ_URL`` and the soak's prefix from ``DYNOQ_PREFIX`` (the
URL stays out of the process list), name their connections ``<prefix>:<name>`` (so the
harness kills only the soak's connections on a shared server), ride out a server that is
down, and stop cleanly on SIGTERM. SIGKILL is the point: whatever state a kill leaves,
a restarted process (same name, next generation) carries on from Redis.

A producer ``p<i>`` pushes, step after step, one message to the concurrent queue (with a
delay and a priority) and one to the ordered queue (key ``p<i>-k<j>``, with its per-key
sequence number), each with a deterministic id through ``ensure`` retried until it is
confirmed; then it records both ids and its next step in Redis. A restart resumes at the
recorded step: the queues' dedupe window makes the repeated ``ensure`` of a step that was
confirmed but not yet recorded a no-op, even when that message was already consumed.

A consumer ``c<i>`` consumes the queues (dynoq's public consumer API: threads, or with
``consumer-async`` tasks on dynoq.asyncio's event loop); its handler first
records the call (:mod:`benchmarks.chaos_check` reads it back), then works a little, and
now and then fails on purpose (a retry) or outlives its visibility timeout.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import random
import threading
import time
import zlib
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import dynoq
import dynoq.asyncio
from dynoq._core.calls import Batch, Cmd  # the backend's requests: WAIT on the writer's node
from dynoq.signals import StopOnSignals

from .chaos_check import handling_value, pushed_value

T = TypeVar("T")

JOBS, ORDERED = "jobs", "ordered"  # the soak's two queues
GROUPS = "groups"  # and its message groups (ordered="key"): the ordered stream again
GROUP = "soak"
RECORD_LUA = (Path(__file__).with_name("chaos_record.lua")).read_text()
FAIL_RATE = 0.02  # first deliveries whose handler fails on purpose (a retry)
SLOW_RATE = 0.003  # first deliveries whose handler outlives its visibility timeout


# -- keys of the soak's own records, under the soak's prefix -------------------------------


def record_key(prefix: str, queue: str, shard: int) -> str:
    """Hash of the handler calls on one shard; shares the shard's hash tag (and node)."""
    return f"{prefix}:soak:{{{queue}:{shard}}}:handled"


def ended_key(prefix: str, queue: str, shard: int) -> str:
    """Hash of when the handler calls on one shard were done (call id -> the record);
    written for the message groups, whose keys may not be handled twice at once."""
    return f"{prefix}:soak:{{{queue}:{shard}}}:ended"


def pushed_key(prefix: str, producer: str) -> str:
    """Hash id -> what was pushed, of the pushes one producer saw confirmed."""
    return f"{prefix}:soak:pushed:{{{producer}}}"


def next_key(prefix: str, producer: str) -> str:
    """The producer's next step (same hash tag as its pushed hash)."""
    return f"{prefix}:soak:next:{{{producer}}}"


class NotConfirmed(dynoq.DynoqError):
    """A record reached the master but no replica confirmed it in time."""


class PlannedFailure(Exception):
    """The handler fails on purpose, so the soak exercises retries."""


def write(client: dynoq.Client, cmds: list[Cmd], replicas: int) -> list[Any]:
    """Run ``cmds`` in one round trip; with ``replicas``, also WAIT for that many replicas
    on the node that took them (a record lost in a failover would read as a lost message)."""
    if not replicas:
        return list(client.backend.run(Batch(cmds)))
    *replies, acked = client.backend.run(Batch(cmds, wait=(replicas, 2000)))
    if int(acked) < replicas:
        raise NotConfirmed(f"{acked} of {replicas} replicas confirmed a soak record")
    return list(replies)


async def awrite(client: dynoq.asyncio.Client, cmds: list[Cmd], replicas: int) -> list[Any]:
    """:func:`write` on an asyncio client."""
    if not replicas:
        return list(await client.backend.run(Batch(cmds)))
    *replies, acked = await client.backend.run(Batch(cmds, wait=(replicas, 2000)))
    if int(acked) < replicas:
        raise NotConfirmed(f"{acked} of {replicas} replicas confirmed a soak record")
    return list(replies)


# What a server that is restarting, failing over or dropping connections raises; any
# other error is a bug and ends the process (its log says why).
TRANSIENT = (dynoq.ConnectionFailed, dynoq.ServerError, dynoq.ReplicationError, NotConfirmed)


def until_done(fn: Callable[[], T]) -> T:
    """``fn()`` retried while the server is away, with a short backoff."""
    failures = 0
    while True:
        try:
            return fn()
        except TRANSIENT:
            failures += 1
            time.sleep(min(0.02 * 2 ** min(failures, 6), 1.0) * random.uniform(0.5, 1.0))


async def until_done_async(fn: Callable[[], Awaitable[T]]) -> T:
    """:func:`until_done` on an event loop."""
    failures = 0
    while True:
        try:
            return await fn()
        except TRANSIENT:
            failures += 1
            await asyncio.sleep(min(0.02 * 2 ** min(failures, 6), 1.0) * random.uniform(0.5, 1.0))


def _start(client: Any, queue: Any, handler: Any, options: dict[str, Any]) -> Any:
    """A new consumer, started (its start(): a coroutine on the asyncio client)."""
    return client.consumer(queue, handler, **options).start()


def _fraction(msg_id: str, salt: str) -> float:
    return zlib.crc32(f"{salt}:{msg_id}".encode()) / 2**32


def _connect(name: str) -> dynoq.Client:
    prefix = os.environ["DYNOQ_PREFIX"]
    return until_done(
        lambda: dynoq.connect(
            None,
            prefix=prefix,
            client_name=f"{prefix}:{name}",
            socket_timeout=10,
            socket_connect_timeout=2,
        )
    )


def _stop_on_sigterm() -> threading.Event:
    stop = threading.Event()
    StopOnSignals(stop).__enter__()  # for the rest of the process (see dynoq.signals)
    return stop


# -- producer ------------------------------------------------------------------------------


def produce(args: argparse.Namespace) -> None:
    stop = _stop_on_sigterm()
    client = _connect(args.name)
    jobs = until_done(lambda: client.queue(JOBS))
    ordered = until_done(lambda: client.queue(ORDERED))
    groups = until_done(lambda: client.queue(GROUPS))
    keyed = ordered.settings.ordered  # False when the soak plants the "unordered" fault
    prefix, name = client.prefix, args.name
    raw = until_done(lambda: client.backend.run(Cmd(("GET", next_key(prefix, name)))))
    step = int(raw or 0)
    period = 1.0 / args.rate
    while not stop.is_set():
        started = time.monotonic()
        rnd = random.Random(f"{name}:{step}")  # a resent step pushes the same messages
        key, seq = f"{name}-k{step % args.keys}", step // args.keys
        job_id, ord_id, grp_id = f"j-{name}-{step}", f"o-{name}-{step}", f"g-{name}-{step}"
        delay = rnd.uniform(0.1, 1.5) if rnd.random() < 0.3 else 0.0
        # Each step's arguments are made once: a resent step pushes the same messages.
        priority = rnd.randrange(10)
        until_done(partial(jobs.ensure, {"n": step}, id=job_id, delay=delay, priority=priority))
        ord_key = key if keyed else None
        until_done(partial(ordered.ensure, {"key": key, "seq": seq}, id=ord_id, key=ord_key))
        until_done(partial(groups.ensure, {"key": key, "seq": seq}, id=grp_id, key=key))
        cmds = [
            Cmd(
                (
                    "HSET",
                    pushed_key(prefix, name),
                    job_id,
                    pushed_value(JOBS, None, None),
                    ord_id,
                    pushed_value(ORDERED, key, seq),
                    grp_id,
                    pushed_value(GROUPS, key, seq),
                )
            ),
            Cmd(("SET", next_key(prefix, name), step + 1)),
        ]
        until_done(lambda: write(client, cmds, args.replicas))  # noqa: B023
        step += 1
        stop.wait(max(0.0, period - (time.monotonic() - started)))
    client.close()


# -- consumer ------------------------------------------------------------------------------


class Handling:
    """What a consumer's handler does with one delivery, apart from its I/O (shared by the
    thread and the asyncio consumer): the record it writes first, how long it works (past
    the visibility, now and then), the end it records on a keyed queue, whether it fails
    on purpose."""

    def __init__(
        self, me: str, prefix: str, queue: Any, msg: dynoq.Message, call: str, nap: float
    ) -> None:
        """``queue``: a dynoq.Queue or a dynoq.asyncio.Queue (only its name and keys are
        read); ``call``: this call's unique name."""
        assert msg.id is not None and msg.shard is not None
        first = msg.attempts == 1
        self.msg, self.call, self.name = msg, call, queue.name
        self.prefix = prefix
        keys = queue.ops.shard_keys[msg.shard]
        keyed = queue.ops.keyed  # message groups (the "groups" queue)
        # What fences this delivery: an ordered shard's lease, a message group's key fence
        if keyed:
            assert msg.key is not None and msg.fence is not None
            self.fenced_by, self.fence, self.key = keys.kfence, str(msg.fence), msg.key
        else:
            self.fenced_by, self.fence, self.key = keys.lease, msg.lease or "", ""
        self.planned = first and _fraction(msg.id, "fail") < FAIL_RATE
        payload = msg.payload if isinstance(msg.payload, dict) else {}
        self.value = handling_value(
            me,
            queue.name,
            msg.id,
            payload.get("key"),
            payload.get("seq"),
            msg.shard,
            msg.fence,
            msg.attempts,
            self.planned,
        )
        # keeps messages in flight; now and then its visibility runs out meanwhile
        slow = first and _fraction(msg.id, "slow") < SLOW_RATE
        self.work = random.uniform(0.005, 0.05) + (nap if slow else 0.0)
        self.ends_a_key = keyed  # done: the key's next message may start now

    def started(self) -> Cmd:
        # Recorded before anything else; a call that cannot record raises, so the message
        # is retried, as a real handler whose effect failed would be.
        key = record_key(self.prefix, self.name, self.msg.shard or 0)
        return Cmd(
            (
                "EVAL",
                RECORD_LUA,
                2,
                self.fenced_by,
                key,
                self.call,
                self.fence,
                self.value,
                self.key,
            )
        )

    def ended(self) -> Cmd:
        key = ended_key(self.prefix, self.name, self.msg.shard or 0)
        return Cmd(("EVAL", RECORD_LUA, 2, self.fenced_by, key, self.call, "", "end", ""))

    def failure(self) -> PlannedFailure | None:
        return PlannedFailure(f"planned failure of {self.msg.id}") if self.planned else None


def _options(args: argparse.Namespace, me: str) -> dict[str, Any]:
    return dict(
        group=GROUP,
        concurrency=args.concurrency,
        batch_size=args.batch_size,
        lease_ttl=args.lease_ttl,
        rebalance_interval=args.lease_ttl,
        idle_wait=0.5,
        instance_id=me,
        retry_delays=(0.3, 0.6, 1.0),
    )


def consume(args: argparse.Namespace) -> None:
    stop = _stop_on_sigterm()
    me = f"{args.name}.{args.gen}"  # this incarnation: the harness's kill events name it
    client = _connect(me)
    prefix, calls = client.prefix, itertools.count()

    def handler_for(queue: dynoq.Queue) -> Callable[[dynoq.Message], None]:
        def handle(msg: dynoq.Message) -> None:
            h = Handling(me, prefix, queue, msg, f"{me}:{next(calls)}", args.visibility + 0.5)
            write(client, [h.started()], args.replicas)
            time.sleep(h.work)
            if h.ends_a_key:
                write(client, [h.ended()], args.replicas)
            if (failure := h.failure()) is not None:
                raise failure

        return handle

    consumers = []
    for name in (JOBS, ORDERED, GROUPS):
        queue = until_done(lambda: client.queue(name))  # noqa: B023
        handler = handler_for(queue)
        # A consumer starts once: a start that failed half-way needs a new one.
        consumers.append(until_done(partial(_start, client, queue, handler, _options(args, me))))
    print("started", flush=True)
    stop.wait()
    for c in consumers:
        c.stop(10)
    client.close()


def consume_async(args: argparse.Namespace) -> None:
    """The consumer on dynoq.asyncio: its handlers are tasks on one event loop."""
    stop = _stop_on_sigterm()
    asyncio.run(_consume_async(args, stop))


async def _consume_async(args: argparse.Namespace, stop: threading.Event) -> None:
    me = f"{args.name}.{args.gen}"
    prefix = os.environ["DYNOQ_PREFIX"]
    client = dynoq.asyncio.connect(
        None,
        prefix=prefix,
        client_name=f"{prefix}:{me}",
        socket_timeout=10,
        socket_connect_timeout=2,
    )
    calls = itertools.count()

    def handler_for(queue: dynoq.asyncio.Queue) -> Callable[[dynoq.Message], Awaitable[None]]:
        async def handle(msg: dynoq.Message) -> None:
            h = Handling(me, prefix, queue, msg, f"{me}:{next(calls)}", args.visibility + 0.5)
            await awrite(client, [h.started()], args.replicas)
            await asyncio.sleep(h.work)
            if h.ends_a_key:
                await awrite(client, [h.ended()], args.replicas)
            if (failure := h.failure()) is not None:
                raise failure

        return handle

    consumers = []
    for name in (JOBS, ORDERED, GROUPS):
        queue = await until_done_async(lambda: client.queue(name))  # noqa: B023
        handler = handler_for(queue)
        consumers.append(
            await until_done_async(partial(_start, client, queue, handler, _options(args, me)))
        )
    print("started", flush=True)
    await asyncio.to_thread(stop.wait)
    for c in consumers:
        await c.stop(10)
    await client.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("role", choices=["producer", "consumer", "consumer-async"])
    ap.add_argument("--name", required=True)
    ap.add_argument("--gen", type=int, default=0, help="restart generation")
    ap.add_argument("--replicas", type=int, default=0, help="WAIT for this many replicas")
    ap.add_argument("--rate", type=float, default=10.0, help="producer steps per second")
    ap.add_argument("--keys", type=int, default=8, help="ordering keys per producer")
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--lease-ttl", type=float, default=3.0)
    ap.add_argument("--visibility", type=float, default=3.0)
    args = ap.parse_args(argv)
    {"producer": produce, "consumer": consume, "consumer-async": consume_async}[args.role](args)


if __name__ == "__main__":
    main()
