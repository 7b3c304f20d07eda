"""Every Spark writer stores, checks, refuses and counts the same way: ``format("dynoq")``
with the Arrow and the Row writer, ``partition_sink``, ``batch_sink`` and
``dynoq.spark.write``, on real PySpark and a real server (fixtures: tests/sparkkit.py)."""

from __future__ import annotations

import json
import logging
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from sparkframes import EVERY_TYPE, R1, WRITERS, write_with

import dynoq
from dynoq.spark import partition_sink, source_options

pytest.importorskip("pyspark")
pytestmark = pytest.mark.spark


def stored(q: dynoq.Queue) -> dict[str, Any]:
    return {m.id: m.payload for m in q.peek(100)}


# Five writers of one frame: about 35 s on a quiet machine, past the suite's 120 s when
# two cores are shared with other runs (seen in a loaded run).
@pytest.mark.timeout(300)
def test_every_type_is_stored_the_same_by_every_writer(spark: Any, sclient: dynoq.Client) -> None:
    df = spark.sql(EVERY_TYPE).repartition(2)
    r2 = {c: None for c in R1} | {"id": "r2"}
    payloads = {}
    for how in WRITERS:
        q = sclient.queue(how, shards=2)
        write_with(how, df, sclient, how, id_col="id")
        payloads[how] = stored(q)
        assert payloads[how] == {"r1": R1, "r2": r2}, how
    # ... and reads back as the same JSON, whoever wrote it.
    texts = {
        how: sorted(
            r["payload"]
            for r in spark.read.format("dynoq")
            .options(**source_options(sclient, how))
            .load()
            .collect()
        )
        for how in ("format-arrow", "partition_sink")
    }
    assert texts["format-arrow"] == texts["partition_sink"]
    assert json.loads(texts["format-arrow"][0])["bin"] == {"$base64": "AAE="}


def _jobs(spark: Any) -> list[int]:
    return list(spark.sparkContext.statusTracker().getJobIdsForGroup())


@pytest.mark.parametrize(
    ("select", "cols", "error"),
    [
        (
            "'r1' AS id, map(named_struct('a', 1), 'x') AS m",
            {"id_col": "id"},
            "column 'm' is a map keyed by struct",
        ),
        (
            "'r1' AS id, array(map(array(1), 'x')) AS m",
            {"id_col": "id"},
            "column 'm' (at m[]) is a map keyed by array",
        ),
        (
            "'r1' AS id, INTERVAL '1-2' YEAR TO MONTH AS ym",
            {"id_col": "id"},
            "column 'ym' is interval year to month, which has no payload form",
        ),
        ("X'01' AS id, 1 AS v", {"id_col": "id"}, "id column 'id' is binary"),
        (
            "'r1' AS id, '10' AS d",
            {"id_col": "id", "delay_col": "d"},
            "delay column 'd' is string: a delay is seconds",
        ),
    ],
)
def test_column_types_are_checked_on_the_driver_by_every_writer(
    spark: Any, sclient: dynoq.Client, select: str, cols: dict[str, str], error: str
) -> None:
    """A type that cannot be stored, or cannot be an id or a delay, fails before any task
    starts, with the column's name, whichever writer is used."""
    q = sclient.queue("typed", shards=2)
    df = spark.sql(f"SELECT {select}")
    for how in WRITERS:
        before = _jobs(spark)
        with pytest.raises(Exception, match=re.escape(error)) as info:
            write_with(how, df, sclient, "typed", **cols)
        if not how.startswith("format"):  # Spark wraps the data source's error in its own
            assert isinstance(info.value, dynoq.InvalidType), how
        assert _jobs(spark) == before, how  # refused on the driver: no job ran
    assert q.size() == 0


def test_partition_sink_without_a_schema_names_the_columns_pyspark_cannot_decode(
    spark: Any, sclient: dynoq.Client
) -> None:
    """Without schema=, a column PySpark cannot turn into a Row (a map keyed by arrays, a
    year-month interval) fails the job before the sink sees a row: the error says why and
    how to have it refused on the driver instead."""
    sclient.queue("undecodable", shards=1)
    for column in ("map(array(1), 'x')", "INTERVAL '1-2' YEAR TO MONTH"):
        df = spark.sql(f"SELECT 'r1' AS id, {column} AS v")
        with pytest.raises(
            Exception,
            match=r"(?s)InvalidType: PySpark cannot turn a row .*"
            r"give partition_sink schema=df.schema",
        ):
            df.foreachPartition(partition_sink(sclient, "undecodable", id_col="id"))
        with pytest.raises(dynoq.InvalidType, match="column 'v'"):
            partition_sink(sclient, "undecodable", id_col="id", schema=df.schema)


# -- every row counted once: pushed, skipped (duplicate), refused (with where and why) --------

