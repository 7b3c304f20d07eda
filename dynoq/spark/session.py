"""The one SparkSession builder of dynoq's demo, pipeline jobs, tests and benchmarks.

``local[2,4]`` is the default master: two threads, and a failed task is retried up to
four times (plain ``local[N]`` never retries a task, so it would never exercise the
retry paths the sinks are built for). A session that is already running (spark-submit,
a notebook, a test) is reused and must not be stopped by the caller; every session gets
``format("dynoq")`` registered.
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any

DEFAULT_MASTER = "local[2,4]"

_QUIET_LOG4J = """rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def _quiet_log4j() -> str:
    """A log4j2 config that shows only errors (for output that must stay readable)."""
    path = os.path.join(tempfile.gettempdir(), "dynoq-spark-log4j2.properties")
    with open(path, "w", encoding="utf-8") as f:
        f.write(_QUIET_LOG4J)
    return path


def spark_session(app: str = "dynoq", master: str | None = None, *, quiet: bool = False,
            config: dict[str, str] | None = None) -> tuple[Any, bool]:
    """(SparkSession, whether this call started it).

    ``master``: the Spark master (default: spark-submit's, else ``local[2,4]``).
    ``quiet``: keep the JVM's start-up log lines off the terminal. ``config``: more
    Spark settings for a new session. Raises ImportError without pyspark."""
    # Executors' Python must be this interpreter (where dynoq is installed), not PATH's.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    from .datasource import register

    active = SparkSession.getActiveSession()
    if active is not None:
        register(active)
        return active, False
    builder = (SparkSession.builder.appName(app)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "4"))
    settings = dict(config or {})
    if quiet:
        java = settings.get("spark.driver.extraJavaOptions", "")
        settings["spark.driver.extraJavaOptions"] = (
            f"{java} -Dlog4j2.configurationFile={_quiet_log4j()}".strip())
    for key, value in settings.items():
        builder = builder.config(key, value)
    if master or not SparkConf().contains("spark.master"):  # spark-submit sets the master
        chosen = master or DEFAULT_MASTER
        builder = builder.master(chosen)
        if chosen.startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # local mode: loopback only
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark, True
