"""What the jobs share: the Spark session and the connection options."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

DEFAULT_MASTER = "local[2]"


def session(app: str, master: str | None = None) -> tuple[Any, bool]:
    """(SparkSession, whether this call started it). A session that is already running
    (spark-submit, a notebook, a test) is reused and must not be stopped by the job."""
    # Executors' Python must be this interpreter (where dynoq is installed), not PATH's.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    builder = (SparkSession.builder.appName(app)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "4"))
    from pyspark import SparkConf

    if master or not SparkConf().contains("spark.master"):  # spark-submit sets the master
        builder = builder.master(master or DEFAULT_MASTER)
        if (master or DEFAULT_MASTER).startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # local mode: loopback only
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark, True


def add_connection_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", default=os.environ.get("DYNOQ_URL"),
                        help="server URL (default: $DYNOQ_URL, else redis://localhost:6379/0); "
                             "embedded:// starts a private server for this run")
    parser.add_argument("--prefix", default=os.environ.get("DYNOQ_PREFIX", "dq"),
                        help="key prefix (default: $DYNOQ_PREFIX, else dq)")
    parser.add_argument("--master", default=None,
                        help=f"Spark master (default: spark-submit's, else {DEFAULT_MASTER})")


def columns(text: str | None) -> list[str] | None:
    """'a,b , c' -> ['a', 'b', 'c']; None stays None."""
    return None if text is None else [c.strip() for c in text.split(",") if c.strip()]

