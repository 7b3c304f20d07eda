"""What the epoch check (QueueGone, DESIGN §2.12) costs the server on the hot paths, in one
run: the same scripts called with the queue's epoch (one GET of the shard's epoch key,
compared) and with "" (the check skipped: what a queue stored before epochs gets).

    python -m benchmarks.bench_epoch [--url redis://...] [--n 20000] [--repeats 7]

Each repeat runs, interleaved and in both orders, ``--n`` single pushes (pipelined, 500 a
round trip), ``--n`` pops of one message and ``--n`` acks of one (pipelined) per variant;
the server time per call is INFO commandstats' EVALSHA time over its calls, so client and
network noise do not count. Medians of the repeats.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis

import dynoq
from benchmarks.common import drop_prefix, median, parser, server_url, server_version, table
from dynoq._core.calls import Batch, Call
from dynoq._core.popping import Planner
from dynoq._core.queue import QueueOps

PREFIX = "bench-epoch"
PIPELINE = 500


def server_us(r: redis.Redis, work: Callable[[], Any]) -> float:
    """Server µs per EVALSHA while ``work`` ran."""

    def evalsha() -> tuple[int, int]:
        s = r.info("commandstats").get("cmdstat_evalsha", {"calls": 0, "usec": 0})
        return int(s["calls"]), int(s["usec"])

    calls0, usec0 = evalsha()
    work()
    calls1, usec1 = evalsha()
    return (usec1 - usec0) / max(calls1 - calls0, 1)


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--n", type=int, default=20_000)
    p.set_defaults(repeats=7)
    args = p.parse_args()
    n = args.n
    with server_url(args.url) as url:
        r = redis.Redis.from_url(url)
        client = dynoq.connect(url, prefix=PREFIX)
        q = client.queue("hot", shards=1)
        checked = q.ops
        unchecked = QueueOps(PREFIX, "hot", q.settings)  # epoch "": no GET, no compare
        assert checked.epoch and not unchecked.epoch
        backend = client.backend
        payload = b"x" * 100
        results: dict[tuple[str, str], list[float]] = {}

        def push(ops: QueueOps) -> None:
            outs = [ops.prepare(dynoq.Message(payload)) for _ in range(n)]
            for i in range(0, n, PIPELINE):
                calls = [ops.push([o]) for o in outs[i : i + PIPELINE]]
                backend.run(Batch([c for c in calls if isinstance(c, Call)]))

        def pop_ack(ops: QueueOps) -> tuple[float, float]:
            popped: list[dynoq.Message] = []
            planner = Planner(ops)

            def pop() -> None:
                for _ in range(n):
                    popped.extend(backend.drive(planner.pop(1)))

            def ack() -> None:
                for i in range(0, len(popped), PIPELINE):
                    backend.run(
                        Batch([c for m in popped[i : i + PIPELINE] for c in ops.ack_calls([m])])
                    )

            return server_us(r, pop), server_us(r, ack)

        try:
            for rep in range(args.repeats):
                order = [("epoch", checked), ("none", unchecked)]
                for name, ops in order if rep % 2 == 0 else order[::-1]:
                    results.setdefault(("push", name), []).append(
                        server_us(r, lambda ops=ops: push(ops))
                    )  # type: ignore[misc]
                    pop_us, ack_us = pop_ack(ops)
                    results.setdefault(("pop", name), []).append(pop_us)
                    results.setdefault(("ack", name), []).append(ack_us)
        finally:
            drop_prefix(r, PREFIX)
            client.close()
        print(
            f"server {server_version(r)}; {n:,} calls of each per variant, medians of "
            f"{args.repeats} interleaved repeats; server µs per call (INFO commandstats)"
        )
        rows: list[tuple[str, ...]] = [
            ("script", "no check (µs)", "epoch check (µs)", "added (µs)", "ratio")
        ]
        for op in ("push", "pop", "ack"):
            none, epoch = median(results[(op, "none")]), median(results[(op, "epoch")])
            rows.append(
                (op, f"{none:.2f}", f"{epoch:.2f}", f"{epoch - none:+.2f}", f"{epoch / none:.3f}x")
            )
        print(table(rows))
        r.close()


if __name__ == "__main__":
    main()
