"""A Spark sink: DataFrame rows into a dynoq queue (needs the spark extra).

Ids come from the data, so a retried or speculative Spark task pushes nothing twice.

    python examples/spark_sink.py
"""

import os
import sys

from pyspark.sql import SparkSession

import dynoq
from dynoq.spark import partition_sink

with dynoq.connect(os.environ.get("DYNOQ_URL", "embedded://"), prefix="spark-demo") as client:
    client.queue("emails", shards=4)  # open it on the driver to choose its settings
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors need dynoq too
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("dynoq-example")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    try:
        rows = [(f"mail-{i}", f"user{i}@example.com", i % 3 * 10.0) for i in range(100)]
        df = spark.createDataFrame(rows, "mail_id string, to string, delay_s double")
        df.foreachPartition(
            partition_sink(
                client.url,
                "emails",
                id_col="mail_id",
                delay_col="delay_s",
                prefix=client.prefix,
                schema=df.schema,
            )
        )  # types checked here
        df.foreachPartition(
            partition_sink(client.url, "emails", id_col="mail_id", prefix=client.prefix)
        )  # a re-run adds nothing
    finally:
        spark.stop()
    emails = client.queue("emails")
    stats = emails.stats()
    print(f"queued {stats.size} emails: {stats.ready} now, {stats.delayed} later")
    assert stats.size == 100
    emails.clear()
