"""A streaming driver for tests/test_spark_source.py, run as its own process so the test
can SIGKILL it: a keyed queue read with readStream.format("dynoq") and written on with
format("dynoq") into a second keyed queue.

    python tests/spark_source_job.py URL PREFIX SOURCE DEST CHECKPOINT [STAGE:BATCH:KEY]

With STAGE:BATCH:KEY the driver holds at that stage (tests/spark_gate.py: the source's
after-take and read, of its batch number BATCH; the sink's after-write and after-commit,
of Spark's batch id BATCH), says so in Redis at KEY:reached, and waits to be killed.
Without, it runs until the source queue is drained (availableNow).
"""

from __future__ import annotations

import sys

import dynoq
from dynoq.spark import source_options, spark_session


def main(url: str, prefix: str, src: str, dst: str, checkpoint: str, stop: str = "") -> None:
    spark, _ = spark_session(
        "dynoq-source-test",
        "local[2,4]",
        quiet=True,
        config={"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"},
    )
    from spark_gate import SOURCE_STAGES, StagedDataSource, StagedSource

    spark.dataSource.register(StagedDataSource)
    spark.dataSource.register(StagedSource)
    with dynoq.connect(url, prefix=prefix) as client:
        src_opts, dst_opts = source_options(client, src), source_options(client, dst)
    at_source = stop.split(":", 1)[0] in SOURCE_STAGES
    stream = (
        spark.readStream.format("dynoq-staged-source")
        .options(**src_opts)
        .option("group", "pipeline")
        .option("maxMessagesPerTrigger", "100")
        .option("partitionsPerShard", "2")
        .option("stopAt", stop if at_source else "")
        .load()
    )
    query = (
        stream.select("id", "key", "payload")
        .writeStream.format("dynoq-staged")
        .options(**dst_opts)
        .option("stopAt", "" if at_source else stop)
        .option("idCol", "id")
        .option("keyCol", "key")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:7])
