"""The demo pipeline: order events into an ordered queue, cancel timers into a delay queue.

    python -m spark.demo_pipeline --orders 5000 --cancel-after 5

Spark generates order events (created, paid, shipped, completed; every --unpaid-every-th
order is never paid) and pushes them with dynoq.spark.write into an ORDERED queue keyed
by order id, plus one delayed "cancel if unpaid" timer per order into a concurrent delay
queue. Consumers apply the events in order and fire the timers when due: unpaid orders
are cancelled, paid orders' timers are acked as no-ops. The report says what each stage
took and did, and checks order, duplicates and cancellations (never before their due
time). `dynoq demo` runs the same on the embedded server.
"""

from __future__ import annotations

import argparse
import os
import sys

if not __package__:  # run as a script (spark-submit spark/demo_pipeline.py)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from dynoq.cli import demo
from spark._common import DEFAULT_MASTER, session


def parser() -> argparse.ArgumentParser:
    d = demo.DemoConfig()
    p = argparse.ArgumentParser(
        prog="python -m spark.demo_pipeline",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--url",
        default=os.environ.get("DYNOQ_URL") or "embedded://",
        help="server URL (default: $DYNOQ_URL, else a private embedded server)",
    )
    p.add_argument("--orders", type=int, default=d.orders, help=f"orders ({d.orders})")
    p.add_argument(
        "--unpaid-every",
        type=int,
        default=d.unpaid_every,
        help=f"every N-th order is never paid ({d.unpaid_every})",
    )
    p.add_argument(
        "--cancel-after",
        type=float,
        default=d.cancel_after,
        help=f"seconds until each order's cancel timer ({d.cancel_after})",
    )
    p.add_argument(
        "--consumers",
        type=int,
        default=d.consumers,
        help=f"consumer threads per queue ({d.consumers})",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=d.timeout,
        help=f"give up waiting for the consumers after this long ({d.timeout})",
    )
    p.add_argument(
        "--prefix",
        default=os.environ.get("DYNOQ_PREFIX", demo.PREFIX),
        help=f"key prefix (default: $DYNOQ_PREFIX, else {demo.PREFIX})",
    )
    p.add_argument(
        "--master",
        default=None,
        help=f"Spark master (default: spark-submit's, else {DEFAULT_MASTER})",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    spark, started = session("dynoq-demo-pipeline", args.master)
    cfg = demo.DemoConfig(
        orders=args.orders,
        unpaid_every=args.unpaid_every,
        cancel_after=args.cancel_after,
        consumers=args.consumers,
        timeout=args.timeout,
    )
    try:
        return demo.main(args.url, cfg, prefix=args.prefix)  # reuses the running session
    finally:
        if started:
            spark.stop()


if __name__ == "__main__":
    sys.exit(main())