BAD_ROWS = """SELECT
  CASE WHEN id = 10 THEN NULL WHEN id IN (20, 21) THEN 'e19' ELSE concat('e', id) END AS id,
  CASE WHEN id = 700 THEN double('NaN') WHEN id = 701 THEN NULL WHEN id = 702 THEN -1D
       ELSE 0D END AS delay,
  CASE WHEN id % 100 = 7 THEN NULL ELSE concat('k', id % 5) END AS key,
  id AS n
FROM range(0, 1000, 1, 2)"""  # two partitions: ids 0..499 and 500..999


@pytest.mark.parametrize("how", WRITERS)
def test_every_row_is_counted_once_and_bad_rows_are_refused_with_where_and_why(
    spark: Any, sclient: dynoq.Client, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Duplicates are skipped and counted; a null id, a null, NaN or negative delay, a null
    key on an ordered queue are refused per row (the rest is written), counted, and
    described on the driver with the row's partition, position and column. The counts
    of every writer, format("dynoq") included, reach the driver's log and Prometheus."""
    from prometheus_client import REGISTRY

    def counted(queue: str, outcome: str) -> float:
        labels = {"queue": queue, "outcome": outcome}
        return REGISTRY.get_sample_value("dynoq_spark_rows_total", labels) or 0.0

    df = spark.sql(BAD_ROWS)
    timers = sclient.queue(f"timers-{how}", shards=2)
    events = sclient.queue(f"events-{how}", shards=2, ordered=True)
    with caplog.at_level(logging.INFO, logger="dynoq.spark"):
        write_with(how, df.drop("key"), sclient, timers.name, id_col="id", delay_col="delay")
        write_with(how, df.drop("delay"), sclient, events.name, id_col="id", key_col="key")
    text = "\n".join(r.getMessage() for r in caplog.records if r.name == "dynoq.spark")
    # timers: 1000 rows = 994 pushed + 2 repeated ids + 4 invalid rows
    assert timers.size() == 994 and counted(timers.name, "pushed") == 994
    assert counted(timers.name, "skipped") == 2 and counted(timers.name, "refused") == 4
    for row, why in (
        (10, "column 'id': the id is null"),
        (200, "column 'delay': the delay is nan"),
        (201, "column 'delay': the delay is null"),
        (202, "column 'delay': the delay is -1.0"),
    ):
        part = 0 if row == 10 else 1
        assert f"partition {part} row {row}, {why}" in text, text
    assert timers.get("e19") is not None and timers.get("e700") is None
    # events (ordered): 10 null keys refused, as well as the null id
    assert events.size() == 1000 - 2 - 1 - 10
    assert counted(events.name, "refused") == 11 and counted(events.name, "skipped") == 2
    assert "row 7, column 'key': the key is null: an ordered queue" in text


def test_a_micro_batch_of_format_dynoq_is_counted_on_the_driver(
    spark: Any, sclient: dynoq.Client, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    q = sclient.queue("stream", shards=2)
    src = tmp_path / "in"
    src.mkdir()
    for f in range(2):
        (src / f"part-{f}.json").write_text(
            "\n".join(json.dumps({"id": f"e{f}-{i}", "n": i}) for i in range(30)) + "\n"
        )
    with caplog.at_level(logging.INFO, logger="dynoq.spark"):
        query = (
            spark.readStream.schema("id string, n long")
            .option("maxFilesPerTrigger", 1)
            .json(str(src))
            .writeStream.format("dynoq")
            .options(**source_options(sclient, "stream"))
            .option("idCol", "id")
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None
    batches = [r.getMessage() for r in caplog.records if "micro-batch" in r.getMessage()]
    assert len(batches) == 2 and q.size() == 60, batches
    assert all("pushed 30, skipped 0 as duplicates, refused 0" in b for b in batches)


def test_a_batch_write_needs_mode_append_and_the_docs_say_so(
    spark: Any, sclient: dynoq.Client
) -> None:
    """Spark refuses its default save mode for a Python data source before dynoq runs
    (the API cannot accept it); dynoq refuses overwrite, naming mode("append"); neither
    runs a job or writes anything, and docs/spark.md says mode("append") is needed."""
    q = sclient.queue("modes", shards=1)
    w = (
        spark.range(3)
        .write.format("dynoq")
        .options(**source_options(sclient, "modes"))
        .option("idCol", "id")
    )
    before = _jobs(spark)
    with pytest.raises(Exception, match="ErrorIfExists"):
        w.save()
    with pytest.raises(Exception, match=re.escape('use mode("append")')):
        w.mode("overwrite").save()
    assert _jobs(spark) == before and q.size() == 0
    w.mode("append").save()
    assert q.size() == 3
    docs = (Path(__file__).parents[1] / "docs" / "spark.md").read_text()
    assert 'A batch write needs `.mode("append")`' in docs


# -- a task retried after its Python worker was killed -------------------------------------------


def test_rows_a_killed_attempt_pushed_count_as_pushed_after_the_task_is_retried(
    spark: Any, sclient: dynoq.Client
) -> None:
    """Partition 0's Python worker is SIGKILLed once its first rows were pushed, and Spark
    runs the task again from its first row: every row counts once, as pushed (not as a
    duplicate), on the driver, whichever writer wrote it; the task's record of what its
    attempts pushed is gone when the write ends."""
    from prometheus_client import REGISTRY
    from pyspark import TaskContext

    def counted(queue: str, outcome: str) -> float:
        labels = {"queue": queue, "outcome": outcome}
        return REGISTRY.get_sample_value("dynoq_spark_rows_total", labels) or 0.0

    url, prefix, kills = sclient.url, sclient.prefix, f"{sclient.prefix}:test-kills"
    pad = "x" * 480  # Python workers' and the JVM's pipes are buffered (64 KiB): big rows
    #                  reach the writer while the worker upstream of it waits to be killed

    def killed_once(queue: str) -> Any:
        def upstream(batches: Any) -> Any:
            import os
            import signal
            import time

            import pyarrow as pa

            ctx = TaskContext.get()
            first = ctx is not None and ctx.attemptNumber() == 0 and ctx.partitionId() == 0
            rows = 0
            for rb in batches:
                yield pa.RecordBatch.from_arrays(
                    [pa.array([f"{i:04d}{pad}" for i in rb.column(0).to_pylist()])], names=["id"]
                )
                rows += rb.num_rows
                if first and rows >= 300:  # the writer pushed some: kill this worker
                    with dynoq.connect(url, prefix=prefix) as c:
                        q = c.open_existing(queue)
                        deadline = time.monotonic() + 30
                        while (
                            q is not None
                            and q.get(f"{0:04d}{pad}") is None
                            and time.monotonic() < deadline
                        ):
                            time.sleep(0.02)
                        c.redis.incr(kills)
                    os.kill(os.getpid(), signal.SIGKILL)

        return upstream

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "50")
    try:
        # the three ways a task's counts reach the driver: a data source's commit, an
        # accumulator (partition_sink), collected rows (batch_sink and write)
        for how in ("format-arrow", "partition_sink", "batch_sink"):
            q = sclient.queue(f"killed-{how}", shards=2)
            before = int(sclient.redis.get(kills) or 0)
            pushed, skipped = counted(q.name, "pushed"), counted(q.name, "skipped")
            df = spark.range(0, 800, 1, 2).mapInArrow(killed_once(q.name), "id string")
            write_with(how, df, sclient, q.name, id_col="id", batch_size=50)
            assert int(sclient.redis.get(kills)) == before + 1, how  # one worker killed
            assert q.size() == 800, how
            assert (counted(q.name, "pushed") - pushed, counted(q.name, "skipped") - skipped) == (
                800,
                0,
            ), how
            assert not sclient.redis.keys(f"{prefix}:*:tried:*"), how
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")


# -- threads -------------------------------------------------------------------------------------


def test_format_dynoq_from_a_thread_pool(spark: Any, sclient: dynoq.Client) -> None:
    """Spark looks data sources up in the calling thread's active session: register()
    (or spark_session()) in the thread makes format("dynoq") work there."""
    from dynoq.spark import register, spark_session

    q = sclient.queue("threads", shards=2)
    opts = source_options(sclient, "threads")
    names: list[str] = []

    def job(n: int) -> int:
        names.append(threading.current_thread().name)
        if n % 2:
            register(spark)
        else:
            assert spark_session()[0] is spark  # reuses the running session
        (
            spark.range(n * 100, n * 100 + 100)
            .write.format("dynoq")
            .options(**opts)
            .option("idCol", "id")
            .mode("append")
            .save()
        )
        return int(spark.read.format("dynoq").options(**opts).load().count())

    with ThreadPoolExecutor(2) as pool:
        counts = list(pool.map(job, range(4)))
    assert threading.main_thread().name not in names
    assert q.size() == 400 and max(counts) == 400


# -- a queue recreated under the executors ----------------------------------------------------


def test_a_write_after_the_queue_was_recreated_strands_no_row(
    spark: Any, sclient: dynoq.Client, server_url: str
) -> None:
    """The executors' Python workers opened the queue with 4 shards (and keep it); it is
    deleted and made again with 2 by a fresh client. A write must not push rows into
    shards the new queue does not have: it is refused (QueueGone), or it re-reads the
    queue and every row lands in it."""
    from helpers import delete_prefix

    opts = {**source_options(sclient, "gone"), "idCol": "id"}
    sclient.queue("gone", shards=4)
    spark.range(0, 60, 1, 2).write.format("dynoq").options(**opts).mode("append").save()
    delete_prefix(server_url, sclient.prefix)  # the server lost the queue
    with dynoq.connect(server_url, prefix=sclient.prefix) as fresh:
        q = fresh.queue("gone", shards=2)
        try:
            (spark.range(60, 120, 1, 2).write.format("dynoq").options(**opts).mode("append").save())
        except Exception as exc:  # noqa: BLE001 - Spark wraps the task's error
            assert "QueueGone" in str(exc)
        else:
            assert q.size() == 60
        stranded = [k for k in fresh.redis.scan_iter(f"{fresh.prefix}:{{gone:[23]}}:*")]
        assert not stranded, stranded
