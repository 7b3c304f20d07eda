"""Export a queue's waiting and dead messages to Parquet (or JSON/CSV) for audit.

    python -m spark.export --queue orders --output /tmp/orders-audit.parquet

Columns: id, state (ready, delayed, unacked, dead), shard, key, priority, attempts,
enqueued_at, deliver_at, dead_at, visibility_deadline (UTC timestamps), payload and
headers (JSON text; bytes as {"$base64": ...}), error_type and error (why it last
failed). In-flight (unacked) messages are exported only when --states names them. It
reads with spark.read.format("dynoq"), one partition per shard, read-only, a page at a
time on the executors: nothing is claimed, so it is safe on a live queue, but it is no
snapshot (docs/spark.md, "Reading").
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

if not __package__:  # run as a script (spark-submit spark/export.py): find the package
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import dynoq
from dynoq.spark import queue_dataframe
from dynoq.spark.export import DEFAULT_STATES, STATES
from spark._common import add_connection_args, columns, session


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m spark.export",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--queue", required=True, help="queue name")
    p.add_argument("--output", required=True, help="output path (overwritten)")
    p.add_argument("--format", choices=("parquet", "json", "csv"), default="parquet")
    p.add_argument(
        "--states",
        default=",".join(DEFAULT_STATES),
        help=f"comma-separated states out of {','.join(STATES)} "
        f"(default: {','.join(DEFAULT_STATES)})",
    )
    add_connection_args(p)
    return p


def export(
    spark: Any,
    client: dynoq.Client,
    queue: str,
    output: str,
    *,
    fmt: str = "parquet",
    states: list[str] | None = None,
) -> dict[str, int]:
    """Write the queue's messages to ``output``; returns the count per state."""
    df = queue_dataframe(spark, client, queue, states=states or DEFAULT_STATES)
    writer = df.write.mode("overwrite")
    if fmt == "csv":
        writer = writer.option("header", "true")
    writer.format(fmt).save(output)
    written = (
        spark.read.format(fmt).options(header="true").load(output)
        if fmt == "csv"
        else spark.read.format(fmt).load(output)
    )
    return {r["state"]: r["count"] for r in written.groupBy("state").count().collect()}


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    spark, started = session("dynoq-export", args.master)
    try:
        with dynoq.connect(args.url, prefix=args.prefix) as client:
            counts = export(
                spark, client, args.queue, args.output, fmt=args.format, states=columns(args.states)
            )
        total = sum(counts.values())
        detail = ", ".join(f"{s} {n}" for s, n in sorted(counts.items())) or "empty"
        print(f"{args.queue}: exported {total} messages to {args.output} ({detail})")
        return 0
    finally:
        if started:
            spark.stop()


if __name__ == "__main__":
    sys.exit(main())
