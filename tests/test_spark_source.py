"""``spark.readStream.format("dynoq")``: a queue consumed as a stream, exactly once, on
every queue kind (real Spark, real server)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_for
from spark_gate import Ledger, driver_env, kill_when_held

import dynoq
from dynoq._core.streams import StreamOps
from dynoq.consumer.group import members
from dynoq.spark import register, source_options, stream_stats

pytest.importorskip("pyspark")
pytestmark = pytest.mark.spark
# Started (and killed) as processes of their own, sharing no session (conftest.py):
OWN_DRIVERS = ("test_driver_killed_at_each_point_every_message_once_downstream_in_key_order",)


class Batches:
    """What a foreachBatch sink saw: each micro-batch's rows, by batch id (a replayed
    batch replaces its rows, as an idempotent sink would)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rows: dict[int, list[dict[str, Any]]] = {}

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = [r.asDict() for r in df.collect()]
        with self.lock:
            self.rows[batch_id] = rows

    def ids(self) -> list[str]:
        return [r["id"] for b in sorted(self.rows) for r in self.rows[b]]


def run_available_now(
    spark: Any, client: dynoq.Client, queue: str, tmp: Path, **options: str
) -> Batches:
    register(spark)
    seen = Batches()
    reader = spark.readStream.format("dynoq").options(**source_options(client, queue))
    query = (
        reader.options(**options)
        .load()
        .writeStream.foreachBatch(seen)
        .option("checkpointLocation", str(tmp / f"ck-{uuid.uuid4().hex[:6]}"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert not query.isActive
    assert query.exception() is None
    return seen


def read_count(queue: str) -> float:
    """What the driver's Prometheus counter says the streams of ``queue`` read."""
    from prometheus_client import REGISTRY

    labels = {"queue": queue, "group": "spark", "outcome": "read"}
    return REGISTRY.get_sample_value("dynoq_spark_stream_messages_total", labels) or 0.0


@pytest.fixture
def tmp(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path


@pytest.mark.parametrize("kind", ["plain", "ordered", "keyed"])
def test_every_message_in_exactly_one_batch_and_none_left_in_flight(
    spark: Any,
    sclient: dynoq.Client,
    tmp: Path,
    kind: str,
) -> None:
    ordered: bool | str = {"plain": False, "ordered": True, "keyed": "key"}[kind]
    q = sclient.queue("events", shards=3, ordered=ordered)
    keys = [f"k{i}" for i in range(7)]
    pushed = []
    for n in range(120):
        key = keys[n % len(keys)] if ordered else None
        pushed.append(q.push({"n": n, "key": key}, id=f"e{n:03d}", key=key))

    read_before = read_count("events")
    seen = run_available_now(spark, sclient, "events", tmp, maxMessagesPerTrigger="50")

    assert sorted(seen.ids()) == sorted(pushed)  # each once
    assert len(seen.rows) >= 3  # 50 a batch at most
    assert all(len(rows) <= 50 for rows in seen.rows.values())
    stats = q.stats()
    assert (stats.ready, stats.delayed, stats.unacked, stats.dead) == (0, 0, 0, 0)
    assert members(q, "spark") == []  # the run left its group: consumers may start now
    assert read_count("events") - read_before == 120  # the tasks' counts, on the driver
    if ordered:  # a key's later message never in an earlier batch than its earlier one
        batch_of = {r["id"]: b for b, rows in seen.rows.items() for r in rows}
        for key in keys:
            mine = [batch_of[i] for i in pushed if int(i[1:]) % len(keys) == keys.index(key)]
            assert mine == sorted(mine)


# -- a driver killed at each point of a micro-batch ------------------------------------------

JOB = str(Path(__file__).with_name("spark_source_job.py"))
KEYS_N, PER_KEY = 100, 12
# (stage, batch): the source's own batch numbers for its stages, Spark's batch ids for
# the sink's; each run starts with at least 300 messages waiting, ten batches or more.
KILLS = [("after-take", 2), ("read", 4), ("after-write", 5), ("after-commit", 7)]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_driver_killed_at_each_point_every_message_once_downstream_in_key_order(
    sclient: dynoq.Client,
    tmp: Path,
) -> None:
    client = sclient
    src = client.queue("src", shards=3, ordered="key", unack_timeout=3.0)
    dst = client.queue("dst", shards=2, ordered="key")
    events = [(f"k{k:02d}", s) for s in range(PER_KEY) for k in range(KEYS_N)]

    def push(chunk: list[tuple[str, int]]) -> None:
        src.push_many(
            [dynoq.Message({"key": k, "seq": s}, id=f"{k}-{s:03d}", key=k) for k, s in chunk]
        )

    push(events[:300])
    rest = events[300:]
    stop_producing = threading.Event()

    def produce() -> None:  # the rest, while drivers start, run and die
        for i in range(0, len(rest), 10):
            if stop_producing.wait(0.25):
                return
            push(rest[i : i + 10])

    producer = threading.Thread(target=produce)
    producer.start()
    ledger = Ledger(lambda msg: json.loads(msg.payload["payload"]))
    consumer = client.consumer(dst, ledger.handle, group="audit", concurrency=2).start()
    checkpoint = tmp / "checkpoint"
    args = [sys.executable, JOB, client.url, client.prefix, "src", "dst", str(checkpoint)]
    try:
        for stage, batch in KILLS:
            kill_when_held(client.redis, args, stage, batch, f"{client.prefix}:gate")
        producer.join()
        done = subprocess.run(
            args, env=driver_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=600
        )
        assert done.returncode == 0, done.stderr.decode()[-3000:]
        wait_for(lambda: len(ledger.ids) >= len(events), timeout=60, what="every event consumed")
        time.sleep(0.5)  # a duplicate would arrive now
    finally:
        stop_producing.set()
        producer.join()
        consumer.stop()
    assert len(ledger.ids) == len(events)
    assert len(set(ledger.ids)) == len(events)  # each once, downstream
    for key, seqs in ledger.seqs.items():
        assert seqs == list(range(PER_KEY)), f"key {key} out of order or incomplete"
    s = src.stats()
    assert (s.ready, s.delayed, s.unacked, s.dead) == (0, 0, 0, 0)  # nothing left in flight
    leftover = list(client.redis.scan_iter(f"{client.prefix}:*:stream:pipeline:b:*"))
    assert leftover == []  # every batch's record deleted once done


# -- the reader's steps, called as Spark calls them (no JVM: crashes where we choose) --------


def stream_schema() -> Any:
    from pyspark.sql.types import IntegerType, StringType, StructField, StructType, TimestampType

    from dynoq.spark.export import SCHEMA

    types = {"string": StringType(), "int": IntegerType(), "timestamp": TimestampType()}
    return StructType(
        [StructField(n, types[t]) for n, t in (c.split() for c in SCHEMA.split(", "))]
    )


def make_reader(client: dynoq.Client, queue: str, group: str = "g", **options: str) -> Any:
    from dynoq.spark import DynoqDataSource

    opts = {**source_options(client, queue), "group": group, **options}
    return DynoqDataSource(opts).streamReader(stream_schema())


def read_ids(reader: Any, start: dict[str, Any], end: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for p in reader.partitions(start, end):
        for rb in reader.read(p):
            out += rb.column("id").to_pylist()
    return out


def rows(n: int) -> Any:
    from pyspark.sql.streaming.datasource import ReadMaxRows

    return ReadMaxRows(n)


@pytest.mark.parametrize("ordered", [False, True, "key"])
def test_a_replayed_batch_reads_exactly_its_messages_after_their_visibility_ran_out(
    sclient: dynoq.Client, ordered: bool | str
) -> None:
    q = sclient.queue("ev", shards=2, ordered=ordered, unack_timeout=0.3)
    ids = [q.push({"n": n}, id=f"m{n:02d}", key=f"k{n}" if ordered else None) for n in range(20)]
    first = make_reader(sclient, "ev")
    start = first.initialOffset()
    end = first.latestOffset(start, rows(15))
    taken = read_ids(first, start, end)
    assert len(taken) == 15 and len(set(taken)) == 15
    # The driver dies before Spark committed the batch; the messages' visibility runs out
    # and they are given back (a pop of anyone else would now deliver them).
    first._beat.stopped.set()
    time.sleep(0.4)
    assert q.requeue_expired() == 15
    again = make_reader(sclient, "ev")  # the restarted driver's source
    assert sorted(read_ids(again, start, end)) == sorted(taken)  # the replay: the same
    after = again.latestOffset(end, rows(100))  # plans the next: the replayed one is done
    rest = read_ids(again, end, after)
    assert sorted(taken + rest) == sorted(ids)  # none twice, none lost
    again.latestOffset(after, rows(100))
    s = q.stats()
    assert (s.ready, s.delayed, s.unacked, s.dead) == (0, 0, 0, 0)
    counts = stream_stats(sclient, "ev", "g")
    assert (counts.taken, counts.acked, counts.given_back, counts.batches) == (20, 20, 0, 2)
    ops = StreamOps(sclient.prefix, "ev", "g")
    assert q.backend.run(ops.read_state())[2] == 2  # finished: no later call walks them
    again.stop()


def test_a_batch_taken_but_never_planned_is_planned_after_the_restart(
    sclient: dynoq.Client,
) -> None:
    q = sclient.queue("ev", shards=3)
    ids = [q.push(n, id=f"m{n:02d}") for n in range(30)]
    first = make_reader(sclient, "ev")
    start = first.initialOffset()
    one = first.latestOffset(start, rows(10))
    assert len(read_ids(first, start, one)) == 10
    two = first.latestOffset(one, rows(10))  # taken; the driver dies before Spark plans it
    first._beat.stopped.set()
    again = make_reader(sclient, "ev")
    assert again.latestOffset(one, rows(10)) == two  # the same batch, nothing more taken
    got = read_ids(again, one, two)
    three = again.latestOffset(two, rows(100))
    got += read_ids(again, two, three)
    assert len(got) == 20 and set(got) | set(read_ids(again, start, one)) <= set(ids)
    assert again.latestOffset(three, rows(100)) == three  # drained: no batch
    assert q.stats().unacked == 0 and q.size() == 0
    again.stop()


def test_one_stream_per_group_and_never_beside_consumers(
    sclient: dynoq.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dynoq.spark import stream

    # (a new query waits a heartbeat's lifetime for a stream member that may have just
    # stopped: a short one here)
    monkeypatch.setattr(stream, "HEARTBEAT_TTL", 1.5)
    q = sclient.queue("ev", shards=2)
    q.push(1, id="a")
    first = make_reader(sclient, "ev")
    s = first.initialOffset()
    first.latestOffset(s, rows(10))
    other = make_reader(sclient, "ev")  # a second query on the same group
    with pytest.raises(dynoq.GroupConflict, match="other live member"):
        other.latestOffset(other.initialOffset(), rows(10))
    with pytest.raises(dynoq.GroupConflict):  # another group while the stream holds it
        h = make_reader(sclient, "ev", group="h")
        h.latestOffset(h.initialOffset(), rows(10))
    handled: list[str] = []
    beside = sclient.consumer(q, lambda m: handled.append(m.id), group="g", rebalance_interval=0.2)
    beside.start()  # a consumer of the stream's group: it stands aside
    try:
        q.push(2, id="b")
        time.sleep(1.0)
        assert beside.assignment == set() and handled == []
    finally:
        beside.stop()
    first.stop()
    consumer = sclient.consumer(q, lambda m: None, group="g").start()
    try:
        later = make_reader(sclient, "ev")
        with pytest.raises(dynoq.GroupConflict, match="other live member"):
            later.latestOffset(later.initialOffset(), rows(10))
    finally:
        consumer.stop()


def test_a_new_query_takes_over_an_abandoned_stream_and_gets_its_messages_back(
    sclient: dynoq.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dynoq.spark import stream

    monkeypatch.setattr(stream, "HEARTBEAT_TTL", 1.5)
    q = sclient.queue("ev", shards=2)
    ids = [q.push(n, id=f"m{n}") for n in range(8)]
    old = make_reader(sclient, "ev")
    s = old.initialOffset()
    old_end = old.latestOffset(s, rows(5))
    old._beat.stopped.set()  # its driver is killed, and its checkpoint deleted
    new = make_reader(sclient, "ev")  # (it waits for the old membership to lapse)
    t = new.initialOffset()
    end = new.latestOffset(t, rows(100))
    assert sorted(read_ids(new, t, end)) == sorted(ids)  # the 5 given back, and the rest
    counts = stream_stats(sclient, "ev", "g")
    assert (counts.taken, counts.given_back, counts.redelivered) == (13, 5, 5)
    with pytest.raises(dynoq.InvalidArgument, match="took it over"):
        make_reader(sclient, "ev").latestOffset(old_end, rows(10))  # the old one resumed
    new.stop()


def test_bad_options_and_a_missing_queue_are_refused_on_the_driver(
    sclient: dynoq.Client,
) -> None:
    sclient.queue("ev", shards=1)
    with pytest.raises(dynoq.InvalidArgument, match="there is no queue 'nope'"):
        make_reader(sclient, "nope")
    for bad in ({"maxMessagesPerTrigger": "0"}, {"partitionsPerShard": "65"}, {"group": "a:b"}):
        with pytest.raises((ValueError, TypeError)):
            make_reader(sclient, "ev", **bad)
    with pytest.raises(dynoq.InvalidArgument, match="does not know"):
        make_reader(sclient, "ev", maxFilesPerTrigger="3")
    with pytest.raises(dynoq.InvalidArgument, match="offset"):
        make_reader(sclient, "ev").latestOffset({"run": "x:y", "batch": 1}, rows(1))


def test_several_partitions_per_shard_keep_each_key_in_one(sclient: dynoq.Client) -> None:
    q = sclient.queue("ev", shards=1, ordered=True)
    for n in range(60):
        q.push({"n": n}, id=f"m{n:02d}", key=f"k{n % 6}")
    r = make_reader(sclient, "ev", partitionsPerShard="3")
    s = r.initialOffset()
    e = r.latestOffset(s, rows(100))
    parts = r.partitions(s, e)
    assert len(parts) == 3
    keys_of = []
    for p in parts:
        got = [
            (k, json.loads(x)["n"])
            for rb in r.read(p)
            for k, x in zip(
                rb.column("key").to_pylist(), rb.column("payload").to_pylist(), strict=True
            )
        ]
        keys_of.append({k for k, _ in got})
        for key in {k for k, _ in got}:
            ns = [n for k, n in got if k == key]
            assert ns == sorted(ns) and len(ns) == 10  # a key's messages, in order
    assert sum(len(k) for k in keys_of) == 6  # no key in two partitions
    r.stop()


def test_a_typed_stream_gives_back_the_types_written(
    spark: Any, sclient: dynoq.Client, tmp: Path
) -> None:
    import datetime as dt
    from decimal import Decimal

    register(spark)
    sclient.queue("typed", shards=2)
    schema = (
        "event_id string, amount decimal(10,2), at timestamp, day date, "
        "tags array<string>, attrs map<string,int>, ok boolean"
    )
    utc = dt.timezone.utc
    rows_in = [
        ("e1", Decimal("12.30"), dt.datetime(2024, 5, 1, 10, tzinfo=utc), dt.date(2024, 5, 1),
         ["a", "b"], {"x": 1}, True),
        ("e2", None, None, None, [], {}, False),
    ]  # fmt: skip
    df = spark.createDataFrame(rows_in, schema)
    opts = source_options(sclient, "typed")
    df.write.format("dynoq").options(**opts).option("idCol", "event_id").mode("append").save()
    seen = Batches()
    query = (
        spark.readStream.format("dynoq")
        .options(**opts)
        .schema(df.schema)
        .load()
        .writeStream.foreachBatch(seen)
        .option("checkpointLocation", str(tmp / "ck-typed"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    got = sorted((r for b in seen.rows.values() for r in b), key=lambda r: r["event_id"])
    want = sorted((r.asDict() for r in df.collect()), key=lambda r: r["event_id"])
    assert got == want
