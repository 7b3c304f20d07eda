"""What the jobs share: the Spark session (dynoq.spark's one builder) and the options."""

from __future__ import annotations

import argparse
import os
from typing import Any

from dynoq.spark.session import DEFAULT_MASTER


def session(app: str, master: str | None = None) -> tuple[Any, bool]:
    """(SparkSession, whether this call started it); see dynoq.spark.spark_session."""
    from dynoq.spark import spark_session

    return spark_session(app, master)


def add_connection_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        default=os.environ.get("DYNOQ_URL"),
        help="server URL (default: $DYNOQ_URL, else redis://localhost:6379/0); "
        "embedded:// starts a private server for this run",
    )
    parser.add_argument(
        "--prefix",
        default=os.environ.get("DYNOQ_PREFIX", "dq"),
        help="key prefix (default: $DYNOQ_PREFIX, else dq)",
    )
    parser.add_argument(
        "--master",
        default=None,
        help=f"Spark master (default: spark-submit's, else {DEFAULT_MASTER}: "
        "local threads that retry a failed task)",
    )


def columns(text: str | None) -> list[str] | None:
    """'a,b , c' -> ['a', 'b', 'c']; None stays None."""
    return None if text is None else [c.strip() for c in text.split(",") if c.strip()]
