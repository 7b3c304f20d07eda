"""Spark -> Redis throughput: dynoq's writers against a raw pipelined HSET + ZADD.

    python -m benchmarks.bench_spark                      # 300,000 rows, embedded server
    python -m benchmarks.bench_spark --rows 100000 --repeats 5 --url redis://127.0.0.1:6379/0
    python -m benchmarks.bench_spark --read 1000000 --repeats 5     # reads instead

Every row (~100 bytes of msgpack payload) goes in, in one Spark job per method, in the
same Spark session and on the same server:
  raw          foreachPartition, pipelined HSET id->msgpack(row) + ZADD id (no Lua, no
               push-if-absent, no validation): the floor any Redis queue writer pays
  datasource   df.write.format("dynoq") (Arrow writer, the default)
  ds-rows      df.write.format("dynoq").option("arrow", "false") (Row writer)
  partition    dynoq.spark.partition_sink (foreachPartition, Rows)
  arrow        dynoq.spark.write (mapInArrow)
The DataFrame is cached first and every method writes once, untimed, before the rounds
(the first Python data source write of a session starts its planner: seconds, once).
Each round runs every method once, in a rotating order, on an emptied server; reported:
the median rows/s over the rounds, the median of each round's ratio to raw, and Redis
memory per message (INFO used_memory delta / rows, last round).

With --read N: N messages (~100 bytes) are pushed into a 4-shard queue and into a
1-shard queue, and each round reads each queue whole with spark.read.format("dynoq")
into Spark's "noop" sink (every row made, nothing kept); reported: the median rows/s,
and the peak resident memory of Spark's Python workers during the reads (sampled every
20 ms from /proc), beside the same for a queue of --small messages: a read holds a page,
so the two should be about the same.

With --stream N: N messages (~100 bytes) are pushed into a 4-shard queue, which each
round drains twice, in turn: spark.readStream.format("dynoq") (availableNow,
maxMessagesPerTrigger --trigger, into Spark's "noop" sink) and a plain consumer (the
defaults: concurrency 4, batch_size "auto"; a no-op handler) in this process; reported:
the median messages/s of each and the median of the per-round ratios.
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import msgpack
import redis

import dynoq
from benchmarks.common import parser, server_url, table
from dynoq.spark import partition_sink, source_options, spark_session, write

METHODS = ("raw", "datasource", "ds-rows", "partition", "arrow")


def raw_sink(url: str, prefix: str, batch: int = 1000) -> Callable[[Iterable[Any]], None]:
    hash_key, zset_key = f"{prefix}:raw:msgs", f"{prefix}:raw:ready"

    def push(rows: Iterable[Any]) -> None:
        r = redis.Redis.from_url(url)
        pipe = r.pipeline(transaction=False)
        for n, row in enumerate(rows, 1):
            d = row.asDict()
            msg_id = str(d["id"])
            pipe.hset(hash_key, msg_id, msgpack.packb(d, use_bin_type=True))
            pipe.zadd(zset_key, {msg_id: time.time()})
            if n % batch == 0:
                pipe.execute()
        pipe.execute()
        r.close()

    return push


def clear(r: redis.Redis, prefix: str, keep: Iterable[str] = ()) -> None:
    kept = set(keep)
    keys = [k for k in r.scan_iter(match=f"{prefix}:*", count=1000) if k.decode() not in kept]
    for i in range(0, len(keys), 500):
        r.delete(*keys[i : i + 500])
    # Big keys are freed in the background (lazyfree): wait, or the next delta is off.
    while int(r.info("memory").get("lazyfree_pending_objects", 0)):
        time.sleep(0.1)


def _worker_pids() -> list[int]:
    """Spark's Python daemon and the workers it forked (they share its command line)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if b"pyspark.daemon" in f.read():
                        pids.append(int(entry))
            except OSError:
                continue
    return pids


def _rss_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class PeakWorkerMemory:
    """The highest resident memory of any one Spark Python worker while it runs."""

    def __init__(self) -> None:
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            for pid in _worker_pids():
                self.peak = max(self.peak, _rss_mib(pid))

    def __enter__(self) -> PeakWorkerMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def fill(q: dynoq.Queue, n: int, chunk: int = 5000) -> None:
    for start in range(0, n, chunk):
        q.push_many(
            [
                dynoq.Message(
                    {
                        "customer": f"customer-{i % 99991:08d}",
                        "amount": (i % 10007) / 100.0,
                        "status": "created",
                        "note": f"order {i}".ljust(30),
                    },
                    id=str(i),
                )
                for i in range(start, min(n, start + chunk))
            ]
        )


