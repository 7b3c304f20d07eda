"""A streaming driver for tests/test_spark_stream.py, run as its own process so the test
can SIGKILL it: JSON files -> format("dynoq") (exactly-once micro-batches).

    python tests/spark_stream_job.py URL PREFIX QUEUE SOURCE CHECKPOINT

One file per micro-batch; a Python UDF sleeps a little per row, so a batch takes long
enough to be killed half-way. Runs until every file is written (availableNow).
"""

from __future__ import annotations

import sys
import time

import dynoq
from dynoq.spark import source_options, spark_session


def main(url: str, prefix: str, queue: str, source: str, checkpoint: str) -> None:
    spark, _ = spark_session("dynoq-stream-test", "local[2,4]", quiet=True, config={
        # a JVM that starts faster (the test starts four drivers)
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"})
    from pyspark.sql import functions as F

    @F.udf(returnType="long", useArrow=False)
    def slowly(seq: int) -> int:
        time.sleep(0.002)
        return seq

    with dynoq.connect(url, prefix=prefix) as client:
        opts = source_options(client, queue)
    stream = (spark.readStream.schema("event_id string, key string, seq long")
              .option("maxFilesPerTrigger", 1).json(source)
              .withColumn("seq", slowly("seq")))
    query = (stream.writeStream.format("dynoq").options(**opts)
             .option("idCol", "event_id").option("keyCol", "key").option("batchSize", "50")
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:6])
