"""The Spark sinks, jobs and demo on real PySpark (local mode) and a real server.

One SparkSession for the module: local[2,3] is local[2] that retries a failed task up to
3 times (plain local[N] never retries), which the retry test needs.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import redis

import dynoq
from dynoq.spark import batch_sink, partition_sink, write
from dynoq.spark_export import scan

pyspark = pytest.importorskip("pyspark")
pytestmark = pytest.mark.spark

from pyspark import TaskContext  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402


def _cleanup(url: str, prefix: str) -> None:
    with redis.Redis.from_url(url) as r:
        keys = list(r.scan_iter(match=f"{prefix}:*", count=1000))
        for i in range(0, len(keys), 500):
            r.delete(*keys[i:i + 500])


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # local mode: loopback only
    session = (SparkSession.builder.master("local[2,3]").appName("dynoq-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.default.parallelism", "2")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def server_url(request: pytest.FixtureRequest) -> str:
    """One real server for the Spark tests: $REDIS_URL if set, else the embedded one."""
    if os.environ.get("REDIS_URL"):
        return os.environ["REDIS_URL"]
    server = request.getfixturevalue("embedded_server")
    return f"redis://{server.host}:{server.port}/0"


@pytest.fixture
def sclient(server_url: str) -> Iterator[dynoq.Client]:
    prefix = f"dqt-{uuid.uuid4().hex[:12]}"
    c = dynoq.connect(server_url, prefix=prefix)
    yield c
    c.close()
    _cleanup(server_url, prefix)


def rows_df(spark: Any, n: int, parts: int = 4) -> Any:
    return (spark.range(0, n, numPartitions=parts)
            .withColumn("name", F.concat(F.lit("item-"), F.col("id").cast("string")))
            .withColumn("price", (F.col("id") % 1000).cast("decimal(10,2)"))
            .withColumn("day", F.date_add(F.lit(dt.date(2024, 1, 1)), (F.col("id") % 30)
                                          .cast("int")))
            .withColumn("tags", F.array(F.lit("a"), (F.col("id") % 3).cast("string"))))


def expected_payload(i: int) -> dict[str, Any]:
    return {"id": i, "name": f"item-{i}", "price": f"{i % 1000}.00",
            "day": (dt.date(2024, 1, 1) + dt.timedelta(days=i % 30)).isoformat(),
            "tags": ["a", str(i % 3)]}


def all_messages(q: dynoq.Queue) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in scan(q, states=("ready", "delayed", "unacked", "dead"))}


def test_partition_sink_pushes_each_row_once(spark: Any, sclient: dynoq.Client) -> None:
    n = 12_000
    q = sclient.queue("sink", shards=4)
    df = rows_df(spark, n)
    sink = partition_sink(sclient.url, "sink", id_col="id", prefix=sclient.prefix,
                          batch_size=500)
    df.foreachPartition(sink)
    got = all_messages(q)
    assert len(got) == n and q.size() == n
    assert set(got) == {str(i) for i in range(n)}
    for i in (0, 1, 4321, n - 1):
        assert json.loads(got[str(i)]["payload"]) == expected_payload(i)
    # Again, and repartitioned: nothing is pushed twice.
    df.foreachPartition(sink)
    df.repartition(7).foreachPartition(sink)
    assert write(df.repartition(3), sclient.url, "sink", id_col="id",
                 prefix=sclient.prefix) == (0, n)
    assert q.size() == n and q.stats().size == n


def test_arrow_write_counts_and_converts(spark: Any, sclient: dynoq.Client) -> None:
    q = sclient.queue("arrow", shards=2)
    df = rows_df(spark, 3000, parts=3).withColumn("prio", (F.col("id") % 10).cast("int"))
    assert write(df, sclient, "arrow", id_col="id", priority_col="prio",
                 payload_cols=["name", "price", "day", "tags", "id"],
                 prefix=sclient.prefix) == (3000, 0)
    m = q.get("42")
    assert m is not None and m.priority == 2
    assert m.payload == expected_payload(42)
    assert [x.priority for x in q.peek(5)] == [0] * 5


def test_delay_column_of_timestamps(spark: Any, sclient: dynoq.Client) -> None:
    q = sclient.queue("timers", shards=2)
    df = spark.range(20, numPartitions=2).withColumn(
        "due", F.when(F.col("id") % 2 == 0, F.expr("current_timestamp() + INTERVAL 1 HOUR"))
        .when(F.col("id") == 1, F.expr("current_timestamp() - INTERVAL 1 HOUR")))
    df.where("id < 10").foreachPartition(partition_sink(
        sclient.url, "timers", id_col="id", delay_col="due", prefix=sclient.prefix))
    write(df.where("id >= 10"), sclient.url, "timers", id_col="id", delay_col="due",
          prefix=sclient.prefix)
    stats = q.stats()
    assert (stats.delayed, stats.ready) == (10, 10)
    for i in (4, 12):
        m = q.get(str(i))
        assert m is not None and m.delay == pytest.approx(3600, abs=120)
        assert m.payload["due"].endswith("+00:00")  # a UTC ISO string in the payload
    overdue = q.get("1")
    assert overdue is not None and overdue.delay == 0


def test_unreachable_server_fails_the_job(spark: Any) -> None:
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    sink = partition_sink("redis://127.0.0.1:1/0", "nowhere", id_col="id",
                          retry=Retry(NoBackoff(), 0))  # fail fast: no reconnect loop
    with pytest.raises(Exception, match="ConnectionFailed"):
        spark.range(3, numPartitions=1).foreachPartition(sink)


def test_retried_task_pushes_each_row_once(spark: Any, sclient: dynoq.Client) -> None:
    n = 4000
    q = sclient.queue("retry", shards=4)
    sink = partition_sink(sclient.url, "retry", id_col="id", prefix=sclient.prefix,
                          batch_size=300)
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


def test_key_routing_keeps_partition_order_per_key(spark: Any,
                                                   sclient: dynoq.Client) -> None:
    n, keys = 3000, 7
    q = sclient.queue("ordered", shards=4, ordered=True)
    df = (spark.range(n).withColumn("key", F.concat(F.lit("k"), (F.col("id") % keys)
                                                    .cast("string")))
          .withColumn("seq", F.col("id")).repartition(3).sortWithinPartitions("seq")
          .withColumn("part", F.spark_partition_id()))
    df.foreachPartition(partition_sink(sclient.url, "ordered", id_col="id", key_col="key",
                                       payload_cols=["key", "seq", "part"],
                                       prefix=sclient.prefix, batch_size=250))
    seen = 0
    for shard in range(4):
        delivered = q.pop(n, shards=[shard])
        seen += len(delivered)
        runs: dict[tuple[str, int], list[int]] = defaultdict(list)
        for m in delivered:
            assert m.key == m.payload["key"] and q.shard_for(m.key) == shard
            runs[(m.key, m.payload["part"])].append(m.payload["seq"])
        for seqs in runs.values():
            assert seqs == sorted(seqs)  # each partition's rows of a key, in row order
        q.ack_many(delivered)
    assert seen == n


def test_streaming_batch_sink(spark: Any, sclient: dynoq.Client, tmp_path: Path) -> None:
    q = sclient.queue("stream", shards=2)
    src = tmp_path / "in"
    src.mkdir()
    for f in range(3):
        lines = [json.dumps({"event_id": f"e{f}-{i}", "n": i, "file": f}) for i in range(400)]
        (src / f"part-{f}.json").write_text("\n".join(lines) + "\n")

    def run(checkpoint: str) -> Any:
        sink = batch_sink(sclient.url, "stream", id_col="event_id", prefix=sclient.prefix)
        stream = (spark.readStream.schema("event_id string, n long, file int")
                  .option("maxFilesPerTrigger", 1).json(str(src)))
        query = (stream.writeStream.foreachBatch(sink).trigger(availableNow=True)
                 .option("checkpointLocation", str(tmp_path / checkpoint)).start())
        query.awaitTermination(120)
        assert query.exception() is None
        return sink

    first = run("ck1")
    assert len(first.epochs) == 3 and first.totals == (1200, 0)
    assert q.size() == 1200
    m = q.get("e2-7")
    assert m is not None and m.payload == {"event_id": "e2-7", "n": 7, "file": 2}
    again = run("ck2")  # a fresh checkpoint replays every file: all already present
    assert again.totals == (0, 1200) and q.size() == 1200


@pytest.mark.parametrize(("case", "text"), [
    ("missing", "id_col names column 'event_id', which is not in the data"),
    ("null", "id column 'event_id' is null in row"),
    ("empty", "id column 'event_id' is empty in row"),
    ("float", "id column 'event_id' holds a float"),
])
def test_bad_ids_fail_the_task_and_write_nothing(spark: Any, sclient: dynoq.Client,
                                                 case: str, text: str) -> None:
    q = sclient.queue("bad", shards=2)
    ids: list[Any] = [f"ok-{i}" for i in range(50)]
    schema = "event_id string, v int"
    if case == "null":
        ids[25] = None
    elif case == "empty":
        ids[25] = ""
    elif case == "float":
        ids, schema = [float(i) for i in range(50)], "event_id double, v int"
    df = spark.createDataFrame([(x, i) for i, x in enumerate(ids)], schema).coalesce(1)
    if case == "missing":
        df = df.withColumnRenamed("event_id", "id")
    sink = partition_sink(sclient.url, "bad", id_col="event_id", prefix=sclient.prefix)
    with pytest.raises(Exception, match=r"dynoq\.errors\.Invalid") as info:
        df.foreachPartition(sink)
    assert text in str(info.value)
    with pytest.raises(dynoq.DynoqError if case == "missing" else Exception,
                       match=text):  # write() checks the columns on the driver
        write(df, sclient.url, "bad", id_col="event_id", prefix=sclient.prefix)
    assert q.size() == 0 and not all_messages(q)


def test_enqueue_job_from_parquet_and_csv(spark: Any, sclient: dynoq.Client,
                                          tmp_path: Path) -> None:
    from spark import enqueue

    rows = [(f"o{i}", f"cust-{i % 3}", i * 1.5, "2024-05-01") for i in range(30)]
    df = spark.createDataFrame(rows, "order_id string, customer string, amount double, "
                                     "day string")
    df.coalesce(1).write.parquet(str(tmp_path / "orders.parquet"))
    common = ["--url", sclient.url, "--prefix", sclient.prefix]
    assert enqueue.main([str(tmp_path / "orders.parquet"), "--queue", "by-customer",
                         "--ordered", "--shards", "2", "--id-col", "order_id",
                         "--key-col", "customer", "--rename", "amount=total",
                         "--payload-cols", "order_id,total", *common]) == 0
    q = sclient.queue("by-customer")
    assert q.settings.ordered and q.settings.shards == 2 and q.size() == 30
    m = q.get("o4")
    assert m is not None and m.key == "cust-1" and m.payload == {"order_id": "o4",
                                                                  "total": 6.0}

    csv = tmp_path / "timers.csv"
    csv.write_text("id,delay,note\n1,3600,later\n2,0,now\n3,,now too\n")
    assert enqueue.main([str(csv), "--queue", "timers", "--id-col", "id",
                         "--delay-col", "delay", *common]) == 0
    assert enqueue.main([str(csv), "--queue", "timers", "--id-col", "id",
                         "--delay-col", "delay", *common]) == 0  # a re-run adds nothing
    t = sclient.queue("timers")
    stats = t.stats()
    assert (stats.ready, stats.delayed) == (2, 1)
    later = t.get("1")
    assert later is not None and later.payload == {"id": 1, "delay": 3600, "note": "later"}
    assert later.delay == pytest.approx(3600, abs=1)


def test_export_round_trips(spark: Any, sclient: dynoq.Client, tmp_path: Path) -> None:
    from spark import export

    q = sclient.queue("audit", shards=3, max_retries=0)
    payloads = {f"r{i}": {"n": i, "s": "x" * i, "price": "1.50"} for i in range(40)}
    q.push_many([dynoq.Message(p, id=k, key=f"k{i % 2}", headers={"h": i})
                 for i, (k, p) in enumerate(payloads.items())])
    q.push({"later": True}, id="delayed-1", delay=3600, priority=7)
    q.push(b"\x00raw", id="bytes-1")
    for m in q.pop(5):
        assert q.dead_letter(m)
    in_flight = q.pop(2)  # unacked: not exported by default
    out = tmp_path / "audit.parquet"
    assert export.main(["--queue", "audit", "--output", str(out), "--url", sclient.url,
                        "--prefix", sclient.prefix]) == 0
    got = {r["id"]: r.asDict() for r in spark.read.parquet(str(out)).collect()}
    assert len(got) == 42 - 2
    assert sum(r["state"] == "dead" for r in got.values()) == 5
    assert all(r["dead_at"] is not None for r in got.values() if r["state"] == "dead")
    assert not {m.id for m in in_flight} & set(got)
    d = got["delayed-1"]
    assert (d["state"], d["priority"], json.loads(d["payload"])) == ("delayed", 7,
                                                                     {"later": True})
    assert d["deliver_at"] > d["enqueued_at"]
    assert json.loads(got["bytes-1"]["payload"]) == {"$base64": "AHJhdw=="}
    for k, p in payloads.items():
        if k in got:
            assert json.loads(got[k]["payload"]) == p
            assert got[k]["key"] in ("k0", "k1") and json.loads(got[k]["headers"])["h"] >= 0
    with_inflight = export.export(spark, sclient.url, "audit", str(tmp_path / "all"),
                                  states=["ready", "delayed", "unacked", "dead"],
                                  prefix=sclient.prefix)
    assert with_inflight == {"ready": 34, "delayed": 1, "dead": 5, "unacked": 2}
    with pytest.raises(dynoq.InvalidArgument, match="no queue named 'nope'"):
        export.export(spark, sclient.url, "nope", str(tmp_path / "x"), prefix=sclient.prefix)


def test_demo_report(spark: Any, server_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    from dynoq import demo

    start = time.monotonic()
    cfg = demo.DemoConfig(orders=300, cancel_after=2.0)
    assert demo.main(server_url, cfg) == 0
    out = capsys.readouterr().out
    assert "240/240 paid orders completed, 0 events out of order" in out
    assert "60/60 unpaid orders cancelled (0 paid orders cancelled by mistake)" in out
    assert "240 paid orders' timers acked as no-ops" in out
    assert "0 fired early" in out and "with Spark" in out and out.rstrip().endswith("OK")
    assert time.monotonic() - start < 120


def test_demo_without_spark_pushes_the_same_messages(server_url: str) -> None:
    from dynoq import demo

    with dynoq.connect(server_url, prefix=f"dqt-{uuid.uuid4().hex[:12]}") as c:
        try:
            report = demo.run(c, demo.DemoConfig(orders=100, cancel_after=1.0,
                                                 use_spark=False))
        finally:
            _cleanup(server_url, c.prefix)
    assert report.ok, report.lines()
    assert (report.events, report.paid, report.cancels_fired) == (100 + 80 * 3, 80, 20)


def test_demo_payloads_match_between_spark_and_plain(spark: Any,
                                                     sclient: dynoq.Client) -> None:
    from dynoq import demo

    cfg = demo.DemoConfig(orders=20)
    demo.produce_with_spark(spark, sclient, cfg)
    with_spark = {m["id"]: json.loads(m["payload"])
                  for m in scan(sclient.queue(demo.EVENTS_QUEUE))}
    sclient.queue(demo.EVENTS_QUEUE).clear()
    demo.produce_plain(sclient, cfg)
    plain = {m["id"]: json.loads(m["payload"]) for m in scan(sclient.queue(demo.EVENTS_QUEUE))}
    assert len(plain) == 20 + 16 * 3

    def same(p: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in p.items() if k != "at"}  # "now" differs between runs

    assert {k: same(v) for k, v in with_spark.items()} == {k: same(v) for k, v in plain.items()}
    assert Decimal(plain["order-3/1"]["amount"]) == Decimal("3.99")
    assert dt.datetime.fromisoformat(plain["order-3/1"]["at"]).tzinfo is not None


def test_demo_says_how_to_install_spark_and_falls_back(
        server_url: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from dynoq import demo

    monkeypatch.setattr(demo, "spark_available", lambda: False)
    assert demo.main(server_url, demo.DemoConfig(orders=50, cancel_after=0.5)) == 0
    out = capsys.readouterr().out
    assert "pip install 'dynoq[spark]'" in out and "with push_many" in out
    assert out.rstrip().endswith("OK")