def read_main(args: Any, spark: Any) -> int:
    with server_url(args.url) as url:
        client = dynoq.connect(url, prefix=f"bench-{uuid.uuid4().hex[:8]}")
        r = redis.Redis.from_url(url)
        try:
            queues = {
                "4 shards": client.queue("read4", shards=4),
                "1 shard": client.queue("read1", shards=1),
                "small": client.queue("small", shards=1),
            }
            for name, q in queues.items():
                fill(q, args.small if name == "small" else args.read)

            def read(q: dynoq.Queue) -> None:
                (
                    spark.read.format("dynoq")
                    .options(**source_options(client, q.name))
                    .load()
                    .write.format("noop")
                    .mode("overwrite")
                    .save()
                )

            for q in queues.values():
                read(q)  # untimed: Python workers, the data source planner
            print(
                f"{args.read:,} messages a queue (and {args.small:,} in 'small'), "
                f"{spark.sparkContext.master}, {args.repeats} rounds, server {client!r}",
                flush=True,
            )
            rates: dict[str, list[float]] = {n: [] for n in queues}
            peaks: dict[str, list[float]] = {n: [] for n in queues}
            for rnd in range(args.repeats):
                for name, q in queues.items():
                    n = args.small if name == "small" else args.read
                    with PeakWorkerMemory() as mem:
                        start = time.perf_counter()
                        read(q)
                        rates[name].append(n / (time.perf_counter() - start))
                    peaks[name].append(mem.peak)
                print(
                    f"round {rnd + 1}: "
                    + ", ".join(
                        f"{n} {rates[n][-1]:,.0f} rows/s, {peaks[n][-1]:.0f} MiB" for n in queues
                    ),
                    flush=True,
                )
        finally:
            clear(r, client.prefix)
            client.close()
            r.close()
            spark.stop()
    rows = [("queue", "messages", "rows/s (median)", "peak worker RSS MiB (median)")]
    for name in queues:
        n = args.small if name == "small" else args.read
        rows.append(
            (
                name,
                f"{n:,}",
                f"{statistics.median(rates[name]):,.0f}",
                f"{statistics.median(peaks[name]):.0f}",
            )
        )
    print(table(rows))
    return 0


