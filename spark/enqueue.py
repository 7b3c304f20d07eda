"""Enqueue rows of a Parquet, CSV or JSON file (or directory) into a dynoq queue.

    python -m spark.enqueue orders.parquet --queue orders --id-col order_id \\
        --key-col customer --rename ts=created_at --payload-cols order_id,amount,created_at

Each row becomes one message: --id-col gives its id (rows with an id already in the queue
are skipped, so a re-run pushes nothing twice; ids acked since come back unless the queue
has a dedupe window), --key-col its ordering key (ordered queues), --delay-col
its delay (seconds or a due timestamp), --priority-col its priority; the payload is the
dict of --payload-cols (default: every column). --rename is applied first, so every other
option names the renamed columns. A row that makes no valid message (a null id, key or
delay, ...) is refused and listed, and the others are written.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

if not __package__:  # run as a script (spark-submit spark/enqueue.py): find the package
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import dynoq
from dynoq.spark import write
from spark._common import add_connection_args, columns, session

FORMATS = ("parquet", "csv", "json")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m spark.enqueue",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("input", help="a file or directory path (local or any Spark filesystem)")
    p.add_argument(
        "--format", choices=FORMATS, help="input format (default: from the file extension)"
    )
    p.add_argument("--queue", required=True, help="queue name")
    p.add_argument("--id-col", required=True, help="column of message ids (str or int)")
    p.add_argument("--key-col", help="column of ordering keys (ordered queues route by it)")
    p.add_argument(
        "--delay-col",
        help="column of delays: seconds, a due timestamp or a "
        "day-time interval (a row with none is refused)",
    )
    p.add_argument("--priority-col", help="column of priorities, 0..99 (lower first)")
    p.add_argument("--payload-cols", help="comma-separated payload columns (default: all)")
    p.add_argument(
        "--rename",
        action="append",
        default=[],
        metavar="OLD=NEW",
        help="rename a column before mapping (repeatable)",
    )
    p.add_argument("--shards", type=int, help="shards of the queue if it is new")
    p.add_argument("--ordered", action="store_true", help="create an ordered queue if new")
    p.add_argument("--batch-size", type=int, default=1000, help="rows per push (1000)")
    add_connection_args(p)
    return p


def read(spark: Any, path: str, fmt: str | None) -> Any:
    fmt = fmt or os.path.splitext(path.rstrip("/"))[1].lstrip(".").lower()
    if fmt == "jsonl":
        fmt = "json"
    if fmt not in FORMATS:
        raise SystemExit(f"cannot tell the format of {path!r}: pass --format " + "|".join(FORMATS))
    reader = spark.read
    if fmt == "csv":
        reader = reader.option("header", "true").option("inferSchema", "true")
    return reader.format(fmt).load(path)


def rename(df: Any, pairs: list[str]) -> Any:
    for pair in pairs:
        old, sep, new = pair.partition("=")
        if not sep or not old or not new:
            raise SystemExit(f"--rename takes OLD=NEW, got {pair!r}")
        if old not in df.columns:
            raise SystemExit(f"--rename: no column {old!r} (columns: {', '.join(df.columns)})")
        df = df.withColumnRenamed(old, new)
    return df


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    spark, started = session("dynoq-enqueue", args.master)
    try:
        with dynoq.connect(args.url, prefix=args.prefix) as client:
            # Open the queue here, so its settings are the ones asked for, not defaults.
            client.queue(args.queue, shards=args.shards, ordered=args.ordered or None)
            df = rename(read(spark, args.input, args.format), args.rename)
            done = write(
                df,
                client,
                args.queue,
                id_col=args.id_col,
                key_col=args.key_col,
                delay_col=args.delay_col,
                priority_col=args.priority_col,
                payload_cols=columns(args.payload_cols),
                batch_size=args.batch_size,
            )
        print(
            f"{args.queue}: pushed {done.pushed} messages, skipped {done.skipped} "
            f"duplicates, refused {done.refused - done.invalid} acked within the dedupe "
            f"window and {done.invalid} invalid rows ({len(done.partitions)} partitions)"
        )
        for part, rejection in done.rejected:
            print(f"  refused: partition {part} {rejection}")
        return 0
    finally:
        if started:
            spark.stop()


if __name__ == "__main__":
    sys.exit(main())
