"""The one SparkSession builder of dynoq's demo, pipeline jobs, tests and benchmarks.

What the user's Spark set-up says wins; dynoq only fills in what nobody set:

- the master: spark-submit's ``--master`` (or its default), ``spark.master`` in
  ``spark-defaults.conf`` or ``PYSPARK_SUBMIT_ARGS``, Spark's ``MASTER`` or dynoq's
  ``SPARK_MASTER`` environment variable; else ``local[2,4]``: two threads, and a failed
  task is retried up to four times (plain ``local[N]`` never retries a task, so it
  would never exercise the retry paths the sinks are built for);
- ``spark.ui.enabled=false``, ``spark.ui.showConsoleProgress=false`` and
  ``spark.sql.shuffle.partitions=4`` (small local jobs), unless set anywhere
  (``--conf``, ``spark-defaults.conf``, ``config=``).

Arguments given in code (``master=``, ``config=``) win over both, as they do in Spark's
own builder. A session that is already running (spark-submit's, a notebook's, one made
in another thread) is reused and must not be stopped by the caller; every session gets
``format("dynoq")`` registered (:func:`dynoq.spark.register`).
"""

from __future__ import annotations

import os
import shlex
import sys
import tempfile
from typing import Any

DEFAULT_MASTER = "local[2,4]"
DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
}
SPARK_SUBMITS_MASTER = "local[*]"  # what spark-submit runs on when nobody chose

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


def spark_session(
    app: str = "dynoq",
    master: str | None = None,
    *,
    quiet: bool = False,
    config: dict[str, str] | None = None,
) -> tuple[Any, bool]:
    """(SparkSession, whether this call started it).

    ``master``: the Spark master (default: the one spark-submit or your Spark
    configuration names, else ``local[2,4]``). ``quiet``: keep the JVM's start-up log
    lines off the terminal (when this call starts the JVM). ``config``: more Spark
    settings for a new session. Raises ImportError without pyspark."""
    # Executors' Python must be this interpreter (where dynoq is installed), not PATH's.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    from .datasource import register

    if SparkContext._active_spark_context is not None:  # running, maybe in another thread
        spark = SparkSession.builder.getOrCreate()
        register(spark)
        return spark, False
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit started the JVM
    settings = dict(config or {})
    if quiet and not submitted:
        java = settings.get("spark.driver.extraJavaOptions", "")
        settings["spark.driver.extraJavaOptions"] = (
            f"{java} -Dlog4j2.configurationFile={_quiet_log4j()}".strip()
        )
    launch = SparkConf(loadDefaults=False).setAll(list(settings.items()))
    if master:
        launch.setMaster(master)
    # Start (or, under spark-submit, join) the JVM first: its configuration is what
    # spark-submit, spark-defaults.conf and the environment set, read back below.
    SparkContext._ensure_initialized(conf=launch)
    given = SparkConf()
    builder = SparkSession.builder
    if given.get("spark.app.name", "pyspark-shell") == "pyspark-shell":
        builder = builder.appName(app)  # spark-submit's --name (or its file name) stays
    for key, value in _unset_defaults(given, submitted).items():
        builder = builder.config(key, value)
    for key, value in settings.items():
        builder = builder.config(key, value)
    chosen = _master_to_set(master, submitted, given)
    if chosen:
        builder = builder.master(chosen)
        if chosen.startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # local mode: loopback only
    spark = builder.getOrCreate()
    if not submitted:
        spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark, True


def _unset_defaults(given: Any, submitted: bool) -> dict[str, str]:
    """The DEFAULTS nobody set: not in the JVM's configuration (``given``, a SparkConf);
    console progress also when only a JVM started from Python has it (a "pyspark-shell",
    which spark-submit gives progress bars by default: not a choice anyone made)."""
    return {
        key: value
        for key, value in DEFAULTS.items()
        if not given.contains(key)
        or (key == "spark.ui.showConsoleProgress" and not submitted and not _named(key))
    }


def _master_to_set(master: str | None, submitted: bool, given: Any) -> str | None:
    """The master the builder is given: ``master`` (given in code) wins; else none when
    spark-submit or the user's configuration chose one (``given``: the JVM's SparkConf),
    else $SPARK_MASTER or DEFAULT_MASTER."""
    return master or (
        None
        if submitted or _master_chosen(given.get("spark.master"))
        else os.environ.get("SPARK_MASTER") or DEFAULT_MASTER
    )


def _master_chosen(jvm_master: str | None) -> bool:
    """Whether someone chose the master the JVM was started with (it always has one:
    spark-submit's default, local[*], when nobody did)."""
    if os.environ.get("MASTER") or jvm_master not in (None, SPARK_SUBMITS_MASTER):
        return True
    if "--master" in shlex.split(os.environ.get("PYSPARK_SUBMIT_ARGS", "")):
        return True
    return _named("spark.master")


def _named(key: str) -> bool:
    """Whether PYSPARK_SUBMIT_ARGS or spark-defaults.conf sets ``key`` (to the value the
    JVM has anyway, so only the files tell)."""
    if key in os.environ.get("PYSPARK_SUBMIT_ARGS", ""):
        return True
    folder = os.environ.get("SPARK_CONF_DIR")
    if not folder:
        home = os.environ.get("SPARK_HOME")
        if not home:
            import pyspark

            home = os.path.dirname(os.path.abspath(pyspark.__file__))
        folder = os.path.join(home, "conf")
    try:
        with open(os.path.join(folder, "spark-defaults.conf"), encoding="utf-8") as f:
            return any(line.strip().replace("=", " ").split(None, 1)[:1] == [key] for line in f)
    except OSError:
        return False
