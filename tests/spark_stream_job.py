"""A streaming driver for tests/test_spark_stream.py, run as its own process so the test
can SIGKILL it: JSON files -> format("dynoq") (exactly-once micro-batches).

    python tests/spark_stream_job.py URL PREFIX QUEUE SOURCE CHECKPOINT [STAGE:BATCH:KEY]

One file per micro-batch, Arrow batches of 50 rows. With STAGE:BATCH:KEY the driver holds
at that stage of that micro-batch (tests/spark_gate.py: before-write, mid-write,
after-write, after-commit), says so in Redis at KEY:reached, and waits to be killed.
Without, it runs until every file is written (availableNow).
"""

from __future__ import annotations

import sys

import dynoq
from dynoq.spark import source_options, spark_session


def main(url: str, prefix: str, queue: str, source: str, checkpoint: str, stop: str = "") -> None:
    spark, _ = spark_session(
        "dynoq-stream-test",
        "local[2,4]",
        quiet=True,
        config={
            # a JVM that starts faster (the test starts five drivers)
            "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
            "spark.sql.execution.arrow.maxRecordsPerBatch": "50",
        },
    )
    from spark_gate import StagedDataSource

    spark.dataSource.register(StagedDataSource)
    with dynoq.connect(url, prefix=prefix) as client:
        opts = source_options(client, queue)
    stream = (
        spark.readStream.schema("event_id string, key string, seq long")
        .option("maxFilesPerTrigger", 1)
        .json(source)
    )
    query = (
        stream.writeStream.format("dynoq-staged")
        .options(**opts)
        .option("stopAt", stop)
        .option("idCol", "event_id")
        .option("keyCol", "key")
        .option("batchSize", "50")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:7])
