"""Spark -> Redis throughput: dynoq's sinks against a raw pipelined HSET + ZADD.

    python benchmarks/bench_spark.py                    # 1,000,000 rows, embedded server
    python benchmarks/bench_spark.py --rows 100000 --url redis://127.0.0.1:6379/0

Every row (~100 bytes of msgpack payload) goes in with, in the same Spark session:
  raw          foreachPartition, pipelined HSET id->msgpack(row) + ZADD id (no Lua, no
               push-if-absent, no validation): the floor any Redis queue writer pays
  partition    dynoq.spark.partition_sink (foreachPartition, push-if-absent scripts)
  arrow        dynoq.spark.write (mapInArrow, the same scripts)
Reported: rows/s, the ratio to raw, and Redis memory per message (INFO used_memory delta
/ rows). The DataFrame is cached first, so only the writing is timed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import msgpack
import redis

import dynoq
from dynoq.spark import partition_sink, write


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


def used_memory(client: dynoq.Client) -> int:
    return int(client.redis.info("memory")["used_memory"])


def clear(client: dynoq.Client) -> None:
    keys = list(client.redis.scan_iter(match=f"{client.prefix}:*", count=1000))
    for i in range(0, len(keys), 500):
        client.redis.delete(*keys[i:i + 500])
    # Big keys are freed in the background (lazyfree): wait, or the next delta is off.
    while int(client.redis.info("memory").get("lazyfree_pending_objects", 0)):
        time.sleep(0.1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--url", default="embedded://", help="server (default: embedded://)")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=1000)
    p.add_argument("--only", default="raw,partition,arrow", help="methods to run")
    args = p.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # local mode: loopback only
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (SparkSession.builder.master(args.master).appName("bench-spark")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    client = dynoq.connect(args.url, prefix=f"bench-{uuid.uuid4().hex[:8]}")
    try:
        df = (spark.range(0, args.rows, numPartitions=args.partitions)
              .withColumn("customer", F.format_string("customer-%08d", F.col("id") % 99991))
              .withColumn("amount", (F.col("id") % 10007) / 100.0)
              .withColumn("status", F.lit("created"))
              .withColumn("note", F.format_string("%-30s", F.concat(F.lit("order "),
                                                                     F.col("id")))))
        df = df.cache()
        df.count()
        df.foreachPartition(lambda rows: None)  # start the Python workers before timing
        sample = msgpack.packb(df.first().asDict(), use_bin_type=True)  # type: ignore[union-attr]
        print(f"{args.rows:,} rows, {len(sample)} bytes of payload each, {args.partitions} "
              f"partitions, {spark.sparkContext.master}, server {client.url}")
        q = client.queue("bench", shards=4)
        methods: dict[str, Callable[[], None]] = {
            "raw": lambda: df.foreachPartition(raw_sink(client.url, client.prefix,
                                                        args.batch_size)),
            "partition": lambda: df.foreachPartition(partition_sink(
                client.url, "bench", id_col="id", prefix=client.prefix,
                batch_size=args.batch_size)),
            "arrow": lambda: print(
                "    (pushed, skipped) =", write(df, client.url, "bench", id_col="id",
                                                 prefix=client.prefix,
                                                 batch_size=args.batch_size)),
        }
        results: dict[str, float] = {}
        for name in args.only.split(","):
            q.clear()
            clear(client)
            before = used_memory(client)
            start = time.perf_counter()
            methods[name]()
            elapsed = time.perf_counter() - start
            per_msg = (used_memory(client) - before) / args.rows
            results[name] = args.rows / elapsed
            ratio = (f"{results[name] / results['raw']:.2f}x raw" if "raw" in results
                     else "")
            print(f"{name:>10}: {results[name]:>10,.0f} rows/s  {elapsed:6.1f} s  "
                  f"{per_msg:6.0f} B/message  {ratio}", flush=True)
        clear(client)
    finally:
        client.close()
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