def stream_main(args: Any, spark: Any) -> int:
    from dynoq.spark import register

    register(spark)
    with server_url(args.url) as url:
        client = dynoq.connect(url, prefix=f"bench-{uuid.uuid4().hex[:8]}")
        r = redis.Redis.from_url(url)
        checkpoints = f"/tmp/bench-stream-{uuid.uuid4().hex[:8]}"
        try:
            q = client.queue("stream", shards=4)

            def stream(n: int) -> None:
                query = (
                    spark.readStream.format("dynoq")
                    .options(**source_options(client, "stream"))
                    .option("maxMessagesPerTrigger", str(args.trigger))
                    .load()
                    .writeStream.format("noop")
                    .option("checkpointLocation", f"{checkpoints}/{uuid.uuid4().hex}")
                    .trigger(availableNow=True)
                    .start()
                )
                query.awaitTermination()
                assert q.size() == 0 and q.stats().unacked == 0, "the stream left messages"

            def consume(n: int) -> None:
                done = threading.Event()
                count = [0]
                lock = threading.Lock()

                def handle(msg: dynoq.Message) -> None:
                    with lock:
                        count[0] += 1
                        if count[0] >= n:
                            done.set()

                c = client.consumer(q, handle, group="spark").start()
                done.wait(600)
                c.stop()

            fill(q, 2000)
            stream(2000)  # untimed: Python workers, the source's planner
            fill(q, 2000)
            consume(2000)
            print(
                f"{args.stream:,} messages, maxMessagesPerTrigger {args.trigger:,}, "
                f"{spark.sparkContext.master}, {args.repeats} rounds, server {client!r}",
                flush=True,
            )
            rates: dict[str, list[float]] = {"stream": [], "consumer": []}
            ratios = []
            ways = {"stream": stream, "consumer": consume}
            for rnd in range(args.repeats):
                order = ["stream", "consumer"] if rnd % 2 == 0 else ["consumer", "stream"]
                for name in order:
                    fill(q, args.stream)
                    start = time.perf_counter()
                    ways[name](args.stream)
                    rates[name].append(args.stream / (time.perf_counter() - start))
                ratios.append(rates["stream"][-1] / rates["consumer"][-1])
                print(
                    f"round {rnd + 1}: stream {rates['stream'][-1]:,.0f} msg/s, consumer "
                    f"{rates['consumer'][-1]:,.0f} msg/s, ratio {ratios[-1]:.2f}",
                    flush=True,
                )
        finally:
            clear(r, client.prefix)
            client.close()
            r.close()
            spark.stop()
    print(
        table(
            [
                ("way", "messages/s (median)", "range"),
                *(
                    (n, f"{statistics.median(v):,.0f}", f"{min(v):,.0f}-{max(v):,.0f}")
                    for n, v in rates.items()
                ),
                (
                    "stream / consumer",
                    f"{statistics.median(ratios):.2f}x",
                    f"{min(ratios):.2f}-{max(ratios):.2f}",
                ),
            ]
        )
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__ or "")
    p.add_argument("--rows", type=int, default=300_000)
    p.add_argument(
        "--read",
        type=int,
        default=0,
        help="benchmark reads of a queue of this many messages instead",
    )
    p.add_argument(
        "--small",
        type=int,
        default=10_000,
        help="messages of the small queue a --read compares memory with",
    )
    p.add_argument(
        "--stream",
        type=int,
        default=0,
        help="benchmark the streaming source on a queue of this many messages instead",
    )
    p.add_argument("--trigger", type=int, default=10_000, help="maxMessagesPerTrigger")
    p.add_argument(
        "--master", default="local[2]", help="Spark master (local[2]: the 2 cores of this machine)"
    )
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=1000)
    p.add_argument("--only", default=",".join(METHODS), help="methods to run")
    args = p.parse_args(argv)
    methods = args.only.split(",")
    spark, _ = spark_session("bench-spark", args.master, quiet=True)
    if args.read:
        return read_main(args, spark)
    if args.stream:
        return stream_main(args, spark)
    from pyspark.sql import functions as F

    with server_url(args.url) as url:
        client = dynoq.connect(url, prefix=f"bench-{uuid.uuid4().hex[:8]}")
        r = redis.Redis.from_url(url)
        try:
            q = client.queue("bench", shards=4)
            keep = [q.ops.keys.meta, f"{client.prefix}:queues"]
            df = (
                spark.range(0, args.rows, numPartitions=args.partitions)
                .withColumn("customer", F.format_string("customer-%08d", F.col("id") % 99991))
                .withColumn("amount", (F.col("id") % 10007) / 100.0)
                .withColumn("status", F.lit("created"))
                .withColumn(
                    "note", F.format_string("%-30s", F.concat(F.lit("order "), F.col("id")))
                )
            )
            df = df.cache()
            df.count()
            opts = {
                **source_options(client, "bench"),
                "idCol": "id",
                "batchSize": str(args.batch_size),
            }
            run: dict[str, Callable[[Any], None]] = {
                "raw": lambda d: d.foreachPartition(raw_sink(url, client.prefix, args.batch_size)),
                "datasource": lambda d: (
                    d.write.format("dynoq").options(**opts).mode("append").save()
                ),
                "ds-rows": lambda d: (
                    d.write.format("dynoq")
                    .options(**opts)
                    .option("arrow", "false")
                    .mode("append")
                    .save()
                ),
                "partition": lambda d: d.foreachPartition(
                    partition_sink(client, "bench", id_col="id", batch_size=args.batch_size)
                ),
                "arrow": lambda d: write(
                    d, client, "bench", id_col="id", batch_size=args.batch_size
                ),
            }
            warm = df.limit(1000)
            for name in methods:  # untimed: Python workers, the data source planner
                run[name](warm)
                clear(r, client.prefix, keep)
            sample = msgpack.packb(df.first().asDict(), use_bin_type=True)  # type: ignore[union-attr]
            print(
                f"{args.rows:,} rows, {len(sample)} bytes of payload each, "
                f"{args.partitions} partitions, {spark.sparkContext.master}, "
                f"{args.repeats} rounds, server {client!r}",
                flush=True,
            )
            rates: dict[str, list[float]] = {m: [] for m in methods}
            per_msg: dict[str, float] = {}
            for rnd in range(args.repeats):
                order = methods[rnd % len(methods) :] + methods[: rnd % len(methods)]
                for name in order:
                    clear(r, client.prefix, keep)
                    before = int(r.info("memory")["used_memory"])
                    start = time.perf_counter()
                    run[name](df)
                    rates[name].append(args.rows / (time.perf_counter() - start))
                    per_msg[name] = (int(r.info("memory")["used_memory"]) - before) / args.rows
                print(
                    f"round {rnd + 1}: " + ", ".join(f"{m} {rates[m][-1]:,.0f}" for m in methods),
                    flush=True,
                )
            clear(r, client.prefix)
        finally:
            client.close()
            r.close()
            spark.stop()
    rows = [("method", "rows/s (median)", "x raw (median of rounds)", "B/message")]
    for m in methods:
        ratios = [a / b for a, b in zip(rates[m], rates.get("raw", []), strict=False)]
        ratio = f"{statistics.median(ratios):.2f}" if ratios else ""
        rows.append((m, f"{statistics.median(rates[m]):,.0f}", ratio, f"{per_msg[m]:.0f}"))
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
